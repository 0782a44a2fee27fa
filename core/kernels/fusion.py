"""Fused projections: q/k/v as one Linear, and the MLP's gate/up as one Linear, in every layer that has Llama's layout.

Why: at batch 1 a decode step is a chain of matrix-vector products, each bound by reading its weight once from
memory, and a Llama layer runs seven of them (q, k, v, o, gate, up, down). The k and v matrices are small (with
grouped-query attention, a quarter or an eighth of q), so on a GPU their own kernels are short, leave most of the
memory bandwidth unused, and each costs a launch. Stacking q/k/v into one weight, and gate/up into another,
turns seven launches into four and gives every product enough rows to stream at full bandwidth. vLLM does the
same (QKVParallelLinear, MergedColumnParallelLinear), and so does gpt-fast (wqkv).

Which modules: those whose `forward` is, token for token, one that this module knows (`ATTENTION_LAYOUTS`,
`MLP_FORWARDS`: transformers 5.24's Llama, Mistral and Mixtral, Qwen2, Qwen3 and Qwen3-MoE, Gemma, Gemma-2,
Gemma-3, Granite and OLMo-2 attentions, and the gate/up MLP they share), checked by a fingerprint of the source, so
a transformers version that changes one of them leaves that module as it is (and the report says so). The fused
attention is one forward for all of them (`FusedAttention`), with what differs between the families spelled out in
its `AttentionLayout`: normalised queries and keys, the sliding window and the logit soft-capping handed to the
attention function, and the family's own rotary and eager-attention functions. Phi-3, GPT-NeoX, Falcon, GPT-2 and
the MoE experts of Mixtral and Qwen3-MoE come with their projections already fused.

The outputs are mathematically the same: row i of the stacked weight produces output i exactly as the separate
Linear did, and the result is split back into q, k, v (gate, up) by their widths. Bitwise equality is not
promised: the stacked product may be blocked differently by the matmul library, so the accumulation order of a
row can change and fp32 results may differ in the last bits (bf16 more visibly, after rounding).

Tensor parallelism (core.parallel.tensor_parallel.shard) shards q/k/v and gate/up by output rows (colwise, DTensor
Shard(0)), and transformers' replacement `forward` on those Linears passes the replicated plain input straight through
and returns this rank's plain slice of the output. The fused weight is the concatenation of this rank's local
shards, a plain tensor, so its output is this rank's q, k and v slices side by side: exactly what the separate
colwise layers returned. o_proj and down_proj (rowwise, with their all-reduce) are left untouched and receive
the same local inputs as before. Under TP the fused Linear holds only this rank's rows, so summing `numel()` over
the parameters no longer counts those rows on every rank (a DTensor's numel is the whole tensor's); see
`FusedLinear.ranks`. (OLMo-2 normalises q and k over all heads, which a shard does not hold: it is not fused
under TP.)

Inference only: the fused weight has no gradient, and under TP the replicated input gets no backward
all-reduce. Fuse before building decode engines or compiling: a compiled forward keeps the old modules.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import io
import sys
import textwrap
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils.deprecation import deprecate_kwarg

from core.kernels.products import decode_product, gemv_takes, library_o_proj, silu
from core.parallel.tensor_parallel import local

QKV = ("q_proj", "k_proj", "v_proj")
GATE_UP = ("gate_proj", "up_proj")


@dataclass(frozen=True)
class AttentionLayout:
    """How a family's attention differs from Llama's around the same q/k/v projections."""

    qk_norm: str | None = None  # RMSNorm of queries and keys: "head" (each head: Qwen3, Gemma-3), "width" (OLMo-2)
    sliding_window: str | None = None  # handed to the attention function from "module" or "config" (the window)
    softcap: bool = False  # hands `attn_logit_softcapping` to the attention function (Gemma-2)


# Fingerprints (`forward_fingerprint`) of the attention forwards this module reproduces, in transformers 5.24.
ATTENTION_LAYOUTS: dict[str, tuple[str, AttentionLayout]] = {
    "fe88212b087a": ("Llama, Gemma, Granite", AttentionLayout()),
    "354daf401f29": ("Mistral, Mixtral", AttentionLayout(sliding_window="config")),
    "fb45542fe83c": ("Qwen2", AttentionLayout(sliding_window="module")),
    "8119205218c2": ("Qwen3, Qwen3-MoE", AttentionLayout(qk_norm="head", sliding_window="module")),
    "d63a18432912": ("Gemma-3", AttentionLayout(qk_norm="head", sliding_window="module")),
    "c8cc60021ab5": ("Gemma-2", AttentionLayout(sliding_window="module", softcap=True)),
    "d2b2abe46995": ("OLMo-2", AttentionLayout(qk_norm="width")),
}
# Fingerprints of MLP forwards that compute down(act(gate(x)) * up(x)) (Llama's, shared by the families above).
MLP_FORWARDS = frozenset({"a4106ca7048d"})


def forward_fingerprint(cls: type) -> str:
    """A short hash of `cls.forward`'s source without decorators, comments or layout: the same for two classes
    whose forwards are the same code, on any Python version."""
    return _fingerprint(inspect.unwrap(cls.forward))


@functools.cache
def _fingerprint(function: Callable[..., Any]) -> str:
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return ""
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
               tokenize.ENCODING, tokenize.ENDMARKER}
    tokens = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in skipped]
    text = "".join(tokens[tokens.index("def"):]) if "def" in tokens else ""
    return hashlib.sha1(text.encode()).hexdigest()[:12]


class FusedLinear(nn.Linear):
    """Several Linears with the same input, stacked along the output features; `split_sizes` are their widths.

    Under tensor parallelism the weight is this rank's rows only, and `ranks` says how many ranks share the
    layer (1 without TP)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, split_sizes: Sequence[int],
                 ranks: int = 1) -> None:
        out_features, in_features = weight.shape
        super().__init__(in_features, out_features, bias=bias is not None, device="meta", dtype=weight.dtype)
        self.weight = nn.Parameter(weight, requires_grad=False)
        if bias is not None:
            self.bias = nn.Parameter(bias, requires_grad=False)
        self.split_sizes = tuple(int(size) for size in split_sizes)
        self.ranks = ranks

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, split_sizes={self.split_sizes}, ranks={self.ranks}"


