"""Tensor parallelism with each all-reduce fused into the residual add and RMSNorm that follow it: one kernel.

Why: at batch 1 a TP decode step is bound by fixed costs, not by the weights each GPU reads. Llama-8B at TP=2
runs about 450 kernels and 65 all-reduces a step (profile in benchmarks/lab/RESULTS.md), and after every all-reduce of
an o_proj or down_proj output comes an add to the residual stream and an RMSNorm: two more kernels, each reading
what the one before wrote. vLLM and TensorRT-LLM fuse the three (FlashInfer's `trtllm_allreduce_fusion`,
TensorRT-LLM's AllReduce+RMSNorm). Here one Triton kernel does it over PyTorch's symmetric memory: each rank
stores its partial row into every peer's symmetric buffer and polls its own until the peers' rows are all there
(the Lamport-style one-shot all-reduce of TensorRT-LLM and FlashInfer: an empty slot holds negative zero's bits,
core.kernels.tp_kernels), sums the rows in rank order in fp32 (so every rank gets the same bits), adds the residual and
normalises. The `tp_barrier` switch (core.tuning) at asm (or atomic) takes the earlier kernel instead: each rank
writes its row into its own buffer, meets the peers at a flag in their signal pads (the barrier of PyTorch's one-shot
all-reduce), and reads their rows over NVLink. The partial sum and the sum with the residual are rounded to the
model's dtype where transformers rounds them (after the all-reduce, after the add), and the norm is LlamaRMSNorm's:
fp32 variance, rounded before the weight's product.

How the model changes (`fuse_all_reduce`, only for decoder layers whose code is, token for token, Llama's, with
LlamaRMSNorm norms, and o_proj / down_proj sharded by rows without bias, as transformers' TP plan shards them):
- o_proj and down_proj become `PartialLinear`: this rank's columns of the weight, no all-reduce, so they return
  this rank's partial sum;
- the decoder layer's forward calls the fused kernel after attention (all-reduce + residual + the layer's
  post-attention norm) and after the MLP (all-reduce + residual + the *next* layer's input norm, or the model's
  final norm after the last layer), and returns both the residual stream and its normalised copy, side by side in
  one tensor twice the hidden width; the next layer takes them apart, and the final norm (`PackedRMSNorm`) returns
  the normalised half. The first layer, fed by the embedding, still normalises its input itself.
So a layer runs two fused kernels where it ran two all-reduces and two add+norm kernels.

Each call site (layer, attention or MLP) has its own slot in the symmetric buffer (a row per rank per token), so a
rank that runs ahead never overwrites a partial that a slower rank is still reading: a slot is written again only a
whole step later, after dozens of meetings. Rows beyond FUSED_ROWS (a long prompt's prefill) take transformers'
path: an NCCL all-reduce, then the add and the norm. Without a CUDA symmetric workspace (gloo on the CPU, tests) the
same op runs that path in PyTorch, so the rewired model is checked on the CPU against the model as transformers
shards it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from transformers.cache_utils import Cache
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaModel, LlamaRMSNorm
from transformers.models.mistral.modeling_mistral import MistralModel
from transformers.models.qwen2.modeling_qwen2 import Qwen2Model
from transformers.utils.deprecation import deprecate_kwarg

from core.kernels.fusion import forward_fingerprint
from core.parallel.tensor_parallel import FUSED, ONE_SHOT, local
from core.tuning import SWITCH

FUSED_ROWS = 8  # tokens per call that the fused kernel takes (decode steps up to batch 8); more take NCCL
_LAYER_FORWARD = forward_fingerprint(LlamaDecoderLayer)
_NORM_FORWARD = forward_fingerprint(LlamaRMSNorm)
# Base models whose forward feeds each layer's output to the next and the last one's to `self.norm`, nothing between.
_MODEL_FORWARDS = frozenset(forward_fingerprint(cls) for cls in (LlamaModel, MistralModel, Qwen2Model))


class PartialLinear(nn.Linear):
    """A row-sharded Linear without its all-reduce: x (this rank's slice of the input) times this rank's columns of
    the weight, so each rank returns its partial sum of the full product. It holds one rank's share of the weight,
    a plain tensor, and `ranks` says how many ranks share it (so the weights are counted whole, core.models.loading)."""

    def __init__(self, weight: torch.Tensor, ranks: int) -> None:
        out_features, in_features = weight.shape
        super().__init__(in_features, out_features, bias=False, device="meta", dtype=weight.dtype)
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.ranks = ranks


class PackedRMSNorm(LlamaRMSNorm):
    """The model's final norm after a fused last layer: its input is [residual | normalised residual] (twice the
    hidden width), and the normalised half is the output. A plain-width input is normalised as before."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        width = self.weight.shape[-1]
        if hidden_states.shape[-1] == 2 * width:
            return hidden_states[..., width:].contiguous()
        return super().forward(hidden_states)


