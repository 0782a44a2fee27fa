"""Decode attention without copying the KV cache, in compiled decode steps.

With grouped-query attention (Llama-3: 8 KV heads for 32 or 64 query heads) transformers' SDPA attention has three
routes. Eager decoding packs the query heads onto their KV head (`pack_gqa`), and mask-free calls pass
`enable_gqa=True`. But a compiled step with a mask (every static-cache step has one) takes the third route:
`repeat_kv`, which copies each layer's whole key and value cache, once per query head sharing it, on every step.
Measured on the H200 (Llama-8B shape, TP=2, 512-slot cache): 64 copy kernels per step, 0.22 ms of a 3.9 ms step.

`decode_sdpa` is transformers' SDPA attention except in that case (one query token, grouped heads, inside a
compile). There it reads the cache as it is, with one of these kernels (SYNCSCOPE_DECODE_ATTENTION; the default,
"auto", takes "triton" on CUDA where Triton is installed and takes the head size, else "reduce"):
- "triton": one hand-written Triton kernel per layer (core.triton_attention), flash-decoding with each KV head's
  query heads together. Side by side on two H200s (TP=2, step-graph, 512-slot cache) it decoded Llama-8B at 287.3
  tok/s against 272.7 with "reduce", and Llama-70B at 51.9 against 49.3 (both with safe PDL), every bf16 trial
  repeating bitwise (h200-2026-11-30);
- "reduce": `grouped_decode_attention`, broadcast products and sums that inductor compiles into reductions spread
  over the whole GPU, accumulated in fp32 (the CPU's kernel). Side by side in one run on two H200s (Llama-8B, TP=2,
  step-graph) it decoded at 277.6 tok/s against 256.3 with "sdpa", and its bf16 trials repeated bitwise, where the
  fused kernel's drift past 256 keys (core.identity) made every "sdpa" trial differ;
- "split": the same with the keys split into chunks of 64, flash-decoding's way of giving the GPU more rows to
  work on; in the same run on two H200s no faster than "reduce" (254.4 against 256.2 tok/s);
- "sdpa": `scaled_dot_product_attention(..., enable_gqa=True)` with the mask (cuDNN's attention on the H200).
It is registered with transformers' attention and mask interfaces under its own name, so the model's mask is built
exactly as for "sdpa".
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import torch
import torch.nn.functional as F

from core.options import DECODE_ATTENTION_CHOICES, DECODE_ATTENTION_ENV, DECODE_ATTENTION_KERNELS, env_choice
from core.triton_attention import head_size_fits, takes_shapes, triton_decode_attention

KERNELS = DECODE_ATTENTION_KERNELS
# The name each kernel is registered under with transformers; the model's config names the one it runs.
IMPLEMENTATIONS = {kernel: f"syncscope_decode_{kernel}" for kernel in KERNELS}
SPLIT_CHUNK = 64  # keys per chunk of split_decode_attention


def decode_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                is_causal: bool | None = None, kernel: str = "reduce", **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' `sdpa_attention_forward`, with grouped heads read in place when a compiled step decodes."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if _reads_cache_in_place(module, query, kwargs):
        if kernel == "reduce":
            out = grouped_decode_attention(query, key, value, attention_mask, scaling)
        elif kernel == "split":
            out = split_decode_attention(query, key, value, attention_mask, scaling)
        elif kernel == "triton" and query.is_cuda and takes_shapes(query, key):
            out = triton_decode_attention(query, key, value, attention_mask, scaling)
        elif kernel == "triton":  # the CPU, or a head size the kernels do not take: the same math as reductions
            out = grouped_decode_attention(query, key, value, attention_mask, scaling)
        else:
            out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                                 enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


def decode_attention_kernel() -> str:
    """"auto" (the default: `resolve_decode_attention` picks when the model is known), "triton"
    (core.triton_attention), "reduce" (grouped_decode_attention), "split" (split_decode_attention) or "sdpa"
    (PyTorch's fused attention), from SYNCSCOPE_DECODE_ATTENTION."""
    return env_choice(DECODE_ATTENTION_ENV, DECODE_ATTENTION_CHOICES)


def resolve_decode_attention(model: Any, kernel: str) -> str:
    """The kernel that will run on this model: "auto" and "triton" are "triton" on CUDA where Triton is installed and
    takes the model's head size, else "reduce" (the same math; the report names what ran). ValueError for "triton"
    asked for on CUDA without Triton. Any other choice as it is."""
    if kernel not in ("auto", "triton"):
        return kernel
    on_cuda = model.device.type == "cuda"
    installed = importlib.util.find_spec("triton") is not None
    if kernel == "triton" and on_cuda and not installed:
        raise ValueError(f"{DECODE_ATTENTION_ENV}=triton needs the triton package, which PyTorch's CUDA builds bring "
                         f"along; it is not installed here")
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return "triton" if on_cuda and installed and head_size_fits(head_dim) else "reduce"


def grouped_decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, scaling: float | None) -> torch.Tensor:
    """One query token against the cache, written as broadcast products and sums that inductor turns into a few
    reduction kernels spread over the whole GPU (a fused attention kernel at batch 1 runs one block per head).
    Scores, softmax and the weighted sum are accumulated in fp32. Shapes: query (B, H, 1, D), key and value
    (B, KV, L, D) with H a multiple of KV; returns (B, H, 1, D)."""
    batch, heads, _, dim = query.shape
    probs = torch.softmax(_grouped_scores(query, key, attention_mask, scaling), dim=-1)   # (B, KV, G, L)
    out = (probs[..., None] * value[:, :, None].float()).sum(-2)                         # (B, KV, G, D)
    return out.reshape(batch, heads, 1, dim).to(query.dtype)