class FusedAttention(nn.Module):
    """A family's attention with q/k/v computed by one `qkv_proj`; everything after the projections as the family's
    own forward does it (`layout`), with the family's rotary and eager-attention functions. Mixed into a subclass of
    the family's class (`fused_attention_class`)."""

    qkv_proj: FusedLinear
    layout: ClassVar[AttentionLayout]
    rotary: ClassVar[Callable[..., Any]]
    llama_rotary: ClassVar[bool]  # the rotary is Llama's, so core.kernels.decode_layer's q/k/v kernel may do it
    eager_attention: ClassVar[Callable[..., Any]]
    # Its forward looks its attention function up in transformers' registry (core.kernels.attention asks; the class
    # is made with type(), so there is no source of it to read)
    looks_up_attention_functions: ClassVar[bool] = True

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        layout = self.layout

        query, key, value = decode_product(self.qkv_proj, hidden_states).split(self.qkv_proj.split_sizes, dim=-1)
        if layout.qk_norm == "width":
            query, key = self.q_norm(query), self.k_norm(key)
        query, key, value = query.view(hidden_shape), key.view(hidden_shape), value.view(hidden_shape)
        if layout.qk_norm == "head":
            query, key = self.q_norm(query), self.k_norm(key)
        query_states, key_states, value_states = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)

        cos, sin = position_embeddings
        attn_output, attn_weights = self._attend(query_states, key_states, value_states, cos, sin, attention_mask,
                                                 cache, kwargs)

        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return output_projection(self.o_proj, attn_output), attn_weights

    def _attend(self, query_states: torch.Tensor, key_states: torch.Tensor, value_states: torch.Tensor,
                cos: torch.Tensor, sin: torch.Tensor, attention_mask: torch.Tensor | None, cache: Cache | None,
                kwargs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The family's own steps: the rotary embedding, the cache update and the attention function."""
        query_states, key_states = type(self).rotary(query_states, key_states, cos, sin)

        if cache is not None:
            key_states, value_states = cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, type(self).eager_attention
        )
        return attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **self._family_arguments(),
            **kwargs,
        )

    def _family_arguments(self) -> dict[str, Any]:
        layout, extra = self.layout, {}
        if layout.sliding_window == "module":
            extra["sliding_window"] = self.sliding_window
        elif layout.sliding_window == "config":
            extra["sliding_window"] = getattr(self.config, "sliding_window", None)
        if layout.softcap:
            extra["softcap"] = self.attn_logit_softcapping
        return extra