class FusedAllReduceDecoderLayer(LlamaDecoderLayer):
    """Llama's decoder layer with each all-reduce fused into the residual add and the norm after it (module doc)."""

    next_norm: LlamaRMSNorm  # the next layer's input norm, or the model's final norm (not registered: not owned)
    workspace: Workspace

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = False,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        residual, normed = self._unpack(hidden_states)
        partial, _ = self.self_attn(
            hidden_states=normed,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=use_cache,
            position_embeddings=position_embeddings,
            **kwargs,
        )
        packed = all_reduce_add_rms_norm(partial, residual, self.post_attention_layernorm, self.workspace,
                                         2 * self.layer_index)
        residual, normed = self._unpack(packed)
        partial = self.mlp(normed)
        return all_reduce_add_rms_norm(partial, residual, self.next_norm, self.workspace, 2 * self.layer_index + 1)

    @property
    def layer_index(self) -> int:
        return self.self_attn.layer_idx

    def _unpack(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        width = self.post_attention_layernorm.weight.shape[-1]
        if hidden_states.shape[-1] == 2 * width:
            return hidden_states[..., :width], hidden_states[..., width:]
        return hidden_states, self.input_layernorm(hidden_states)


@dataclass
class Workspace:
    """The symmetric buffer the fused kernels publish partial rows in (one slot per call site, FUSED_ROWS rows of each
    rank in each), with its peers' addresses; `handle` None means no symmetric memory (the PyTorch path). `barrier`:
    how its kernel learns that the peers' rows are there (the `tp_barrier` switch): "push" (rows of a 16-byte
    multiple, else "asm"), "asm" or "atomic"."""

    group: Any  # the ProcessGroup
    world_size: int
    rank: int
    hidden: int
    slots: int
    key: int = 0  # its key in _WORKSPACES, where the custom op finds it (ops take no Python objects)
    buffer: torch.Tensor | None = None
    handle: Any = None
    barrier: str = SWITCH["tp_barrier"].default

    @property
    def fused(self) -> bool:
        return self.handle is not None

    @property
    def slot_size(self) -> int:
        return self.world_size * FUSED_ROWS * self.hidden


def fuse_all_reduce(model: Any, *, symmetric: bool = True, barrier: str = SWITCH["tp_barrier"].default) -> str | None:
    """Rewire `model`'s decoder layers as the module doc says; returns None when done, else why not (one sentence).

    `symmetric` allocates the CUDA symmetric workspace (a collective: every rank calls this at the same point);
    without it the op runs its PyTorch path (NCCL or gloo, then the add and the norm); `barrier` is the `tp_barrier`
    switch. The workspace is made before any module changes, so an error there leaves the model as it was."""
    problem = why_not_fusable(model)
    if not problem and symmetric and importlib.util.find_spec("triton") is None:
        problem = "the triton package is not installed"
    if problem:
        return problem
    inner = model.model
    layers = list(inner.layers)
    mesh = model._device_mesh
    group = mesh.get_group()
    hidden = layers[0].post_attention_layernorm.weight.shape[-1]
    workspace = Workspace(group, dist.get_world_size(group), dist.get_rank(group), hidden, 2 * len(layers),
                          key=len(_WORKSPACES), barrier=barrier)
    _WORKSPACES[workspace.key] = workspace
    if symmetric:
        allocate_workspace(workspace, layers[0].post_attention_layernorm.weight)
    for index, layer in enumerate(layers):
        for owner, name in ((layer.self_attn, "o_proj"), (layer.mlp, "down_proj")):
            setattr(owner, name, PartialLinear(local(getattr(owner, name).weight).detach(), workspace.world_size))
        following = layers[index + 1].input_layernorm if index + 1 < len(layers) else inner.norm
        object.__setattr__(layer, "next_norm", following)  # not a submodule: its owner keeps it
        object.__setattr__(layer, "workspace", workspace)
        layer.__class__ = FusedAllReduceDecoderLayer
    inner.norm.__class__ = PackedRMSNorm
    return None


def fuse_decoder_all_reduces(model: Any, kind: str, all_reduce: str = SWITCH["tp_all_reduce"].default,
                             barrier: str = SWITCH["tp_barrier"].default) -> tuple[str, str]:
    """With symmetric memory on (`kind` ONE_SHOT) and the `tp_all_reduce` switch (`all_reduce`) at "auto", fuse each
    decoder layer's all-reduces into the residual add and RMSNorm after them (`fuse_all_reduce`, with the `tp_barrier`
    switch's `barrier`). Returns the kind now in use (FUSED or `kind`) and, where the fusion was wanted but not done,
    why; where done, the barrier."""
    if kind != ONE_SHOT or all_reduce != "auto":
        return kind, ""
    try:
        problem = fuse_all_reduce(model, barrier=barrier)
    except Exception as exc:  # the symmetric buffer could not be made (memory, or no peer access): keep one-shot
        problem = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:120]}"
    if problem:
        return kind, f"not fused with the norms: {problem}"
    return FUSED, f"{SWITCH['tp_barrier'].variable}={barrier}"


