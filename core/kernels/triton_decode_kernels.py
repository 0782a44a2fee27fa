"""The Triton kernels of core.kernels.triton_attention (imported only where Triton is installed): `attend`, one
program per (batch x KV head, split of the keys), and `combine`, the splits' partial results into one (which `attend`
does itself when it appends the new token). Module-level functions, as Triton's interpreter needs them. Both take
`PDL` (core.kernels.pdl): set, each program waits for the kernel before its first load; they read no weights,
so there is nothing of their own to prefetch. `attend` may instead ask L2 for the next product's weight (`AHEAD_PIECE`,
SYNCSCOPE_ATTENTION_PREFETCH)."""

import triton
import triton.language as tl

from core.kernels.triton_gemv_kernel import bulk_prefetch_l2, wait_for_predecessor


@triton.jit
def rotated(row_ptr, stride, cos, sin, d, HEAD_DIM: tl.constexpr):
    """One head's row turned by the rotary embedding as transformers' `apply_rotary_pos_emb` does (x * cos +
    rotate_half(x) * sin), in fp32; `row_ptr` may be a (rows, 1) block of head rows."""
    half: tl.constexpr = HEAD_DIM // 2
    partner = (d + half) % HEAD_DIM
    sign = tl.where(d < half, -1.0, 1.0)
    x = tl.load(row_ptr + d * stride).to(tl.float32)
    turned = tl.load(row_ptr + partner * stride).to(tl.float32)
    return x * cos + sign * turned * sin


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
def combine_group(partial_ptr, stats_ptr, out_ptr, first_head, splits, GROUP: tl.constexpr, GROUP_POW2: tl.constexpr,
                  SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    """`combine_head` for GROUP consecutive (batch, query head) rows at once: one round of loads for all of them,
    where one head after another would wait for memory GROUP times."""
    g = tl.arange(0, GROUP_POW2)
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, HEAD_DIM)
    heads = first_head + g
    used = (g < GROUP)[:, None] & (s < splits)[None, :]
    slots = heads[:, None] * splits + s[None, :]
    best = tl.load(stats_ptr + slots * 2, mask=used, other=float("-inf"), cache_modifier=".cg")
    total = tl.load(stats_ptr + slots * 2 + 1, mask=used, other=0.0, cache_modifier=".cg")
    acc = tl.load(partial_ptr + slots[:, :, None] * HEAD_DIM + d[None, None, :], mask=used[:, :, None], other=0.0,
                  cache_modifier=".cg")
    top = tl.max(best, 1)
    shift = tl.where(top == float("-inf"), 0.0, top)
    rescale = tl.where(used, tl.exp(best - shift[:, None]), 0.0)
    whole = tl.sum(total * rescale, 1)
    result = tl.sum(acc * rescale[:, :, None], 1) / tl.where(whole > 0, whole, 1.0)[:, None]
    tl.store(out_ptr + heads[:, None] * HEAD_DIM + d[None, :], result.to(out_ptr.dtype.element_ty),
             mask=(g < GROUP)[:, None])