@torch.library.custom_op("syncscope::library_linear", mutates_args=())
def library_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight.T by the BLAS library (cuBLAS on CUDA): an op inductor calls as it is, never decomposes or fuses."""
    return torch.nn.functional.linear(x, weight)


@library_linear.register_fake
def _library_linear_shape(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def output_projection(o_proj: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The attention's output projection. Inside a compile, a plain Linear's product goes to the BLAS library where
    the compile being traced was given the `o_proj` switch's default, "library" (core.kernels.products.traced_with):
    with coordinate-descent tuning (step-graph mode) inductor turns a batch-1 product into a Triton reduction fused
    with the residual add after it, and on the H200 that kernel's tuned configuration took 6x as long in two of
    three fresh Llama-8B compiles (docs/TUNING.md). A Linear whose forward tensor parallelism replaced, or with
    hooks, runs as it is."""
    if gemv_takes(o_proj, x, act_mul=False):
        return decode_product(o_proj, x)
    if torch.compiler.is_compiling() and _plain_linear(o_proj) and library_o_proj():
        out = library_linear(x, o_proj.weight)
        return out if o_proj.bias is None else out + o_proj.bias
    return o_proj(x)


def _plain_linear(module: nn.Module) -> bool:
    return (type(module) is nn.Linear and "forward" not in module.__dict__ and not module._forward_hooks
            and not module._forward_pre_hooks and type(module.weight) is nn.Parameter)


class FusedMLP(nn.Module):
    """An MLP computing down(act(gate(x)) * up(x)), with gate and up computed by one `gate_up_proj`."""

    gate_up_proj: FusedLinear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = decode_product(self.gate_up_proj, x)
        if silu(self.act_fn) and gemv_takes(self.down_proj, gate_up, act_mul=True):
            return torch.ops.syncscope.gemv(gate_up, self.down_proj.weight, self.down_proj.bias, True)
        gate, up = gate_up.split(self.gate_up_proj.split_sizes, dim=-1)
        return decode_product(self.down_proj, self.act_fn(gate) * up)


@functools.cache
def fused_attention_class(cls: type) -> type:
    """The fused subclass of the attention class `cls` (one per class, so `type(module) is` tells them apart)."""
    family = sys.modules[cls.__module__]
    layout = ATTENTION_LAYOUTS.get(forward_fingerprint(cls), ("", AttentionLayout()))[1]
    return type(f"Fused{cls.__name__}", (FusedAttention, cls), {
        "layout": layout, "rotary": staticmethod(family.apply_rotary_pos_emb),
        "llama_rotary": _llama_rotary(family),
        "eager_attention": staticmethod(family.eager_attention_forward), "__module__": __name__})


def _llama_rotary(family: Any) -> bool:
    """Whether the family's rotary embedding is Llama's code (x * cos + rotate_half(x) * sin over the whole head),
    which core.kernels.decode_layer's q/k/v kernel computes."""
    from transformers.models.llama import modeling_llama

    return all(_fingerprint(getattr(family, name, None)) == _fingerprint(getattr(modeling_llama, name))
               for name in ("apply_rotary_pos_emb", "rotate_half"))


@functools.cache
def fused_mlp_class(cls: type) -> type:
    return type(f"Fused{cls.__name__}", (FusedMLP, cls), {"__module__": __name__})


def fuse_projections(model: nn.Module) -> list[str]:
    """Fuse q/k/v and gate/up of every attention / MLP with a known forward, in place; returns what was fused, e.g.
    ["qkv", "gate_up"], or [] when the model has no such modules (or they are already fused)."""
    modules = list(model.modules())
    attentions = [m for m in modules if fusable_attention(m)]
    mlps = [m for m in modules if fusable_mlp(m)]
    del modules
    fused: list[str] = []
    if sum([_fuse(m, fused_attention_class(type(m)), QKV, "qkv_proj") for m in attentions]):
        fused.append("qkv")
    if sum([_fuse(m, fused_mlp_class(type(m)), GATE_UP, "gate_up_proj") for m in mlps]):
        fused.append("gate_up")
    return fused


