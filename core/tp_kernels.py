"""The Triton kernel of core.tp_fusion: all-reduce over symmetric memory, residual add and RMSNorm, one row per program.

Imported only where it runs (CUDA with Triton). The barrier is PyTorch's symmetric-memory protocol (its one-shot
all-reduce, `sync_remote_blocks`): for every peer, one thread turns the flag [program, this rank] in the peer's
signal pad from 0 to 1 with release semantics at system scope (spinning while a previous signal is still unread),
then turns the flag [program, peer] in its own pad from 1 back to 0 with acquire semantics. A CTA barrier before
it orders every thread's write of the partial row ahead of the release; one after it orders every thread's reads
of the peers' rows behind the acquire (vLLM's custom all-reduce orders its two-stage kernel the same way). The pads
go back to 0 after every meeting, so a CUDA graph can replay the kernel without resetting anything.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _signal_and_wait_asm(send_flag, wait_flag):
    """Thread 0 of the program: send (0 -> 1 on the peer's flag, release), then wait (1 -> 0 on ours, acquire)."""
    tl.inline_asm_elementwise(
        """
        {
            .reg .u32 %thread, %old;
            .reg .pred %first, %done;
            mov.u32 %thread, %tid.x;
            setp.eq.u32 %first, %thread, 0;
            @!%first bra skip;
        send:
            atom.global.release.sys.cas.b32 %old, [$1], 0, 1;
            setp.eq.u32 %done, %old, 0;
            @!%done bra send;
        wait:
            atom.global.acquire.sys.cas.b32 %old, [$2], 1, 0;
            setp.eq.u32 %done, %old, 1;
            @!%done bra wait;
        skip:
            mov.u32 $0, 0;
        }
        """,
        "=r,l,l",
        [send_flag, wait_flag],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )


@triton.jit
def _signal_and_wait_atomic(send_flag, wait_flag):
    """The same meeting with Triton's scalar atomics (one thread performs a scalar atomic, the result is shared)."""
    old = tl.atomic_cas(send_flag, 0, 1, sem="release", scope="sys")
    while old != 0:
        old = tl.atomic_cas(send_flag, 0, 1, sem="release", scope="sys")
    old = tl.atomic_cas(wait_flag, 1, 0, sem="acquire", scope="sys")
    while old != 1:
        old = tl.atomic_cas(wait_flag, 1, 0, sem="acquire", scope="sys")


@triton.jit
def _meet_peers(signal_pad_ptrs, row, RANK: tl.constexpr, WORLD: tl.constexpr, ATOMIC_BARRIER: tl.constexpr):
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    own_pad = tl.load(pads + RANK).to(tl.pointer_type(tl.int32))
    for peer in tl.static_range(WORLD):
        if peer != RANK:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.int32))
            send_flag = peer_pad + row * WORLD + RANK
            wait_flag = own_pad + row * WORLD + peer
            if ATOMIC_BARRIER:
                _signal_and_wait_atomic(send_flag, wait_flag)
            else:
                _signal_and_wait_asm(send_flag, wait_flag)


@triton.jit
def fused_all_reduce_add_rms_norm(
    partial_ptr, residual_ptr, residual_row_stride, weight_ptr, out_ptr,
    buffer_ptrs, signal_pad_ptrs, slot_offset, eps,
    HIDDEN: tl.constexpr, BLOCK: tl.constexpr, RANK: tl.constexpr, WORLD: tl.constexpr,
    ATOMIC_BARRIER: tl.constexpr,
):
    """out[row] = [s | rmsnorm(s) * weight] with s = residual[row] + sum over ranks of partial[row]."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < HIDDEN
    dtype = out_ptr.dtype.element_ty
    buffers = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    own = tl.load(buffers + RANK).to(tl.pointer_type(dtype)) + slot_offset + row * HIDDEN

    mine = tl.load(partial_ptr + row * HIDDEN + cols, mask=inside, other=0.0)
    tl.store(own + cols, mine, mask=inside)
    tl.debug_barrier()
    _meet_peers(signal_pad_ptrs, row, RANK, WORLD, ATOMIC_BARRIER)
    tl.debug_barrier()

    total = tl.zeros([BLOCK], dtype=tl.float32)
    for rank in tl.static_range(WORLD):
        if rank == RANK:
            total += mine.to(tl.float32)
        else:
            theirs = tl.load(buffers + rank).to(tl.pointer_type(dtype)) + slot_offset + row * HIDDEN
            total += tl.load(theirs + cols, mask=inside, other=0.0, volatile=True).to(tl.float32)
    reduced = total.to(dtype)

    residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=inside, other=0.0)
    summed = (residual.to(tl.float32) + reduced.to(tl.float32)).to(dtype)
    tl.store(out_ptr + row * 2 * HIDDEN + cols, summed, mask=inside)

    x = summed.to(tl.float32)
    variance = tl.sum(x * x, axis=0) / HIDDEN
    normalised = (x * (1.0 / tl.sqrt(variance + eps))).to(dtype)
    weight = tl.load(weight_ptr + cols, mask=inside, other=0.0)
    normed = (weight.to(tl.float32) * normalised.to(tl.float32)).to(dtype)
    tl.store(out_ptr + row * 2 * HIDDEN + HIDDEN + cols, normed, mask=inside)
