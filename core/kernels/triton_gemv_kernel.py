"""The Triton kernel of core.kernels.triton_gemv (imported only where Triton is installed)."""

import triton
import triton.language as tl


@triton.jit
def gemv(x_ptr, w_ptr, bias_ptr, out_ptr, n, w_row_stride, k: tl.constexpr,
         HAS_BIAS: tl.constexpr, ACT_MUL: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr,
         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)
        col_ok = cols < k
        x = tl.load(x_ptr + cols, mask=col_ok, other=0.0)  # the input is small and stays in cache: no fast path
        if ACT_MUL:
            gate = x.to(tl.float32)
            up = tl.load(x_ptr + k + cols, mask=col_ok, other=0.0).to(tl.float32)
            x = (gate * tl.sigmoid(gate) * up).to(x_ptr.dtype.element_ty)
        pointers = w_ptr + rows[:, None] * w_row_stride + cols[None, :]
        if EVEN_N and EVEN_K:
            w = tl.load(pointers, eviction_policy="evict_first")
        else:
            w = tl.load(pointers, mask=row_ok[:, None] & col_ok[None, :], other=0.0, eviction_policy="evict_first")
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    out = tl.sum(acc, axis=1)
    if HAS_BIAS:
        out += tl.load(bias_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, out.to(out_ptr.dtype.element_ty), mask=row_ok)