def fusable_attention(module: nn.Module) -> bool:
    """An attention whose forward is one of ATTENTION_LAYOUTS', from a transformers module that defines the rotary
    and eager-attention functions it calls (not already fused)."""
    cls = type(module)
    if isinstance(module, FusedAttention) or not hasattr(module, "q_proj"):
        return False
    family = sys.modules.get(cls.__module__)
    if not (hasattr(family, "apply_rotary_pos_emb") and hasattr(family, "eager_attention_forward")):
        return False
    layout = ATTENTION_LAYOUTS.get(forward_fingerprint(cls), (None, None))[1]
    return layout is not None and not (layout.qk_norm == "width" and _sharded(module.q_proj))


def fusable_mlp(module: nn.Module) -> bool:
    return (not isinstance(module, FusedMLP) and hasattr(module, "gate_proj")
            and forward_fingerprint(type(module)) in MLP_FORWARDS)


def unknown_layouts(model: nn.Module) -> list[str]:
    """Class names of the attentions with separate q/k/v projections, and MLPs with separate gate/up projections,
    whose forward this module does not know (another transformers version, or another family): left unfused."""
    names = {type(m).__name__ for m in model.modules()
             if (hasattr(m, "q_proj") and not isinstance(m, FusedAttention) and not fusable_attention(m))
             or (hasattr(m, "gate_proj") and hasattr(m, "up_proj") and not fusable_mlp(m))}
    return sorted(names)


def _sharded(projection: object) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(getattr(projection, "weight", None), DTensor)


def _fuse(module: nn.Module, fused_class: type, names: tuple[str, ...], fused_name: str) -> bool:
    """Stack the projections `names` of `module` into one FusedLinear `fused_name` and swap in `fused_class`."""
    projections = [getattr(module, name, None) for name in names]
    if not all(_fusable(p) for p in projections) or not _compatible(projections):
        return False
    fused = _stack(projections)
    for name in names:
        delattr(module, name)
    del projections  # the last references to the old weights: their memory is freed here
    setattr(module, fused_name, fused)
    module.__class__ = fused_class
    return True


def _fusable(projection: object) -> bool:
    """A plain Linear (not a quantized subclass) with real weights, no hooks of its own, and, under tensor
    parallelism, sharded by output rows (whose TP forward returns the local slice, which we reproduce)."""
    if type(projection) is not nn.Linear or projection.weight.is_meta:
        return False
    if projection._forward_hooks or projection._forward_pre_hooks or hasattr(projection, "_hf_hook"):
        return False
    if "forward" in vars(projection) and not getattr(projection, "_is_hooked", False):
        return False  # someone else replaced its forward: fusing would silently drop what it does
    return all(_local_rows(t) for t in (projection.weight, projection.bias) if t is not None)


def _local_rows(tensor: torch.Tensor) -> bool:
    """A plain tensor, or a DTensor on a 1-D mesh sharded over dim 0 (colwise)."""
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(tensor, DTensor):
        return True
    return tensor.device_mesh.ndim == 1 and tuple(tensor.placements) == (Shard(0),)


def _compatible(projections: list[nn.Linear]) -> bool:
    """Same input width, dtype, device and bias presence (and the same kind of tensor) for all of them."""
    weights = [local(p.weight) for p in projections]
    first = weights[0]
    return (all(w.shape[1] == first.shape[1] and w.dtype == first.dtype and w.device == first.device for w in weights)
            and len({p.bias is None for p in projections}) == 1
            and len({_ranks(p.weight) for p in projections}) == 1)


def _ranks(tensor: torch.Tensor) -> int:
    from torch.distributed.tensor import DTensor

    return tensor.device_mesh.size() if isinstance(tensor, DTensor) else 1


@torch.no_grad()
def _stack(projections: list[nn.Linear]) -> FusedLinear:
    """One FusedLinear holding this rank's rows of every projection, in order, as plain tensors."""
    weights = [local(p.weight) for p in projections]
    bias = None
    if projections[0].bias is not None:
        bias = torch.cat([local(p.bias) for p in projections])
    return FusedLinear(torch.cat(weights), bias, [w.shape[0] for w in weights], ranks=_ranks(projections[0].weight))