def why_not_fusable(model: Any) -> str | None:
    """Why `fuse_all_reduce` would leave `model` as it is, or None: a layout other than Llama's, norms other than
    LlamaRMSNorm, or projections that transformers' TP plan did not shard by rows."""
    inner = getattr(model, "model", None)
    layers = list(getattr(inner, "layers", None) or [])
    if getattr(model, "_device_mesh", None) is None:
        return "not tensor-parallel"
    if not layers:
        return "no decoder layers under model.model"
    if forward_fingerprint(type(inner)) not in _MODEL_FORWARDS:
        return f"{type(inner).__name__}'s forward is not one this fusion knows (Llama's, Mistral's, Qwen2's)"
    if any(isinstance(layer, FusedAllReduceDecoderLayer) for layer in layers):
        return "already fused"
    if any(forward_fingerprint(type(layer)) != _LAYER_FORWARD for layer in layers):
        return f"{type(layers[0]).__name__}'s forward is not Llama's decoder layer"
    norms = [inner.norm] + [n for layer in layers for n in (layer.input_layernorm, layer.post_attention_layernorm)]
    if any(forward_fingerprint(type(norm)) != _NORM_FORWARD for norm in norms):
        return f"{type(norms[0]).__name__} is not LlamaRMSNorm"
    projections = [p for layer in layers for p in (getattr(layer.self_attn, "o_proj", None),
                                                    getattr(layer.mlp, "down_proj", None))]
    if not all(_row_sharded(p) for p in projections):
        return "o_proj / down_proj are not sharded by rows without a bias"
    return None


def _row_sharded(projection: object) -> bool:
    from torch.distributed.tensor import DTensor, Shard

    if type(projection) is not nn.Linear or projection.bias is not None:
        return False
    weight = projection.weight
    return (isinstance(weight, DTensor) and weight.device_mesh.ndim == 1
            and tuple(weight.placements) in ((Shard(1),), (Shard(-1),)))


