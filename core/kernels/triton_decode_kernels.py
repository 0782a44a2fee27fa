"""The Triton kernels of core.kernels.triton_attention (imported only where Triton is installed): `attend`, one
program per (batch x KV head, split of the keys), and `combine`, the splits' partial results into one. Module-level
functions, as Triton's interpreter needs them."""

import triton
import triton.language as tl


@triton.jit
def combine_head(partial_ptr, stats_ptr, out_ptr, row, splits, SPLITS_PAD: tl.constexpr,
                 HEAD_DIM: tl.constexpr):
    """One (batch, query head)'s partial results over its splits, combined in split order, written to out."""
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, HEAD_DIM)
    used = s < splits
    # ".cg": read past this SM's L1, which may hold another step's partials at these addresses.
    best = tl.load(stats_ptr + (row * splits + s) * 2, mask=used, other=float("-inf"), cache_modifier=".cg")
    total = tl.load(stats_ptr + (row * splits + s) * 2 + 1, mask=used, other=0.0, cache_modifier=".cg")
    acc = tl.load(partial_ptr + (row * splits + s)[:, None] * HEAD_DIM + d[None, :], mask=used[:, None],
                  other=0.0, cache_modifier=".cg")
    top = tl.max(best, 0)
    shift = tl.where(top == float("-inf"), 0.0, top)
    rescale = tl.where(used, tl.exp(best - shift), 0.0)
    whole = tl.sum(total * rescale, 0)
    result = tl.sum(acc * rescale[:, None], 0) / tl.where(whole > 0, whole, 1.0)
    tl.store(out_ptr + row * HEAD_DIM + d, result.to(out_ptr.dtype.element_ty))


@triton.jit
def attend(q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, partial_ptr, stats_ptr,
           sqb, sqh, sqd, skb, skh, skl, skd, svb, svh, svl, svd, smb, smh, sml,
           length, scale,
           SPLIT_LEN: tl.constexpr, KV_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
           HEAD_DIM: tl.constexpr, BLOCK_KEYS: tl.constexpr, HAS_MASK: tl.constexpr, MASK_IS_BOOL: tl.constexpr,
           SINGLE: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, READS_FIRST: tl.constexpr):
    row = tl.program_id(0)
    split = tl.program_id(1)
    splits = tl.num_programs(1)
    b = row // KV_HEADS
    kv = row % KV_HEADS
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM)
    head = kv * GROUP + g
    real = g < GROUP
    first = split * SPLIT_LEN
    q = tl.load(q_ptr + b * sqb + head[:, None] * sqh + d[None, :] * sqd, mask=real[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    best = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    total = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    for start in range(0, SPLIT_LEN, BLOCK_KEYS):
        keys = first + start + tl.arange(0, BLOCK_KEYS)
        inside = keys < length
        keep = inside[None, :] & real[:, None]
        # With READS_FIRST every read of the block comes before any arithmetic: the keys, the values and the mask
        # then come in one round trip to memory. The scores need none of the values, but a load written after them
        # waits for them (the layout conversions between are barriers the compiler does not move loads across).
        k = tl.load(k_ptr + b * skb + kv * skh + keys[:, None] * skl + d[None, :] * skd, mask=inside[:, None],
                    other=0.0)
        if READS_FIRST:
            v = tl.load(v_ptr + b * svb + kv * svh + keys[:, None] * svl + d[None, :] * svd, mask=inside[:, None],
                        other=0.0)
            if HAS_MASK:
                m = tl.load(mask_ptr + b * smb + head[:, None] * smh + keys[None, :] * sml, mask=keep, other=0)
        if UPCAST:
            k = k.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=tl.float32)
        scores = (scores * scale).to(tl.float32)  # inside a compile `scale` arrives as fp64
        if HAS_MASK:
            if not READS_FIRST:
                m = tl.load(mask_ptr + b * smb + head[:, None] * smh + keys[None, :] * sml, mask=keep, other=0)
            if MASK_IS_BOOL:
                keep = keep & (m != 0)
            else:
                scores = scores + m.to(tl.float32)
        scores = tl.where(keep, scores, float("-inf"))
        new_best = tl.maximum(best, tl.max(scores, 1))
        shift = tl.where(new_best == float("-inf"), 0.0, new_best)
        weights = tl.exp(scores - shift[:, None])
        rescale = tl.exp(best - shift)
        if not READS_FIRST:
            v = tl.load(v_ptr + b * svb + kv * svh + keys[:, None] * svl + d[None, :] * svd, mask=inside[:, None],
                        other=0.0)
        v = v.to(tl.float32)
        total = total * rescale + tl.sum(weights, 1)
        acc = acc * rescale[:, None] + tl.dot(weights, v, input_precision=PRECISION)
        best = new_best
    if SINGLE:
        result = acc / tl.where(total > 0, total, 1.0)[:, None]
        out_rows = out_ptr + (b * KV_HEADS * GROUP + head[:, None]) * HEAD_DIM + d[None, :]
        tl.store(out_rows, result.to(out_ptr.dtype.element_ty), mask=real[:, None])
    else:
        partial_slot = (b * KV_HEADS * GROUP + head) * splits + split
        tl.store(partial_ptr + partial_slot[:, None] * HEAD_DIM + d[None, :], acc, mask=real[:, None])
        tl.store(stats_ptr + partial_slot * 2, best, mask=real)
        tl.store(stats_ptr + partial_slot * 2 + 1, total, mask=real)


@triton.jit
def combine(partial_ptr, stats_ptr, out_ptr, splits, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    combine_head(partial_ptr, stats_ptr, out_ptr, tl.program_id(0), splits, SPLITS_PAD, HEAD_DIM)
