"""Decode attention without copying the KV cache, in compiled decode steps.

With grouped-query attention (Llama-3: 8 KV heads for 32 or 64 query heads) transformers' SDPA attention has three
routes. Eager decoding packs the query heads onto their KV head (`pack_gqa`), and mask-free calls pass
`enable_gqa=True`. But a compiled step with a mask (every static-cache step has one) takes the third route:
`repeat_kv`, which copies each layer's whole key and value cache, once per query head sharing it, on every step
(docs/TUNING.md has what the copies cost).

`decode_sdpa` is transformers' SDPA attention except in that case (one query token, grouped heads, inside a
compile). There it reads the cache as it is, with one of these kernels (the `decode_attention` switch, core.tuning;
the default, "auto", takes "triton" on CUDA where Triton is installed and takes the head size, else "reduce"):
- "triton": one hand-written Triton kernel per layer (core.kernels.triton_attention), flash-decoding with each KV head's
  query heads together. Side by side it decoded Llama-8B and Llama-70B faster than "reduce", every bf16 trial
  repeating bitwise;
- "reduce": `grouped_decode_attention`, broadcast products and sums that inductor compiles into reductions spread
  over the whole GPU, accumulated in fp32 (the CPU's kernel). Side by side in one run it decoded faster than
  "sdpa", and its bf16 trials repeated bitwise, where the fused kernel's drift past 256 keys (core.measure.identity)
  made every "sdpa" trial differ;
- "split": the same with the keys split into chunks of 64, flash-decoding's way of giving the GPU more rows to
  work on; in the same run no faster than "reduce";
- "sdpa": `scaled_dot_product_attention(..., enable_gqa=True)` with the mask (PyTorch's fused attention kernel).
docs/TUNING.md has the measured rates.
It is registered with transformers' attention and mask interfaces under its own name, so the model's mask is built
exactly as for "sdpa" (or, for a model that runs transformers' "eager" attention, as for "eager", with the family's
own eager function for everything but these steps).

Families: a sliding window reaches these kernels as the mask (the static cache keeps every position, see
core.models.loading.new_static_cache, and the mask leaves out those behind the window); a family's attention scale
(Granite's multiplier, Gemma's query_pre_attn_scalar) as `scaling`; Gemma-2's logit soft-capping, which SDPA cannot do
(so transformers runs Gemma-2 with "eager" attention), is applied by "reduce" and "split", and a soft-capping model
never runs "triton" or "sdpa" here. Models whose every query head has its own KV head copy nothing, and attentions that
choose their attention code by the implementation's name (Falcon's, GPT-2's) would not run this one: both are left
as they are, and the report says why (`use_decode_attention`).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from core.kernels.triton_attention import head_size_fits, takes_shapes, triton_decode_attention
from core.tuning import SWITCH

KERNELS = tuple(choice for choice in SWITCH["decode_attention"].choices if choice != "auto")
# The name each kernel is registered under with transformers; the model's config names the one it runs. Models that
# run transformers' "eager" attention get the same kernels under names of their own, with eager's masks.
IMPLEMENTATIONS = {kernel: f"syncscope_decode_{kernel}" for kernel in KERNELS}
EAGER_IMPLEMENTATIONS = {kernel: f"syncscope_decode_{kernel}_eager" for kernel in KERNELS}
SPLIT_CHUNK = 64  # keys per chunk of split_decode_attention
# Attention arguments that change what attention computes and that these kernels do not compute: with one of them
# the step takes the model's own attention (gpt-oss's sinks, T5-style position biases, returned weights).
_NOT_IN_PLACE = ("position_bias", "s_aux", "output_attentions")
# The eager attention function of each attention class of a model switched to an "eager" implementation here.
_EAGER_FUNCTIONS: dict[type, Callable[..., Any]] = {}


def decode_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                is_causal: bool | None = None, kernel: str = "reduce", eager: bool = False,
                **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' `sdpa_attention_forward` (with `eager`, the family's eager attention function), with grouped
    heads read in place when a compiled step decodes."""
    if _reads_cache_in_place(module, query, kwargs):
        softcap = kwargs.get("softcap")
        if softcap is not None and kernel in ("triton", "sdpa"):
            kernel = "reduce"  # neither soft-caps: the model's attention would otherwise change
        if kernel == "split":
            out = split_decode_attention(query, key, value, attention_mask, scaling, softcap=softcap)
        elif kernel == "triton" and query.is_cuda and takes_shapes(query, key):
            out = triton_decode_attention(query, key, value, attention_mask, scaling)
        elif kernel == "sdpa":
            out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                                 enable_gqa=True)
        else:  # "reduce"; "triton" on the CPU or for a head size its kernels do not take: the same math
            out = grouped_decode_attention(query, key, value, attention_mask, scaling, softcap=softcap)
        return out.transpose(1, 2).contiguous(), None
    if eager:
        if is_causal is not None:
            kwargs["is_causal"] = is_causal
        return _EAGER_FUNCTIONS[type(module)](module, query, key, value, attention_mask, dropout=dropout,
                                              scaling=scaling, **kwargs)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