@triton.jit
def attend(q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, partial_ptr, stats_ptr,
           new_k_ptr, new_v_ptr, cos_ptr, sin_ptr, slot_ptr, semaphore_ptr, ahead_ptr,
           sqb, sqh, sqd, skb, skh, skl, skd, svb, svh, svl, svd, smb, smh, sml,
           snkb, snkh, snkd, snvb, snvh, snvd, scb, scd,
           length, scale, ahead_last,
           SPLIT_LEN: tl.constexpr, KV_HEADS: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
           HEAD_DIM: tl.constexpr, BLOCK_KEYS: tl.constexpr, HAS_MASK: tl.constexpr, MASK_IS_BOOL: tl.constexpr,
           SINGLE: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, APPEND: tl.constexpr,
           SPLITS_PAD: tl.constexpr, GROUP_POW2: tl.constexpr, PDL: tl.constexpr,
           AHEAD_PIECE: tl.constexpr, AHEAD_PIECES: tl.constexpr):
    if PDL:
        zero = wait_for_predecessor(tl.program_id(0))
        q_ptr += zero
        k_ptr += zero
        v_ptr += zero
        mask_ptr += zero
        out_ptr += zero
        partial_ptr += zero
        stats_ptr += zero
        new_k_ptr += zero
        new_v_ptr += zero
        cos_ptr += zero
        sin_ptr += zero
        slot_ptr += zero
        semaphore_ptr += zero
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
    if APPEND:
        # The new token: turn its query and key by the rotary embedding, and write its key and value into the
        # cache at `slot` (by the program whose keys hold it; every program uses them from registers).
        slot = tl.load(slot_ptr)
        cos = tl.load(cos_ptr + b * scb + d * scd).to(tl.float32)
        sin = tl.load(sin_ptr + b * scb + d * scd).to(tl.float32)
        q_rows = q_ptr + b * sqb + tl.where(real, head, 0)[:, None] * sqh
        q = rotated(q_rows, sqd, cos[None, :], sin[None, :], d[None, :], HEAD_DIM).to(q_ptr.dtype.element_ty)
        new_key = rotated(new_k_ptr + b * snkb + kv * snkh, snkd, cos, sin, d, HEAD_DIM).to(
            k_ptr.dtype.element_ty)
        new_value = tl.load(new_v_ptr + b * snvb + kv * snvh + d * snvd).to(v_ptr.dtype.element_ty)
        owner = (slot >= first) & (slot < first + SPLIT_LEN) & (d >= 0)
        tl.store(k_ptr + b * skb + kv * skh + slot * skl + d * skd, new_key, mask=owner)
        tl.store(v_ptr + b * svb + kv * svh + slot * svl + d * svd, new_value, mask=owner)
    else:
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
        # Every read of the block before any arithmetic: the keys, the values and the mask then come in one round
        # trip to memory. The scores need none of the values, but a load written after them waits for them (the
        # layout conversions between are barriers the compiler does not move loads across).
        k = tl.load(k_ptr + b * skb + kv * skh + keys[:, None] * skl + d[None, :] * skd, mask=inside[:, None],
                    other=0.0)
        v = tl.load(v_ptr + b * svb + kv * svh + keys[:, None] * svl + d[None, :] * svd, mask=inside[:, None],
                    other=0.0)
        if HAS_MASK:
            m = tl.load(mask_ptr + b * smb + head[:, None] * smh + keys[None, :] * sml, mask=keep, other=0)
        if APPEND:
            k = tl.where((keys == slot)[:, None], new_key[None, :], k)
            v = tl.where((keys == slot)[:, None], new_value[None, :], v)
        if UPCAST:
            k = k.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION, out_dtype=tl.float32)
        scores = (scores * scale).to(tl.float32)  # inside a compile `scale` arrives as fp64
        if HAS_MASK:
            if MASK_IS_BOOL:
                keep = keep & (m != 0)
            else:
                scores = scores + m.to(tl.float32)
        scores = tl.where(keep, scores, float("-inf"))
        new_best = tl.maximum(best, tl.max(scores, 1))
        shift = tl.where(new_best == float("-inf"), 0.0, new_best)
        weights = tl.exp(scores - shift[:, None])
        rescale = tl.exp(best - shift)
        v = v.to(tl.float32)
        total = total * rescale + tl.sum(weights, 1)
        acc = acc * rescale[:, None] + tl.dot(weights, v, input_precision=PRECISION)
        best = new_best
    if AHEAD_PIECE:
        # The next product's weight, asked of L2 once this program's keys and values are in (its result depends on
        # all of them): its lines then come while the memory would idle, the rest of attention and the combine, and
        # not while this program waits for its own reads. Each program asks for its share, AHEAD_PIECES pieces of
        # AHEAD_PIECE elements; pieces past the end are moved back onto the last one.
        pieces = (row * splits + split) * AHEAD_PIECES + tl.arange(0, AHEAD_PIECES)
        starts = tl.minimum(pieces.to(tl.int64) * AHEAD_PIECE, ahead_last)
        nbytes: tl.constexpr = AHEAD_PIECE * (ahead_ptr.dtype.element_ty.primitive_bitwidth // 8)
        after = tl.sum(tl.sum(acc, 1), 0).to(tl.int32, bitcast=True)
        issued = bulk_prefetch_l2(ahead_ptr + starts, tl.full([AHEAD_PIECES], nbytes, tl.int32), after)
        total = total + tl.sum(issued, 0).to(tl.float32)  # + 0: what keeps the prefetches from being dropped
    if SINGLE:
        result = acc / tl.where(total > 0, total, 1.0)[:, None]
        out_rows = out_ptr + (b * KV_HEADS * GROUP + head[:, None]) * HEAD_DIM + d[None, :]
        tl.store(out_rows, result.to(out_ptr.dtype.element_ty), mask=real[:, None])
    else:
        partial_slot = (b * KV_HEADS * GROUP + head) * splits + split
        tl.store(partial_ptr + partial_slot[:, None] * HEAD_DIM + d[None, :], acc, mask=real[:, None])
        tl.store(stats_ptr + partial_slot * 2, best, mask=real)
        tl.store(stats_ptr + partial_slot * 2 + 1, total, mask=real)
    if APPEND:
        # No second kernel: the last program of a row to finish (a counter per row) combines the row, and the
        # last row to finish (one more counter) moves the cache's length on; each counter is left at zero.
        tl.debug_barrier()  # every thread's stores are issued before the counter says so
        row_done = True
        if not SINGLE:
            arrived = tl.atomic_add(semaphore_ptr + row, 1)  # acq_rel, GPU scope: the partials are visible
            row_done = arrived == splits - 1
            if row_done:
                combine_group(partial_ptr, stats_ptr, out_ptr, (b * KV_HEADS + kv) * GROUP, splits, GROUP,
                              GROUP_POW2, SPLITS_PAD, HEAD_DIM)
                tl.atomic_xchg(semaphore_ptr + row, 0)
        if row_done:
            rows = tl.num_programs(0)
            if tl.atomic_add(semaphore_ptr + rows, 1) == rows - 1:
                tl.store(slot_ptr, slot + 1)
                tl.atomic_xchg(semaphore_ptr + rows, 0)


@triton.jit
def combine(partial_ptr, stats_ptr, out_ptr, splits, SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
            PDL: tl.constexpr):
    if PDL:
        zero = wait_for_predecessor(tl.program_id(0))
        partial_ptr += zero
        stats_ptr += zero
        out_ptr += zero
    combine_head(partial_ptr, stats_ptr, out_ptr, tl.program_id(0), splits, SPLITS_PAD, HEAD_DIM)
