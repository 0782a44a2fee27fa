"""How a kernel's programs share an L2 prefetch of a weight the next kernel reads (SYNCSCOPE_ATTENTION_PREFETCH,
SYNCSCOPE_PRODUCT_PREFETCH): each of them, once its own reads are done, asks for a few contiguous pieces with Hopper's
bulk prefetch (`triton_gemv_kernel.bulk_prefetch_l2`), whose address and size are multiples of 16 bytes."""

from __future__ import annotations

import os

import torch

from core.kernels.pdl import hopper_or_newer

PREFETCH_ALIGN = 16  # bytes: a bulk prefetch's address and size are multiples of it


def prefetch_pieces(ahead: torch.Tensor | None, programs: int, pieces: int,
                    limit_bytes: int | None = None) -> tuple[int, int]:
    """How `programs` programs of `pieces` pieces each share the L2 prefetch of `ahead` (of its first `limit_bytes`
    at most): the elements of a piece (a multiple of 16 bytes) and the last start, where the pieces past the end go;
    (0, 0) where there is nothing to prefetch or the kernel cannot (not a Hopper or newer GPU, Triton's interpreter,
    which runs no inline assembly, a weight not contiguous or not 16 bytes into its storage). It reads only the
    tensor's metadata, so it answers the same for the fake tensors a compile traces with."""
    if (ahead is None or os.environ.get("TRITON_INTERPRET") == "1" or not hopper_or_newer(ahead.device)
            or not ahead.is_contiguous()):
        return 0, 0
    size = ahead.element_size()
    # From its storage's start, which PyTorch's allocators align to at least 256 bytes: inside a compile the tensor is
    # a fake one, with no address to ask
    if ahead.storage_offset() * size % PREFETCH_ALIGN or ahead.numel() * size % PREFETCH_ALIGN:
        return 0, 0
    per_align = PREFETCH_ALIGN // size
    wanted = ahead.numel() if limit_bytes is None else min(ahead.numel(), _floor_to(limit_bytes // size, per_align))
    piece = _ceil_to(-(-wanted // (programs * pieces)), per_align)
    return piece, wanted - piece


def _ceil_to(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _floor_to(n: int, multiple: int) -> int:
    return n // multiple * multiple
