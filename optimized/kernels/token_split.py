"""Token-level verification split over many programs per row, for large vocabularies on a GPU.

One program per row cannot stream a 128k-entry row fast enough, and the exact single-program
kernel (:mod:`.token_chain`) passes over the stop row three times to reproduce the reference's
rounding. This path moves the floor's bytes once:

1. ``stop_row_partials_kernel`` (rows x chunks): each program redoes its row's acceptance tests
   on the gathered ``p(x_i)``, ``q(x_i)`` (2K values: cheaper than a launch and a buffer), finds
   the stop node r, and sums its chunk of the stop row's weights, ``(p_r - q_r)+`` after a
   rejection or ``p_K`` for the bonus; chunk 0 writes the accepted drafts and the -1 padding.
2. ``stop_row_pick_kernel`` (one program per row): the same r, then inverse CDF over the chunk
   sums with ``u * total``, then over the one chunk that holds the crossing (re-read); writes
   the token at position r.

The law is the reference's exactly; the coupling is exact except that the sum is grouped by
chunks and not normalized before the draw, so a token can differ only when ``u * total`` falls
within rounding of a partial sum (proofs_notes/optimized_coupling.md; checked by
tests/test_optimized_coupled.py::test_split_token_path_agrees_with_the_reference).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import acceptance, first_rejection, gather_drafts, inverse_cdf, last_of, running_sums


@triton.jit
def stop_node(x_ptr, q_ptr, p_ptr, ua_ptr, b, K, V, HAS_Q: tl.constexpr, KB: tl.constexpr):
    """The row's acceptance tests; returns (r, the drafts, their positions): drafts 0..r-1 are
    accepted and the step stops at node r (r = K: all accepted)."""
    ks, x, px, qx = gather_drafts(x_ptr, q_ptr, p_ptr, b, K, V, HAS_Q, KB)
    r = first_rejection(ua_ptr, b, K, ks, acceptance(px, qx)).to(tl.int64)
    return r, x, ks


@triton.jit
def stop_weights(p_row, q_row, x_r, offs, mask, residual, HAS_Q: tl.constexpr):
    p = tl.load(p_row + offs, mask=mask, other=0.0).to(tl.float64)
    if HAS_Q:
        qmask = mask & ((tl.zeros_like(offs) + residual.to(tl.int32)) > 0)
        q = tl.load(q_row + offs, mask=qmask, other=0.0).to(tl.float64)
    else:
        q = tl.where(offs == x_r, 1.0, 0.0).to(tl.float64)
    w = tl.where(residual, tl.maximum(p - q, 0.0), p)
    return tl.where(mask, w, 0.0)


@triton.jit
def stop_row_partials_kernel(
    x_ptr, q_ptr, p_ptr, ua_ptr, out_ptr, part_ptr, K, V, C, CH,
    HAS_Q: tl.constexpr, KB: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    r, x, ks = stop_node(x_ptr, q_ptr, p_ptr, ua_ptr, b, K, V, HAS_Q, KB)
    if c == 0:  # the accepted drafts and the padding; position r is the pick kernel's
        tl.store(out_ptr + b * (K + 1) + ks, tl.where(ks < r, x, -1), mask=(ks < K + 1) & (ks != r))
        tl.store(out_ptr + b * (K + 1) + K, -1, mask=r < K)
    residual = r < K
    p_row = p_ptr + (b * (K + 1) + r) * V
    q_row = q_ptr + (b * K + tl.minimum(r, K - 1)) * V
    x_r = tl.load(x_ptr + b * K + tl.minimum(r, K - 1), mask=K > 0, other=0).to(tl.int64)
    total = tl.zeros((BLOCK,), dtype=tl.float64)
    for start in range(0, CH, BLOCK):
        offs = c * CH + start + tl.arange(0, BLOCK)
        mask = (offs < V) & (start + tl.arange(0, BLOCK) < CH)
        total += stop_weights(p_row, q_row, x_r, offs, mask, residual, HAS_Q)
    tl.store(part_ptr + b * C + c, tl.sum(total, 0))


@triton.jit
def stop_row_pick_kernel(
    x_ptr, q_ptr, p_ptr, ua_ptr, uf_ptr, part_ptr, out_ptr, K, V, C, CH,
    HAS_Q: tl.constexpr, KB: tl.constexpr, CB: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    r, _, _ = stop_node(x_ptr, q_ptr, p_ptr, ua_ptr, b, K, V, HAS_Q, KB)
    residual = r < K
    p_row = p_ptr + (b * (K + 1) + r) * V
    q_row = q_ptr + (b * K + tl.minimum(r, K - 1)) * V
    x_r = tl.load(x_ptr + b * K + tl.minimum(r, K - 1), mask=K > 0, other=0).to(tl.int64)
    u = tl.load(uf_ptr + b).to(tl.float64)
    cs = tl.arange(0, CB)
    parts = tl.load(part_ptr + b * C + cs, mask=cs < C, other=0.0)
    cum = tl.cumsum(parts, 0)
    total = tl.sum(tl.where(cs == C - 1, cum, 0.0), 0)
    if total > 0:
        target = u * total
        hit = (cs < C) & (parts > 0) & (target < cum)
        last_c = tl.max(tl.where((cs < C) & (parts > 0), cs, -1), 0)
        c = tl.min(tl.where(hit, cs, C), 0)
        c = tl.where(c < C, c, last_c).to(tl.int64)
        carry = tl.sum(tl.where(cs == c - 1, cum, 0.0), 0)  # the chunks before c
        first = tl.zeros((), dtype=tl.int64) + V
        last = tl.full((), -1, tl.int64)
        for start in range(0, CH, BLOCK):
            offs = c * CH + start + tl.arange(0, BLOCK)
            mask = (offs < V) & (start + tl.arange(0, BLOCK) < CH)
            w = stop_weights(p_row, q_row, x_r, offs, mask, residual, HAS_Q)
            sums = running_sums(w, carry, offs, c * CH + start)
            carry = last_of(sums, offs, c * CH + start, tl.minimum(V, c * CH + CH), BLOCK)
            hit2 = mask & (w > 0) & (target < sums)
            first = tl.minimum(first, tl.min(tl.where(hit2, offs, V), 0))
            last = tl.maximum(last, tl.max(tl.where(mask & (w > 0), offs, -1), 0))
        y = tl.where(first < V, first, last).to(tl.int64)
    else:  # (p - q)+ has no mass: the reference's fallback, p itself (exact single-row path)
        y = inverse_cdf(p_row, q_row, x_r, 1.0, u, V, 0, BLOCK).to(tl.int64)
    tl.store(out_ptr + b * (K + 1) + r, y)
