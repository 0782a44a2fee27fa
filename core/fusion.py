"""Fused projections: q/k/v as one Linear, and the MLP's gate/up as one Linear, in every Llama layer.

Why: at batch 1 a decode step is a chain of matrix-vector products, each bound by reading its weight once from
memory, and a Llama layer runs seven of them (q, k, v, o, gate, up, down). The k and v matrices are small (with
grouped-query attention, a quarter or an eighth of q), so on a GPU their own kernels are short, leave most of the
memory bandwidth unused, and each costs a launch. Stacking q/k/v into one weight, and gate/up into another,
turns seven launches into four and gives every product enough rows to stream at full bandwidth. vLLM does the
same (QKVParallelLinear, MergedColumnParallelLinear), and so does gpt-fast (wqkv).

The outputs are mathematically the same: row i of the stacked weight produces output i exactly as the separate
Linear did, and the result is split back into q, k, v (gate, up) by their widths. Bitwise equality is not
promised: the stacked product may be blocked differently by the matmul library, so the accumulation order of a
row can change and fp32 results may differ in the last bits (bf16 more visibly, after rounding).

Tensor parallelism (core.parallel.shard) shards q/k/v and gate/up by output rows (colwise, DTensor Shard(0)),
and transformers' replacement `forward` on those Linears passes the replicated plain input straight through and
returns this rank's plain slice of the output. The fused weight is the concatenation of this rank's local
shards, a plain tensor, so its output is this rank's q, k and v slices side by side: exactly what the separate
colwise layers returned. o_proj and down_proj (rowwise, with their all-reduce) are left untouched and receive
the same local inputs as before. Under TP the fused Linear holds only this rank's rows, so summing `numel()` over
the parameters no longer counts those rows on every rank (a DTensor's numel is the whole tensor's); see
`FusedLinear.ranks`.

Inference only: the fused weight has no gradient, and under TP the replicated input gets no backward
all-reduce. Fuse before building decode engines or compiling: a compiled forward keeps the old modules.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.models.llama.modeling_llama import (
    ALL_ATTENTION_FUNCTIONS,
    LlamaAttention,
    LlamaMLP,
    apply_rotary_pos_emb,
    eager_attention_forward,
)
from transformers.utils.deprecation import deprecate_kwarg

from core.parallel import local

QKV = ("q_proj", "k_proj", "v_proj")
GATE_UP = ("gate_proj", "up_proj")
# The signature of the LlamaAttention.forward that FusedLlamaAttention.forward copies (transformers 5.24).
_ATTENTION_PARAMETERS = ("self", "hidden_states", "position_embeddings", "attention_mask", "cache", "kwargs")


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


class FusedLlamaAttention(LlamaAttention):
    """LlamaAttention with q/k/v computed by one `qkv_proj`; everything after the projections is unchanged."""

    qkv_proj: FusedLinear

    # A copy of transformers 5.24's LlamaAttention.forward; only the three projection lines differ.
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        query, key, value = self.qkv_proj(hidden_states).split(self.qkv_proj.split_sizes, dim=-1)
        query_states = query.view(hidden_shape).transpose(1, 2)
        key_states = key.view(hidden_shape).transpose(1, 2)
        value_states = value.view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if cache is not None:
            key_states, value_states = cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )

        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling,
            **kwargs,
        )

        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        attn_output = self.o_proj(attn_output)
        return attn_output, attn_weights


class FusedLlamaMLP(LlamaMLP):
    """LlamaMLP with gate and up computed by one `gate_up_proj`: down(act(gate) * up), as before."""

    gate_up_proj: FusedLinear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.gate_up_proj.split_sizes, dim=-1)
        return self.down_proj(self.act_fn(gate) * up)


def fuse_projections(model: nn.Module) -> list[str]:
    """Fuse q/k/v and gate/up of every Llama attention / MLP in place; returns what was fused, e.g. ["qkv", "gate_up"],
    or [] when the model has no such modules (or they are already fused)."""
    modules = list(model.modules())
    attentions = [m for m in modules if _is(m, LlamaAttention)] if _attention_forward_matches() else []
    mlps = [m for m in modules if _is(m, LlamaMLP)]
    del modules
    fused: list[str] = []
    if sum([_fuse(m, FusedLlamaAttention, QKV, "qkv_proj") for m in attentions]):
        fused.append("qkv")
    if sum([_fuse(m, FusedLlamaMLP, GATE_UP, "gate_up_proj") for m in mlps]):
        fused.append("gate_up")
    return fused


def _is(module: nn.Module, cls: type) -> bool:
    """Exactly this class: subclasses (our fused ones, other models' variants) may compute something else."""
    return type(module) is cls


def _attention_forward_matches() -> bool:
    """Whether the installed LlamaAttention.forward has the signature our copy was made from."""
    forward = inspect.unwrap(LlamaAttention.forward)
    return tuple(inspect.signature(forward).parameters) == _ATTENTION_PARAMETERS


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