def split_decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, scaling: float | None,
                           chunk: int = SPLIT_CHUNK) -> torch.Tensor:
    """`grouped_decode_attention` with the keys split into chunks, as flash-decoding does: each chunk's maximum,
    exponent sum and weighted values are reduced on their own (chunks times more rows to spread over the GPU), then
    combined. A cache whose length is not a multiple of `chunk` takes `grouped_decode_attention`."""
    batch, heads, _, dim = query.shape
    length = key.shape[2]
    if length % chunk or length == chunk:
        return grouped_decode_attention(query, key, value, attention_mask, scaling)
    chunks = length // chunk
    scores = _grouped_scores(query, key, attention_mask, scaling).unflatten(-1, (chunks, chunk))  # (B,KV,G,C,c)
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
                    scaling: float | None) -> torch.Tensor:
    """Scaled, masked fp32 scores of one query token per head against every key: (B, KV, G, L)."""
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.view(batch, kv_heads, heads // kv_heads, 1, dim).float()
    scale = scaling if scaling is not None else dim ** -0.5
    scores = (grouped * key[:, :, None].float()).sum(-1) * scale
    if attention_mask is None:
        return scores
    mask = attention_mask
    if mask.shape[1] == heads and heads != kv_heads:  # one mask row per query head: group them like the heads
        mask = mask.reshape(batch, kv_heads, heads // kv_heads, -1)
    return scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask


def _reads_cache_in_place(module: torch.nn.Module, query: torch.Tensor, kwargs: dict[str, Any]) -> bool:
    return (getattr(module, "num_key_value_groups", 1) > 1 and query.shape[2] == 1 and not module.training
            and torch.compiler.is_compiling() and kwargs.get("position_bias") is None
            and kwargs.get("softcap") is None and not kwargs.get("output_attentions", False))


def use_decode_attention(model: Any, kernel: str) -> str | None:
    """Switch a model that uses transformers' "sdpa" attention to `decode_sdpa` with `kernel` (one of KERNELS, or
    "auto"), fixed for this model from now on; the kernel it runs, or None when the model uses another attention."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return None
    kernel = resolve_decode_attention(model, kernel)

    for name, implementation in IMPLEMENTATIONS.items():
        ALL_ATTENTION_FUNCTIONS.register(implementation, functools.partial(decode_sdpa, kernel=name))
        ALL_MASK_ATTENTION_FUNCTIONS.register(implementation, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    model.set_attn_implementation(IMPLEMENTATIONS[kernel])
    return kernel if model.config._attn_implementation == IMPLEMENTATIONS[kernel] else None
