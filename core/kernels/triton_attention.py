"""Decode attention as one Triton kernel per layer (flash-decoding with grouped heads), for CUDA decode steps.

The "reduce" decode attention (core.kernels.attention) compiles into three inductor kernels per layer, and cuDNN's
fused kernel is hardly faster (docs/TUNING.md has the times). The work is tiny (at 512 keys, Llama-8B shape, TP=2,
each rank reads 0.6 MB of K/V per step); what costs is kernels and their latency. Here one program handles one KV
head and all the query heads that share it, so each key and value is read once, and streams the keys in blocks with
an online softmax in fp32. Scores are tensor-core products of the bf16 query and keys, exact in fp32 and summed in
fp32; the probabilities meet the values in TF32 (flash-attention rounds them to bf16); an fp32 model gets fp32
products. At batch 1 that is only one program per KV head (4 per GPU for Llama-8B at TP=2), so the keys are split
over several programs, enough to give every SM one (flash-decoding's heuristic, at least BLOCK_KEYS keys each), and a
second small kernel combines their partial results; when one program per KV head already fills the GPU it is one
kernel. The split depends only on the shapes and the GPU, and the order of every sum is fixed, so results repeat
bitwise.

It is registered as a `torch.library.triton_op`, which inductor compiles into its graph like its own kernels (and so
into the step's CUDA graph). The default on CUDA (SYNCSCOPE_DECODE_ATTENTION=auto or triton); the CPU takes "reduce".
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import torch

from core.kernels import triton_ops_at_import
from core.kernels.pdl import kernel_pdl_arguments
from core.kernels.prefetch import prefetch_pieces

BLOCK_KEYS = 64  # keys per loop iteration of one program
MAX_SPLITS = 64  # the most programs sharing one KV head's keys


def triton_decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float | None,
                            ahead: torch.Tensor | None = None) -> torch.Tensor:
    """One query token per head against the cache: query (B, H, 1, D), key and value (B, KV, L, D) with H a
    multiple of KV, mask None, boolean (True = attend) or additive, shaped (B, 1 or H, 1, L); returns (B, H, 1, D)
    in the query's dtype. `ahead`: a weight the kernel asks L2 for once its own reads are done, where it can
    (core.kernels.prefetch)."""
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    return torch.ops.syncscope.triton_decode_attention(query, key, value, attention_mask, scale, ahead)


def triton_append_decode_attention(query: torch.Tensor, new: NewToken, key_cache: torch.Tensor,
                                   value_cache: torch.Tensor, attention_mask: torch.Tensor | None,
                                   scaling: float | None) -> torch.Tensor:
    """`triton_decode_attention` for a query and a new token not yet turned by the rotary embedding, nor in the
    cache: one kernel turns both, writes the token's key and value at the cache's length, attends over the cache
    and moves the length on (what transformers' rotary, `StaticLayer.update` and the attention do in five)."""
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    return torch.ops.syncscope.triton_append_decode_attention(
        query, new.key, new.value, new.cos, new.sin, key_cache, value_cache, new.slot, new.semaphores,
        attention_mask, scale)


def takes_shapes(query: torch.Tensor, key: torch.Tensor) -> bool:
    """Whether the kernels handle these shapes: one query token, query heads a multiple of KV heads, and a head size
    that is a power of 2 of at least 16 (Llama's 64 and 128 are)."""
    return (query.dim() == 4 and query.shape[2] == 1 and query.shape[1] % key.shape[1] == 0
            and head_size_fits(query.shape[-1]))


def head_size_fits(dim: int) -> bool:
    """A head size the kernels take: a power of 2 of at least 16."""
    return dim >= 16 and dim & (dim - 1) == 0


def keys_per_program(length: int, rows: int, programs_wanted: int) -> int:
    """How many keys each program takes, a whole number of blocks: enough programs for `programs_wanted` (the GPU's
    SM count) over `rows` (batch x KV heads), at most MAX_SPLITS per row, at least one block of keys each."""
    splits = max(1, min(-(-programs_wanted // rows), MAX_SPLITS, -(-length // BLOCK_KEYS)))
    return _ceil_to(-(-length // splits), BLOCK_KEYS)


PREFETCH_PIECES = 128  # pieces of `ahead` each program asks L2 for: one per thread of its 4 warps


@dataclass(frozen=True)
class NewToken:
    """What the appending kernel takes besides the query and the cache: the new token's key and value before the
    cache holds them, (B, KV, 1, D), its rotary cos and sin, (B, D) or (B, 1, D), the cache's length (a 0-d integer
    tensor: the slot the token goes to, moved on by one), and a zeroed int32 counter buffer of at least B x KV + 1
    entries."""

    key: torch.Tensor
    value: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    slot: torch.Tensor
    semaphores: torch.Tensor


def _launch(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float,
            launch: Any, kernels: tuple[Any, Any], split_keys: int | None = None,
            new: NewToken | None = None, ahead: torch.Tensor | None = None) -> torch.Tensor:
    """Shape checks, buffers and grids for both kernels; `launch(kernel)` returns the kernel ready for `[grid]`
    (`wrap_triton` inside a compile, the kernel itself otherwise). With `new`, one kernel also turns the query and
    the new key by the rotary embedding, writes the key and value into the cache (`key`, `value`) and combines its
    own splits. `ahead`: a weight the programs ask L2 for once their own reads are done (not with `new`)."""
    attend, combine = kernels
    batch, heads, _, dim = query.shape
    _, kv_heads, length, _ = key.shape
    if not takes_shapes(query, key):
        raise ValueError(f"triton decode attention takes one query token and a power-of-2 head size of at least 16, "
                         f"with query heads a multiple of KV heads; got query {tuple(query.shape)}, "
                         f"key {tuple(key.shape)}")
    group = heads // kv_heads
    if split_keys is None:
        split_len = keys_per_program(length, batch * kv_heads, _sm_count(query.device))
    else:
        split_len = _ceil_to(min(split_keys, length), BLOCK_KEYS)
    splits = -(-length // split_len)
    out = torch.empty((batch, heads, 1, dim), device=query.device, dtype=query.dtype)
    if splits > 1:
        partial = torch.empty((batch, heads, splits, dim), device=query.device, dtype=torch.float32)
        stats = torch.empty((batch, heads, splits, 2), device=query.device, dtype=torch.float32)
    else:
        partial = stats = out  # not read: the single program writes `out` itself
    has_mask = mask is not None
    if mask is not None:
        mask = mask.expand(batch, mask.shape[1], 1, length)
        mask_head_stride = mask.stride(1) if mask.shape[1] > 1 else 0
    mask_arg = mask if mask is not None else query
    token_args = _token_arguments(new, query)
    piece, last = prefetch_pieces(ahead if new is None else None, batch * kv_heads * splits, PREFETCH_PIECES)
    launcher = launch(attend)
    pdl = kernel_pdl_arguments(query.device, traced=launcher is not attend)
    launcher[(batch * kv_heads, splits)](
        query, key, value, mask_arg, out, partial, stats, *token_args, ahead if piece else query,
        query.stride(0), query.stride(1), query.stride(3),
        key.stride(0), key.stride(1), key.stride(2), key.stride(3),
        value.stride(0), value.stride(1), value.stride(2), value.stride(3),
        mask.stride(0) if has_mask else 0, mask_head_stride if has_mask else 0, mask.stride(3) if has_mask else 0,
        *_token_strides(new),
        length, scale, last,
        SPLIT_LEN=split_len, KV_HEADS=kv_heads, GROUP=group, GROUP_PAD=max(16, _next_power_of_2(group)), HEAD_DIM=dim,
        BLOCK_KEYS=BLOCK_KEYS, HAS_MASK=has_mask, MASK_IS_BOOL=has_mask and mask.dtype == torch.bool,
        SINGLE=splits == 1, PRECISION="ieee" if query.dtype == torch.float32 or _interpreted() else "tf32",
        UPCAST=_interpreted(), APPEND=new is not None, SPLITS_PAD=_next_power_of_2(splits),
        GROUP_POW2=_next_power_of_2(group), **pdl, AHEAD_PIECE=piece, AHEAD_PIECES=PREFETCH_PIECES,
        num_warps=4, num_stages=2)
    if splits > 1 and new is None:
        launch(combine)[(batch * heads,)](
            partial, stats, out, splits,
            SPLITS_PAD=_next_power_of_2(splits), HEAD_DIM=dim, **pdl, num_warps=4)
    return out


def _token_arguments(new: NewToken | None, placeholder: torch.Tensor) -> tuple[torch.Tensor, ...]:
    if new is None:
        return (placeholder,) * 6  # not read without APPEND
    return new.key, new.value, new.cos, new.sin, new.slot, new.semaphores


def _token_strides(new: NewToken | None) -> tuple[int, ...]:
    if new is None:
        return (0,) * 8
    if new.cos.stride() != new.sin.stride():
        raise ValueError("the rotary cos and sin must share their strides")
    return (new.key.stride(0), new.key.stride(1), new.key.stride(3),
            new.value.stride(0), new.value.stride(1), new.value.stride(3),
            new.cos.stride(0), new.cos.stride(-1))


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 1  # Triton's interpreter on the CPU: one program per row unless a test asks for a split
    return torch.cuda.get_device_properties(device).multi_processor_count


def _interpreted() -> bool:
    """Under Triton's CPU interpreter (TRITON_INTERPRET=1), whose dot of bf16 operands is wrong, the query and keys
    are widened to fp32 first; on a GPU they meet on the tensor cores as they are."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _ceil_to(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@functools.cache
def _kernels() -> tuple[Any, Any]:
    from core.kernels.triton_decode_kernels import attend, combine

    return attend, combine


def register_triton_decode_attention() -> None:
    """Register the kernels as the operator `syncscope::triton_decode_attention` (once; when this module is imported
    where core.kernels.triton_ops_at_import says: compiled code cannot create an operator, since dynamo traces into
    whatever does)."""
    if hasattr(torch.ops.syncscope, "triton_append_decode_attention"):
        return
    from torch.library import triton_op, wrap_triton

    @triton_op("syncscope::triton_decode_attention", mutates_args=())
    def op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
           scale: float, ahead: torch.Tensor | None = None) -> torch.Tensor:
        return _launch(query, key, value, attention_mask, scale, wrap_triton, _kernels(), ahead=ahead)

    @triton_op("syncscope::triton_append_decode_attention",
               mutates_args=("key_cache", "value_cache", "slot", "semaphores"))
    def append_op(query: torch.Tensor, new_key: torch.Tensor, new_value: torch.Tensor, cos: torch.Tensor,
                  sin: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, slot: torch.Tensor,
                  semaphores: torch.Tensor, attention_mask: torch.Tensor | None, scale: float) -> torch.Tensor:
        new = NewToken(new_key, new_value, cos, sin, slot, semaphores)
        return _launch(query, key_cache, value_cache, attention_mask, scale, wrap_triton, _kernels(), new=new)


if triton_ops_at_import():
    register_triton_decode_attention()
