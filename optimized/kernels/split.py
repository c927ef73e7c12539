"""Device functions of the split paths: a row's pass spread over chunk programs, then one pick.

A split pass gives each (row, chunk) program ``CH`` entries of one law row to sum. Each program
stores its chunk's sum in ``part[row, chunk]`` and checks in on the row's counter; the program
that checks in last (``arrive``) sees every partial sum and finishes the row: it finds the chunk
where ``u * total`` falls (``crossing_chunk``), re-reads that one chunk and writes the token. So
a pass and its pick take one launch, not two, and the pick costs one chunk's re-read.

Memory order on a GPU: each program's partial-sum store precedes its check-in (a barrier, then
an atomic add with acquire-release semantics at GPU scope), so the program that sees the count
``C - 1`` also sees every other program's store; it reads them with volatile loads (not from a
stale L1 line) and resets the counter to 0 for the next launch. Under Triton's interpreter the
programs run one after another, so the last chunk program is the one that arrives last.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import last_of, running_sums

# Larger than any token id: the running minimum of the ids that hit before one has (a pick
# with no hit then returns the last positive id instead).
NO_HIT = tl.constexpr(2**62)


@triton.jit
def arrive(
    cnt_ptr,  # [1] int32: this row's check-in counter (cnt[b])
    C,  # programs per row
):
    """Check in on ``cnt_ptr`` after this program's stores; True for the last of C programs."""
    tl.debug_barrier()
    seen = tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu")
    return seen == C - 1


@triton.jit
def crossing_chunk(
    part_row,  # [C] float64: this row's chunk sums
    C,  # chunks per row
    u,  # float64: the draw's uniform
    CB: tl.constexpr,  # a power of two >= C
):
    """The inverse CDF over the chunk sums ``part_row[0..C-1]``: returns ``(total, target, c,
    carry)`` where ``target = u * total``, c is the first chunk with positive mass whose
    running sum exceeds ``target`` (else the last chunk with positive mass) and ``carry`` the
    sum of the chunks before c."""
    cs = tl.arange(0, CB)
    parts = tl.load(part_row + cs, mask=cs < C, other=0.0, volatile=True)
    cum = tl.cumsum(parts, 0)
    total = tl.sum(tl.where(cs == C - 1, cum, 0.0), 0)
    target = u * total
    hit = (cs < C) & (parts > 0) & (target < cum)
    last_c = tl.max(tl.where((cs < C) & (parts > 0), cs, -1), 0)
    c = tl.min(tl.where(hit, cs, C), 0)
    c = tl.where(c < C, c, last_c).to(tl.int64)
    carry = tl.sum(tl.where(cs == c - 1, cum, 0.0), 0)
    return total, target, c, carry


@triton.jit
def chunk_total(
    part_row,  # [C] float64: this row's chunk sums
    C,  # chunks per row
    CB: tl.constexpr,  # a power of two >= C
):
    """The sum of the chunk sums, left to right over the chunks."""
    cs = tl.arange(0, CB)
    parts = tl.load(part_row + cs, mask=cs < C, other=0.0, volatile=True)
    cum = tl.cumsum(parts, 0)
    return tl.sum(tl.where(cs == C - 1, cum, 0.0), 0)


@triton.jit
def pick_step(
    w,  # [BLOCK] float64: the block's weights
    offs,  # [BLOCK] int: the block's ids
    mask,  # [BLOCK] bool: the block's ids inside the chunk and the row
    start,  # the block's first id
    end,  # the crossing chunk's end, min(V, its first id + CH)
    carry,  # float64: the sum of the weights before the block
    target,  # float64: u * total
    first,  # int64: the smallest id whose running sum exceeds target so far (NO_HIT: none)
    last,  # int64: the last id with positive weight so far (-1: none)
    BLOCK: tl.constexpr,
):
    """One block of the inverse CDF inside the crossing chunk: updates (carry, first, last)."""
    sums = running_sums(w, carry, offs, start)
    carry = last_of(sums, offs, start, end, BLOCK)
    hit = mask & (w > 0) & (target < sums)
    first = tl.minimum(first, tl.min(tl.where(hit, offs, NO_HIT), 0))
    last = tl.maximum(last, tl.max(tl.where(mask & (w > 0), offs, -1), 0))
    return carry, first, last


