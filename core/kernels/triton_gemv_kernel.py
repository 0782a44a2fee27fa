"""The Triton kernels of core.kernels.triton_gemv and core.kernels.decode_layer (imported only where Triton is
installed): `gemv`, one batch-1 product with what a decoder layer does around it (the RMSNorm before, the activation
before or, for gate/up, after, the residual add after), and `qkv_gemv`, the layer's q/k/v product with its norm
before and the rotary embedding and the cache write after. Module-level functions, as Triton's interpreter needs them.

Each takes `PDL` (core.kernels.pdl): 0 today's kernel; 1 waits for the kernel before at the start of each program,
before any load or store but the weights' (no kernel of a decode step writes them), then lets the next one launch;
2 also asks L2 for the start of the program's weight rows before it waits."""

import triton
import triton.language as tl


@triton.jit
def inverse_rms(squares, k: tl.constexpr, eps):
    """1 / sqrt(mean(x^2) + eps) from the row's squares summed by block, in fp32, as LlamaRMSNorm computes it."""
    return tl.rsqrt((tl.sum(squares, 0) / k + eps).to(tl.float32))  # a compile passes a Python float as fp64


# The inline assembly below is declared pure, with a dummy result that the code after it uses: torch's analysis of a
# user-defined kernel (which arguments it writes) refuses impure inline assembly, and the data dependency is what
# keeps the compiler from moving the kernel's loads above the wait. The wait's result is added to the pointers a
# product kernel reads, and to none it writes: every store writes a value computed from what was read after the wait,
# so it comes after it too. The analysis follows a store's address back through every operation but a load (a call
# included), and the wait's result depends on the weight prefetches before it: added to a written pointer, it would
# make the weight count as written. (Before, a load of a weight stood between the prefetches and the wait to cut that
# path, and each program waited a memory round trip for it before it even began to wait.) For the same reason each
# kernel adds the wait's result to its pointers in its own body: through a helper's call, every pointer passed would
# count as written.
# The assembly has no backslash escapes: inductor pastes a user-defined kernel's source into a ''' string of the code
# it generates, where an escape would become the character itself and break the string literal it was in.