def resolve_decode_attention(model: Any, kernel: str) -> str:
    """The kernel that will run on this model: "auto" and "triton" are "triton" on CUDA where Triton is installed and
    takes the model (`choose_decode_attention`), else "reduce" (the same math; the report names what ran). ValueError
    for "triton" asked for on CUDA without Triton. Any other choice as it is, but "reduce" for a soft-capping
    model."""
    return choose_decode_attention(model, kernel)[0]


def choose_decode_attention(model: Any, kernel: str) -> tuple[str, str | None]:
    """`resolve_decode_attention`'s kernel, and why Triton (or SDPA) was not taken where it would have been."""
    config = model.config
    softcap = getattr(config, "attn_logit_softcapping", None)
    if kernel not in ("auto", "triton"):
        if kernel == "sdpa" and softcap:
            return "reduce", "compiled decode attention sdpa not used: SDPA cannot soft-cap attention logits"
        return kernel, None
    on_cuda = model.device.type == "cuda"
    installed = importlib.util.find_spec("triton") is not None
    if kernel == "triton" and on_cuda and not installed:
        raise ValueError(f"{SWITCH['decode_attention'].variable}=triton needs the triton package, which PyTorch's "
                         "CUDA builds bring along; it is not installed here")
    if not (on_cuda and installed):
        return "reduce", None
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if not head_size_fits(head_dim):
        return "reduce", (f"triton decode attention not used: its kernels take head sizes that are powers of 2 "
                          f"from 16, and this model's is {head_dim}")
    if softcap:
        return "reduce", ("triton decode attention not used: its kernel does not soft-cap attention logits "
                          "(attn_logit_softcapping)")
    return "triton", None


def grouped_decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, scaling: float | None,
                             softcap: float | None = None) -> torch.Tensor:
    """One query token against the cache, written as broadcast products and sums that inductor turns into a few
    reduction kernels spread over the whole GPU (a fused attention kernel at batch 1 runs one block per head).
    Scores, softmax and the weighted sum are accumulated in fp32. Shapes: query (B, H, 1, D), key and value
    (B, KV, L, D) with H a multiple of KV; returns (B, H, 1, D). With `softcap`, scores are soft-capped as
    Gemma-2's eager attention does: softcap * tanh(score / softcap), before the mask."""
    batch, heads, _, dim = query.shape
    probs = torch.softmax(_grouped_scores(query, key, attention_mask, scaling, softcap), dim=-1)  # (B, KV, G, L)
    out = (probs[..., None] * value[:, :, None].float()).sum(-2)                         # (B, KV, G, D)
    return out.reshape(batch, heads, 1, dim).to(query.dtype)


def split_decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, scaling: float | None,
                           chunk: int = SPLIT_CHUNK, softcap: float | None = None) -> torch.Tensor:
    """`grouped_decode_attention` with the keys split into chunks, as flash-decoding does: each chunk's maximum,
    exponent sum and weighted values are reduced on their own (chunks times more rows to spread over the GPU), then
    combined. A cache whose length is not a multiple of `chunk` takes `grouped_decode_attention`."""
    batch, heads, _, dim = query.shape
    length = key.shape[2]
    if length % chunk or length == chunk:
        return grouped_decode_attention(query, key, value, attention_mask, scaling, softcap)
    chunks = length // chunk
    scores = _grouped_scores(query, key, attention_mask, scaling, softcap).unflatten(-1, (chunks, chunk))
    chunk_max = scores.amax(-1)                                                                   # (B,KV,G,C)
    shift = torch.where(torch.isneginf(chunk_max), 0.0, chunk_max)  # a fully masked chunk adds nothing
    weights = torch.exp(scores - shift[..., None])
    values = value.float().unflatten(2, (chunks, chunk))[:, :, None]                             # (B,KV,1,C,c,D)
    partial = (weights[..., None] * values).sum(-2)                                               # (B,KV,G,C,D)
    rescale = torch.exp(chunk_max - chunk_max.amax(-1, keepdim=True))                             # (B,KV,G,C)
    total = (weights.sum(-1) * rescale).sum(-1)                                                   # (B,KV,G)
    out = (partial * rescale[..., None]).sum(-2) / total[..., None]                               # (B,KV,G,D)
    return out.reshape(batch, heads, 1, dim).to(query.dtype)


