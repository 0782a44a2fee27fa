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
into the step's CUDA graph). The default on CUDA (the `decode_attention` switch, core.tuning: auto or triton); the
CPU takes "reduce".
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

from core.kernels import triton_ops_at_import
from core.kernels.reads import reads_first

BLOCK_KEYS = 64  # keys per loop iteration of one program
MAX_SPLITS = 64  # the most programs sharing one KV head's keys


def triton_decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float | None) -> torch.Tensor:
    """One query token per head against the cache: query (B, H, 1, D), key and value (B, KV, L, D) with H a
    multiple of KV, mask None, boolean (True = attend) or additive, shaped (B, 1 or H, 1, L); returns (B, H, 1, D)
    in the query's dtype."""
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    return torch.ops.syncscope.triton_decode_attention(query, key, value, attention_mask, scale)


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


def _launch(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float,
            launch: Any, kernels: tuple[Any, Any], split_keys: int | None = None) -> torch.Tensor:
    """Shape checks, buffers and grids for both kernels; `launch(kernel)` returns the kernel ready for `[grid]`
    (`wrap_triton` inside a compile, the kernel itself otherwise)."""
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
    launch(attend)[(batch * kv_heads, splits)](
        query, key, value, mask_arg, out, partial, stats,
        query.stride(0), query.stride(1), query.stride(3),
        key.stride(0), key.stride(1), key.stride(2), key.stride(3),
        value.stride(0), value.stride(1), value.stride(2), value.stride(3),
        mask.stride(0) if has_mask else 0, mask_head_stride if has_mask else 0, mask.stride(3) if has_mask else 0,
        length, scale,
        SPLIT_LEN=split_len, KV_HEADS=kv_heads, GROUP=group, GROUP_PAD=max(16, _next_power_of_2(group)), HEAD_DIM=dim,
        BLOCK_KEYS=BLOCK_KEYS, HAS_MASK=has_mask, MASK_IS_BOOL=has_mask and mask.dtype == torch.bool,
        SINGLE=splits == 1, PRECISION="ieee" if query.dtype == torch.float32 or _interpreted() else "tf32",
        UPCAST=_interpreted(), READS_FIRST=reads_first(), num_warps=4, num_stages=2)
    if splits > 1:
        launch(combine)[(batch * heads,)](
            partial, stats, out, splits,
            SPLITS_PAD=_next_power_of_2(splits), HEAD_DIM=dim, num_warps=4)
    return out


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
    if hasattr(torch.ops.syncscope, "triton_decode_attention"):
        return
    from torch.library import triton_op, wrap_triton

    @triton_op("syncscope::triton_decode_attention", mutates_args=())
    def op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
           scale: float) -> torch.Tensor:
        return _launch(query, key, value, attention_mask, scale, wrap_triton, _kernels())


if triton_ops_at_import():
    register_triton_decode_attention()