@triton.jit
def prefetch_l2(pointers):
    """Ask L2 for the lines holding `pointers`, without waiting for them; 0 for each."""
    return tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [pointers],
                                     dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def bulk_prefetch_l2(pointers, nbytes, after):
    """Ask L2 for `nbytes` bytes from each of `pointers` (16-byte aligned, a multiple of 16 bytes), without waiting for
    them (Hopper's bulk prefetch, sm_90 and newer), once `after` is computed; 0 for each."""
    return tl.inline_asm_elementwise("cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; // $3", "=r,l,r,r",
                                     [pointers, nbytes, after], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def prefetch_rows(w_ptr, rows, w_row_stride, k: tl.constexpr, BLOCK_K: tl.constexpr):
    """L2 prefetches of the first BLOCK_K columns of weight `rows` (in range), one a 128-byte line; returns 0 once
    they are issued."""
    line: tl.constexpr = 1024 // w_ptr.dtype.element_ty.primitive_bitwidth
    lines: tl.constexpr = BLOCK_K // line if line < BLOCK_K else 1
    cols = tl.minimum(tl.arange(0, lines) * line, k - 1)
    return tl.sum(tl.sum(prefetch_l2(w_ptr + rows[:, None] * w_row_stride + cols[None, :]), axis=1), axis=0)


@triton.jit
def wait_for_predecessor(after):
    """PDL's wait for the kernel before (all its writes visible after it), then the next kernel may launch: it waits
    for this one in turn, so no program of it touches memory before every program of this one is done. Runs after
    `after` is computed; returns 0, to be added to every pointer the kernel reads or writes after the wait. Declared
    a multiple of 16: else each pointer it is added to loses its alignment, and every load through it is 2 bytes."""
    zero = tl.inline_asm_elementwise(
        "griddepcontrol.wait; griddepcontrol.launch_dependents; mov.u32 $0, 0; // $1", "=r,r", [after],
        dtype=tl.int32, is_pure=True, pack=1)
    return tl.multiple_of(zero, 16)


@triton.jit
def gemv(
    x_ptr,
    w_ptr,
    bias_ptr,
    out_ptr,
    norm_ptr,
    residual_ptr,
    length_ptr,
    ahead_ptr,
    n,
    w_row_stride,
    eps,
    ahead_first,
    ahead_last,
    k: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT_MUL: tl.constexpr,
    NORM: tl.constexpr,
    RESIDUAL: tl.constexpr,
    ADVANCE: tl.constexpr,
    SWIGLU: tl.constexpr,
    EVEN_N: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
    AHEAD_PIECE: tl.constexpr,
    AHEAD_PIECES: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    length_in = length_ptr  # the cache's length as read (ADVANCE): after the wait, where it is written back
    if PDL:
        after = tl.program_id(0)
        if PDL == 2:
            after = prefetch_rows(w_ptr, tl.where(row_ok, rows, 0), w_row_stride, k, BLOCK_K)
        zero = wait_for_predecessor(after)
        x_ptr += zero
        bias_ptr += zero
        norm_ptr += zero
        residual_ptr += zero
        length_in += zero
    # What the rows add after the product, read before it: a read after the sum would be one more round trip to
    # memory at the end of every program, where these overlap the weights' reads.
    if HAS_BIAS:
        bias = tl.load(bias_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
        if SWIGLU:
            bias_up = tl.load(bias_ptr + n + rows, mask=row_ok, other=0.0).to(tl.float32)
    if RESIDUAL:
        residual = tl.load(residual_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K] if SWIGLU else [1, 1], dtype=tl.float32)  # with SWIGLU: row `n + row`'s
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
        if SWIGLU:
            if EVEN_N and EVEN_K:
                w_up = tl.load(pointers + n * w_row_stride, eviction_policy="evict_first")
            else:
                w_up = tl.load(pointers + n * w_row_stride, mask=row_ok[:, None] & col_ok[None, :], other=0.0,
                               eviction_policy="evict_first")
            acc_up += w_up.to(tl.float32) * x.to(tl.float32)[None, :]
    out = tl.sum(acc, axis=1)
    if NORM:
        out *= inverse_rms(squares, k, eps)
    if HAS_BIAS:
        out += bias
    if SWIGLU:  # gate and up rounded as the Linear returns them, then what ACT_MUL computes from them
        up = tl.sum(acc_up, axis=1)
        if NORM:
            up *= inverse_rms(squares, k, eps)
        if HAS_BIAS:
            up += bias_up
        gate = out.to(out_ptr.dtype.element_ty).to(tl.float32)
        up = up.to(out_ptr.dtype.element_ty).to(tl.float32)
        out = gate * tl.sigmoid(gate) * up
    if RESIDUAL:  # the product rounded as the Linear returns it, then the residual add, rounded once more
        out = out.to(out_ptr.dtype.element_ty).to(tl.float32)
        out += residual
    if AHEAD_PIECE:
        # The start of the next product's weight, asked of L2 by the last programs (from `ahead_first` on) once
        # their own weight is read (the prefetch takes their result): its lines come while the memory would idle at
        # this kernel's end and the next one's start. Its zero joins the store's mask, which no analysis of what the
        # kernel writes follows, and which changes no value.
        issued = tl.full([], 0, tl.int32)
        if tl.program_id(0) >= ahead_first:
            pieces = (tl.program_id(0) - ahead_first) * AHEAD_PIECES + tl.arange(0, AHEAD_PIECES)
            starts = tl.minimum(pieces.to(tl.int64) * AHEAD_PIECE, ahead_last)
            nbytes: tl.constexpr = AHEAD_PIECE * (ahead_ptr.dtype.element_ty.primitive_bitwidth // 8)
            after = tl.sum(out, 0).to(tl.int32, bitcast=True)
            issued = tl.sum(bulk_prefetch_l2(ahead_ptr + starts, tl.full([AHEAD_PIECES], nbytes, tl.int32), after), 0)
        row_ok = row_ok & (issued == 0)
    tl.store(out_ptr + rows, out.to(out_ptr.dtype.element_ty), mask=row_ok)
    # the cache's length moved on by the token, once (what StaticLayer.update does); the constexpr test stays apart
    if ADVANCE:  # noqa: SIM102
        if tl.program_id(0) == 0:
            tl.store(length_ptr, tl.load(length_in) + 1)


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
    PDL: tl.constexpr,
):
    """Each program owns BLOCK_P pairs of rows (d, d + HEAD_DIM / 2) of one head of the stacked q/k/v weight, the
    pairs the rotary embedding mixes; heads are q's, then k's, then v's."""
    half: tl.constexpr = HEAD_DIM // 2
    blocks_per_head: tl.constexpr = half // BLOCK_P
    head = tl.program_id(0) // blocks_per_head
    pairs = (tl.program_id(0) % blocks_per_head) * BLOCK_P + tl.arange(0, BLOCK_P)
    low = head * HEAD_DIM + pairs
    high = low + half
    if PDL:
        after = tl.program_id(0)
        if PDL == 2:
            after = prefetch_rows(w_ptr, low, w_row_stride, k, BLOCK_K) + prefetch_rows(
                w_ptr, high, w_row_stride, k, BLOCK_K)
        zero = wait_for_predecessor(after)
        x_ptr += zero
        norm_ptr += zero
        bias_ptr += zero
        cos_ptr += zero
        sin_ptr += zero
        length_ptr += zero
    # What the rows need after the product, read before it (see gemv): the bias, the rotary cos and sin (a value
    # row's program reads them too, unused: a read under its test would wait for the sum), the cache's length.
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
        out_low += bias_low
        out_high += bias_high
    out_low = out_low.to(dtype).to(tl.float32)  # rounded as the Linear returns them
    out_high = out_high.to(dtype).to(tl.float32)
    if head < HEADS + KV_HEADS:  # queries and keys: x * cos + rotate_half(x) * sin, as transformers turns them
        turned_low = out_low * cos_low - out_high * sin_low
        out_high = out_high * cos_high + out_low * sin_high
        out_low = turned_low
    if head < HEADS:
        tl.store(q_ptr + low, out_low.to(dtype))
        tl.store(q_ptr + high, out_high.to(dtype))
    else:
        kv_head = (head - HEADS) % KV_HEADS
        offset = kv_head * cache_head_stride + slot * cache_slot_stride + pairs
        if head < HEADS + KV_HEADS:
            tl.store(key_ptr + offset, out_low.to(dtype))
            tl.store(key_ptr + offset + half, out_high.to(dtype))
        else:
            tl.store(value_ptr + offset, out_low.to(dtype))
            tl.store(value_ptr + offset + half, out_high.to(dtype))