def _grouped_scores(query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None,
                    scaling: float | None, softcap: float | None = None) -> torch.Tensor:
    """Scaled, soft-capped, masked fp32 scores of one query token per head against every key: (B, KV, G, L)."""
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.view(batch, kv_heads, heads // kv_heads, 1, dim).float()
    scale = scaling if scaling is not None else dim ** -0.5
    scores = (grouped * key[:, :, None].float()).sum(-1) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is None:
        return scores
    mask = attention_mask
    if mask.shape[1] == heads and heads != kv_heads:  # one mask row per query head: group them like the heads
        mask = mask.reshape(batch, kv_heads, heads // kv_heads, -1)
    return scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask


def _reads_cache_in_place(module: torch.nn.Module, query: torch.Tensor, kwargs: dict[str, Any]) -> bool:
    return (getattr(module, "num_key_value_groups", 1) > 1 and query.shape[2] == 1 and not module.training
            and torch.compiler.is_compiling() and not any(kwargs.get(name) for name in _NOT_IN_PLACE))


def use_decode_attention(model: Any, kernel: str) -> tuple[str | None, str | None]:
    """Switch a model that uses transformers' "sdpa" (or "eager") attention to `decode_sdpa` with `kernel` (one of
    KERNELS, or "auto"), fixed for this model from now on. Returns the kernel it runs (None when the model is left as
    it is) and a sentence saying why a kernel was not used, or None."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    why_not = _why_not_decode_attention(model)
    if why_not:
        return None, f"no compiled decode attention: {why_not}"
    kernel, not_taken = choose_decode_attention(model, kernel)
    eager = model.config._attn_implementation == "eager"
    if eager:
        _EAGER_FUNCTIONS.update((type(m), _eager_function(m)) for m in _attentions(model))
    for name in KERNELS:
        names = EAGER_IMPLEMENTATIONS if eager else IMPLEMENTATIONS
        ALL_ATTENTION_FUNCTIONS.register(names[name], functools.partial(decode_sdpa, kernel=name, eager=eager))
        ALL_MASK_ATTENTION_FUNCTIONS.register(names[name], ALL_MASK_ATTENTION_FUNCTIONS["eager"] if eager
                                              else mask_without_host_reads(ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]))
    implementation = (EAGER_IMPLEMENTATIONS if eager else IMPLEMENTATIONS)[kernel]
    model.set_attn_implementation(implementation)
    if model.config._attn_implementation != implementation:
        return None, "no compiled decode attention: transformers did not accept it for this model"
    return kernel, not_taken


def mask_without_host_reads(mask_function: Callable[..., Any]) -> Callable[..., Any]:
    """transformers' SDPA mask function, except that a decode step given a padding mask builds the mask at once.

    Given one, transformers first reads it on the host (`_ignore_causal_mask_sdpa`: are all its entries ones?) to see
    whether it could leave the mask out, a sync on every dynamic-cache decode step. core.loops passes a decode step a
    mask only when a row is padded, where the answer is no and the mask is built anyway: the same mask, no read.
    (A static cache's steps never try to leave it out, and eager's mask function never does.)"""

    @functools.wraps(mask_function)
    def build(*args: Any, q_length: int | None = None, attention_mask: Any = None, allow_is_causal_skip: bool = True,
              **kwargs: Any) -> Any:
        if q_length == 1 and attention_mask is not None:
            allow_is_causal_skip = False
        return mask_function(*args, q_length=q_length, attention_mask=attention_mask,
                             allow_is_causal_skip=allow_is_causal_skip, **kwargs)

    return build


def _why_not_decode_attention(model: Any) -> str | None:
    """Why the compiled decode attention would change nothing, or not what it should, for this model; else None."""
    implementation = getattr(model.config, "_attn_implementation", None)
    if implementation not in ("sdpa", "eager"):
        return f"the model runs {implementation!r} attention, not transformers' sdpa or eager"
    attentions = _attentions(model)
    if not attentions:
        return "no attention module with grouped KV heads found"
    own_dispatch = sorted({type(m).__name__ for m in attentions if not _dispatches(type(m))})
    if own_dispatch:
        return f"{', '.join(own_dispatch)} chooses its attention code by the implementation's name"
    if not any(getattr(m, "num_key_value_groups", 1) > 1 for m in attentions):
        return "every query head has its own KV head, so compiled steps copy no cache"
    return None


def _attentions(model: Any) -> list[torch.nn.Module]:
    """The model's attention modules (those that hold the attention's scale, or whose class says it)."""
    return [m for m in model.modules()
            if hasattr(m, "num_key_value_groups") or type(m).__name__.endswith("Attention")]


@functools.cache
def _dispatches(cls: type) -> bool:
    """Whether `cls` looks its attention function up in transformers' registry, without special-casing names."""
    if getattr(cls, "looks_up_attention_functions", False):  # core.kernels.fusion's FusedAttention says so
        return True
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return False
    return "ALL_ATTENTION_FUNCTIONS" in source and "_attn_implementation ==" not in source


def _eager_function(module: torch.nn.Module) -> Callable[..., Any]:
    """The eager attention function that `module`'s forward falls back to (its family's)."""
    own = getattr(type(module), "eager_attention", None)
    if own is not None:
        return own
    return sys.modules[type(module).__module__].eager_attention_forward
