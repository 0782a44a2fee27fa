"""The Triton kernels of core.kernels.triton_gemv and core.kernels.decode_layer (imported only where Triton is
installed): `gemv`, one batch-1 product with what a decoder layer does around it (the RMSNorm before, the activation
before, the residual add after), and `qkv_gemv`, the layer's q/k/v product with its norm before and the rotary
embedding and the cache write after. Module-level functions, as Triton's interpreter needs them."""

import triton
import triton.language as tl


@triton.jit
def inverse_rms(squares, k: tl.constexpr, eps):
    """1 / sqrt(mean(x^2) + eps) from the row's squares summed by block, in fp32, as LlamaRMSNorm computes it."""
    return tl.rsqrt((tl.sum(squares, 0) / k + eps).to(tl.float32))  # a compile passes a Python float as fp64


@triton.jit
def gemv(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    norm_ptr,
    residual_ptr,
    length_ptr,
    n,
    w_row_stride,
    eps,
    k: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT_MUL: tl.constexpr,
    NORM: tl.constexpr,
    RESIDUAL: tl.constexpr,
    ADVANCE: tl.constexpr,
    EVEN_N: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    READS_FIRST: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    # READS_FIRST (the `kernel_reads` switch, core.kernels.reads): what the rows add after the product, read before
    # it, where a read after the sum is one more round trip to memory at the end of every program; else where used.
    if READS_FIRST:
        if HAS_BIAS:
            bias = tl.load(bias_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
        if RESIDUAL:
            residual = tl.load(residual_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        col_ok = cols < k
        x = tl.load(x_ptr + cols, mask=col_ok, other=0.0)  # the input is small and stays in cache: no fast path
        if ACT_MUL:
            gate = x.to(tl.float32)
            up = tl.load(x_ptr + k + cols, mask=col_ok, other=0.0).to(tl.float32)
            x = (gate * tl.sigmoid(gate) * up).to(x_ptr.dtype.element_ty)
        if NORM:  # the norm's weight now, the inverse RMS once the row is summed (both scale the product linearly)
            squares += x.to(tl.float32) * x.to(tl.float32)
            x = x.to(tl.float32) * tl.load(norm_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        pointers = w_ptr + rows[:, None] * w_row_stride + cols[None, :]
        if EVEN_N and EVEN_K:
            w = tl.load(pointers, eviction_policy="evict_first")
        else:
            w = tl.load(pointers, mask=row_ok[:, None] & col_ok[None, :], other=0.0, eviction_policy="evict_first")
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    out = tl.sum(acc, axis=1)
    if NORM:
        out *= inverse_rms(squares, k, eps)
    if HAS_BIAS:
        if not READS_FIRST:
            bias = tl.load(bias_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
        out += bias
    if RESIDUAL:  # the product rounded as the Linear returns it, then the residual add, rounded once more
        out = out.to(out_ptr.dtype.element_ty).to(tl.float32)
        if not READS_FIRST:
            residual = tl.load(residual_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
        out += residual
    tl.store(out_ptr + rows, out.to(out_ptr.dtype.element_ty), mask=row_ok)
    # the cache's length moved on by the token, once (what StaticLayer.update does); the constexpr test stays apart
    if ADVANCE:  # noqa: SIM102
        if tl.program_id(0) == 0:
            tl.store(length_ptr, tl.load(length_ptr) + 1)


@triton.jit
def qkv_gemv(
    x_ptr,
    norm_ptr,
    w_ptr,
    bias_ptr,
    cos_ptr,
    sin_ptr,
    q_ptr,
    key_ptr,
    value_ptr,
    length_ptr,
    w_row_stride,
    cos_stride,
    cache_head_stride,
    cache_slot_stride,
    eps,
    k: tl.constexpr,
    HEADS: tl.constexpr,
    KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_K: tl.constexpr,
    READS_FIRST: tl.constexpr,
):
    """Each program owns BLOCK_P pairs of rows (d, d + HEAD_DIM / 2) of one head of the stacked q/k/v weight, the
    pairs the rotary embedding mixes; heads are q's, then k's, then v's."""
    half: tl.constexpr = HEAD_DIM // 2
    blocks_per_head: tl.constexpr = half // BLOCK_P
    head = tl.program_id(0) // blocks_per_head
    pairs = (tl.program_id(0) % blocks_per_head) * BLOCK_P + tl.arange(0, BLOCK_P)
    low = head * HEAD_DIM + pairs
    high = low + half
    # With READS_FIRST, what the rows need after the product, read before it (see gemv): the bias, the rotary cos and
    # sin (a value row's program reads them too, unused: a read under its test would wait for the sum), the cache's
    # length; else each where it is used.
    if READS_FIRST:
        if HAS_BIAS:
            bias_low = tl.load(bias_ptr + low).to(tl.float32)
            bias_high = tl.load(bias_ptr + high).to(tl.float32)
        cos_low = tl.load(cos_ptr + pairs * cos_stride).to(tl.float32)
        cos_high = tl.load(cos_ptr + (pairs + half) * cos_stride).to(tl.float32)
        sin_low = tl.load(sin_ptr + pairs * cos_stride).to(tl.float32)
        sin_high = tl.load(sin_ptr + (pairs + half) * cos_stride).to(tl.float32)
        slot = tl.load(length_ptr)
    squares = tl.zeros([BLOCK_K], dtype=tl.float32)
    acc_low = tl.zeros([BLOCK_P, BLOCK_K], dtype=tl.float32)
    acc_high = tl.zeros([BLOCK_P, BLOCK_K], dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        col_ok = cols < k
        x = tl.load(x_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        squares += x * x
        x = (x * tl.load(norm_ptr + cols, mask=col_ok, other=0.0).to(tl.float32))[None, :]
        if EVEN_K:
            w_low = tl.load(w_ptr + low[:, None] * w_row_stride + cols[None, :], eviction_policy="evict_first")
            w_high = tl.load(w_ptr + high[:, None] * w_row_stride + cols[None, :], eviction_policy="evict_first")
        else:
            w_low = tl.load(
                w_ptr + low[:, None] * w_row_stride + cols[None, :],
                mask=col_ok[None, :],
                other=0.0,
                eviction_policy="evict_first",
            )
            w_high = tl.load(
                w_ptr + high[:, None] * w_row_stride + cols[None, :],
                mask=col_ok[None, :],
                other=0.0,
                eviction_policy="evict_first",
            )
        acc_low += w_low.to(tl.float32) * x
        acc_high += w_high.to(tl.float32) * x
    dtype = q_ptr.dtype.element_ty
    rstd = inverse_rms(squares, k, eps)
    out_low = tl.sum(acc_low, axis=1) * rstd
    out_high = tl.sum(acc_high, axis=1) * rstd
    if HAS_BIAS:
        if not READS_FIRST:
            bias_low = tl.load(bias_ptr + low).to(tl.float32)
            bias_high = tl.load(bias_ptr + high).to(tl.float32)
        out_low += bias_low
        out_high += bias_high
    out_low = out_low.to(dtype).to(tl.float32)  # rounded as the Linear returns them
    out_high = out_high.to(dtype).to(tl.float32)
    if head < HEADS + KV_HEADS:  # queries and keys: x * cos + rotate_half(x) * sin, as transformers turns them
        if not READS_FIRST:
            cos_low = tl.load(cos_ptr + pairs * cos_stride).to(tl.float32)
            cos_high = tl.load(cos_ptr + (pairs + half) * cos_stride).to(tl.float32)
            sin_low = tl.load(sin_ptr + pairs * cos_stride).to(tl.float32)
            sin_high = tl.load(sin_ptr + (pairs + half) * cos_stride).to(tl.float32)
        turned_low = out_low * cos_low - out_high * sin_low
        out_high = out_high * cos_high + out_low * sin_high
        out_low = turned_low
    if head < HEADS:
        tl.store(q_ptr + low, out_low.to(dtype))
        tl.store(q_ptr + high, out_high.to(dtype))
    else:
        if not READS_FIRST:
            slot = tl.load(length_ptr)
        kv_head = (head - HEADS) % KV_HEADS
        offset = kv_head * cache_head_stride + slot * cache_slot_stride + pairs
        if head < HEADS + KV_HEADS:
            tl.store(key_ptr + offset, out_low.to(dtype))
            tl.store(key_ptr + offset + half, out_high.to(dtype))
        else:
            tl.store(value_ptr + offset, out_low.to(dtype))
            tl.store(value_ptr + offset + half, out_high.to(dtype))
