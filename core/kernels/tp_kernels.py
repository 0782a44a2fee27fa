"""core.kernels.tp_fusion's Triton kernels: all-reduce over symmetric memory, residual add and RMSNorm, one row per
program.

Imported only where it runs (CUDA with Triton). Two ways to learn that the peers' partial rows are there:

`fused_all_reduce_add_rms_norm_push` (the default, "push"): each rank stores its partial row straight into every
peer's symmetric buffer, at its own rank's place, and polls its own buffer (volatile loads, no atomics, no flags)
until no element of any peer's row still holds the empty mark, negative zero's bits; then it writes the mark back,
so the slot is empty for its next use. This is the Lamport-style one-shot all-reduce of TensorRT-LLM and FlashInfer:
one NVLink crossing (a posted write) per row instead of a flag round trip and a remote read. A partial's own
negative zeros are sent as positive zeros, which changes no sum but the sign of an exact zero. A slot is used again
only after at least one other call site, and a peer reaches that site only with this rank's row of a later kernel,
which stream order puts after this kernel's clearing stores: a peer never writes into a slot before it is empty.

`fused_all_reduce_add_rms_norm` ("asm" or "atomic", the flags): the barrier is PyTorch's symmetric-memory protocol
(its one-shot all-reduce, `sync_remote_blocks`): for every peer, one thread turns the flag [program, this rank] in
the peer's signal pad from 0 to 1 with release semantics at system scope (spinning while a previous signal is still
unread), then turns the flag [program, peer] in its own pad from 1 back to 0 with acquire semantics. A CTA barrier
before it orders every thread's write of the partial row ahead of the release; one after it orders every thread's
reads of the peers' rows behind the acquire (vLLM's custom all-reduce orders its two-stage kernel the same way). The
pads go back to 0 after every meeting, so a CUDA graph can replay the kernel without resetting anything.
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
    _add_and_normalise(total.to(dtype), residual_ptr, residual_row_stride, weight_ptr, out_ptr, eps, row, cols,
                       inside, HIDDEN)


@triton.jit
def _add_and_normalise(reduced, residual_ptr, residual_row_stride, weight_ptr, out_ptr, eps, row, cols, inside,
                       HIDDEN: tl.constexpr):
    """out[row] = [residual + reduced | rmsnorm(that) * weight], rounded where transformers rounds (tp_fusion doc)."""
    dtype = out_ptr.dtype.element_ty
    residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=inside, other=0.0)
    summed = (residual.to(tl.float32) + reduced.to(tl.float32)).to(dtype)
    tl.store(out_ptr + row * 2 * HIDDEN + cols, summed, mask=inside)

    x = summed.to(tl.float32)
    variance = tl.sum(x * x, axis=0) / HIDDEN
    normalised = (x * (1.0 / tl.sqrt(variance + eps))).to(dtype)
    weight = tl.load(weight_ptr + cols, mask=inside, other=0.0)
    normed = (weight.to(tl.float32) * normalised.to(tl.float32)).to(dtype)
    tl.store(out_ptr + row * 2 * HIDDEN + HIDDEN + cols, normed, mask=inside)


@triton.jit
def fused_all_reduce_add_rms_norm_push(
    partial_ptr, residual_ptr, residual_row_stride, weight_ptr, out_ptr,
    buffer_ptrs, slot_offset, eps,
    HIDDEN: tl.constexpr, BLOCK: tl.constexpr, RANK: tl.constexpr, WORLD: tl.constexpr, ROWS: tl.constexpr,
):
    """The same result as fused_all_reduce_add_rms_norm, the peers' rows pushed and polled for (module doc).

    The buffers' addresses are marked 16-byte aligned (symmetric buffers start on a page, and the caller takes this
    kernel only for rows of a 16-byte multiple), so rows move in 16-byte accesses, not one element at a time."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < HIDDEN
    dtype: tl.constexpr = out_ptr.dtype.element_ty
    bits: tl.constexpr = tl.int16 if dtype.primitive_bitwidth == 16 else tl.int32
    empty: tl.constexpr = -(1 << (dtype.primitive_bitwidth - 1))  # negative zero's bits, the empty mark
    buffers = buffer_ptrs.to(tl.pointer_type(tl.uint64))

    mine = tl.load(partial_ptr + row * HIDDEN + cols, mask=inside, other=0.0)
    mine_bits = mine.to(bits, bitcast=True)
    sent = tl.where(mine_bits == empty, 0, mine_bits).to(bits)
    for peer in tl.static_range(WORLD):
        if peer != RANK:
            theirs = tl.multiple_of(tl.load(buffers + peer).to(tl.pointer_type(bits)), 16)
            tl.store(theirs + slot_offset + (RANK * ROWS + row) * HIDDEN + cols, sent, mask=inside)

    own = tl.multiple_of(tl.load(buffers + RANK).to(tl.pointer_type(bits)), 16) + slot_offset
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for rank in tl.static_range(WORLD):
        if rank == RANK:
            total += mine.to(tl.float32)
        else:
            arrived = own + (rank * ROWS + row) * HIDDEN + cols
            got = tl.load(arrived, mask=inside, other=0, volatile=True)
            while tl.max((got == empty).to(tl.int32), axis=0) > 0:
                got = tl.load(arrived, mask=inside, other=0, volatile=True)
            total += got.to(dtype, bitcast=True).to(tl.float32)
            tl.store(arrived, tl.full([BLOCK], empty, bits), mask=inside)
    _add_and_normalise(total.to(dtype), residual_ptr, residual_row_stride, weight_ptr, out_ptr, eps, row, cols,
                       inside, HIDDEN)