@triton.jit
def weights(
    p_row,  # [V] float: the target row
    q_row,  # [V] float: the draft row (read with HAS_Q and RESIDUAL only)
    x_det,  # the deterministic draft (q one-hot there without HAS_Q)
    offs,  # [BLOCK] int: the block's ids
    mask,  # [BLOCK] bool: the block's ids inside the chunk and the row
    a,  # float64: p's factor in the residual (1; block's p_i)
    RESIDUAL,  # bool (a runtime value): (a p - q)+, else p
    HAS_Q: tl.constexpr,
):
    """A law row's weights on one block: ``(a p - q)+`` when ``RESIDUAL`` (q one-hot at x_det
    without HAS_Q; q is not read otherwise), else ``p``; 0 outside ``mask``."""
    p = tl.load(p_row + offs, mask=mask, other=0.0).to(tl.float64)
    if HAS_Q:
        qmask = mask & ((tl.zeros_like(offs) + RESIDUAL.to(tl.int32)) > 0)
        q = tl.load(q_row + offs, mask=qmask, other=0.0).to(tl.float64)
    else:
        q = tl.where(offs == x_det, 1.0, 0.0).to(tl.float64)
    w = tl.where(RESIDUAL, tl.maximum(a * p - q, 0.0), p)
    return tl.where(mask, w, 0.0)


@triton.jit
def chunk_sum(
    p_row,  # [V] float: the target row
    q_row,  # [V] float: the draft row (read with HAS_Q and RESIDUAL only)
    x_det,  # the deterministic draft (q one-hot there without HAS_Q)
    c,  # this program's chunk
    V,
    CH,  # entries per chunk
    a,  # float64: p's factor in the residual
    RESIDUAL,  # bool: (a p - q)+, else p
    HAS_Q: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """The sum of :func:`weights` over chunk c (entries ``c CH .. c CH + CH - 1``)."""
    total = tl.zeros((BLOCK,), dtype=tl.float64)
    for start in range(0, CH, BLOCK):
        offs = c * CH + start + tl.arange(0, BLOCK)
        mask = (offs < V) & (start + tl.arange(0, BLOCK) < CH)
        total += weights(p_row, q_row, x_det, offs, mask, a, RESIDUAL, HAS_Q)
    return tl.sum(total, 0)


@triton.jit
def pick_weights(
    p_row,  # [V] float: the target row
    q_row,  # [V] float: the draft row (read with HAS_Q and RESIDUAL only)
    x_det,  # the deterministic draft (q one-hot there without HAS_Q)
    part_row,  # [C] float64: this row's chunk sums of the same weights
    C,  # chunks per row
    V,
    CH,  # entries per chunk
    u,  # float64: the draw's uniform
    a,  # float64: p's factor in the residual
    RESIDUAL,  # bool: (a p - q)+, else p
    HAS_Q: tl.constexpr,
    CB: tl.constexpr,  # a power of two >= C
    BLOCK: tl.constexpr,
):
    """The last program's draw over :func:`weights` from the chunk sums: returns
    ``(token, total)``; the token is -1 when the total is 0 (the caller's fallback)."""
    total, target, c, carry = crossing_chunk(part_row, C, u, CB)
    first = tl.full((), NO_HIT, tl.int64)
    last = tl.full((), -1, tl.int64)
    if total > 0:
        end = tl.minimum(V, c * CH + CH)
        for start in range(0, CH, BLOCK):
            offs = c * CH + start + tl.arange(0, BLOCK)
            mask = (offs < V) & (start + tl.arange(0, BLOCK) < CH)
            w = weights(p_row, q_row, x_det, offs, mask, a, RESIDUAL, HAS_Q)
            carry, first, last = pick_step(
                w, offs, mask, c * CH + start, end, carry, target, first, last, BLOCK
            )
    y = tl.where(first < NO_HIT, first, last)
    return y, total