def allocate_workspace(workspace: Workspace, like: torch.Tensor) -> None:
    """Give `workspace` its symmetric-memory buffer (of `like`'s dtype and device), every slot empty, and meet its
    peers over it."""
    import torch.distributed._symmetric_memory as symm_mem

    workspace.buffer = symm_mem.empty(workspace.slots * workspace.slot_size, dtype=like.dtype, device=like.device)
    _mark_empty(workspace.buffer)
    torch.cuda.synchronize(like.device)  # every slot is empty before any peer can push into it
    workspace.handle = symm_mem.rendezvous(workspace.buffer, workspace.group.group_name)
    dist.barrier(group=workspace.group)


def _mark_empty(buffer: torch.Tensor) -> None:
    """Fill with negative zero's bits, the push kernel's empty mark (core.kernels.tp_kernels)."""
    bits = {2: torch.int16, 4: torch.int32}[buffer.element_size()]
    buffer.view(bits).fill_(torch.iinfo(bits).min)


_WORKSPACES: dict[int, Workspace] = {}


def all_reduce_add_rms_norm(partial: torch.Tensor, residual: torch.Tensor, norm: LlamaRMSNorm,
                            workspace: Workspace, slot: int) -> torch.Tensor:
    """[residual + sum over ranks of partial | norm(that)], the two side by side in the last dimension."""
    rows = partial.numel() // partial.shape[-1]
    if workspace.fused and rows <= FUSED_ROWS:
        return torch.ops.syncscope.all_reduce_add_rms_norm(partial, residual, norm.weight, norm.variance_epsilon,
                                                           workspace.key, slot)
    return reference(partial, residual, norm, workspace.group)


def reference(partial: torch.Tensor, residual: torch.Tensor, norm: LlamaRMSNorm, group: Any) -> torch.Tensor:
    """transformers' path: the all-reduce in place (as RowwiseParallel does it), the add, the norm, packed."""
    dist.all_reduce(partial, group=group)
    summed = residual + partial
    return torch.cat([summed, norm(summed)], dim=-1)


@torch.library.custom_op("syncscope::all_reduce_add_rms_norm", mutates_args=())
def _fused_op(partial: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, workspace_id: int,
              slot: int) -> torch.Tensor:
    workspace = _WORKSPACES[workspace_id]
    hidden = workspace.hidden
    rows = partial.numel() // hidden
    partial_rows = partial.reshape(rows, hidden).contiguous()
    residual_rows = residual.reshape(rows, hidden)
    if residual_rows.stride(-1) != 1:
        residual_rows = residual_rows.contiguous()
    out = partial.new_empty(rows, 2 * hidden)
    with torch.cuda.device(partial.device):  # Triton launches on the current device's stream
        launch_fused_kernel(partial_rows, residual_rows, weight, out, eps, workspace, slot)
    return out.view(*partial.shape[:-1], 2 * hidden)


@_fused_op.register_fake
def _(partial: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, workspace_id: int,
      slot: int) -> torch.Tensor:
    return partial.new_empty(*partial.shape[:-1], 2 * partial.shape[-1])


def launch_fused_kernel(partial: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, out: torch.Tensor,
                        eps: float, workspace: Workspace, slot: int) -> None:
    """One program per row: share the partial rows, sum, add, normalise (core.kernels.tp_kernels)."""
    from core.kernels.tp_kernels import fused_all_reduce_add_rms_norm, fused_all_reduce_add_rms_norm_push

    rows, hidden = partial.shape
    block = 1 << (hidden - 1).bit_length()
    common = dict(HIDDEN=hidden, BLOCK=block, RANK=workspace.rank, WORLD=workspace.world_size,
                  num_warps=16 if hidden > 4096 else 8)
    kind = workspace.barrier
    if kind == "push" and (hidden * partial.element_size()) % 16 == 0:
        fused_all_reduce_add_rms_norm_push[(rows,)](
            partial, residual, residual.stride(0), weight, out, workspace.handle.buffer_ptrs_dev,
            slot * workspace.slot_size, eps, ROWS=FUSED_ROWS, **common)
        return
    fused_all_reduce_add_rms_norm[(rows,)](
        partial, residual, residual.stride(0), weight, out,
        workspace.handle.buffer_ptrs_dev, workspace.handle.signal_pad_ptrs_dev,
        slot * workspace.slot_size, eps, ATOMIC_BARRIER=kind == "atomic", **common)

