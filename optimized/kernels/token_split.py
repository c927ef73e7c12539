"""Token-level verification split over many programs per row, for large vocabularies on a GPU.

One program per row cannot stream a 128k-entry row fast enough, and the exact single-program
kernel (:mod:`.token_chain`) passes over the stop row three times to reproduce the reference's
rounding. ``token_split_kernel`` (one launch, rows x chunks) moves the floor's bytes once: each
program redoes its row's acceptance tests on the gathered ``p(x_i)``, ``q(x_i)`` (2K values:
cheaper than a launch and a buffer), finds the stop node r and sums its chunk of the stop row's
weights, ``(p_r - q_r)+`` after a rejection or ``p_K`` for the bonus; chunk 0 writes the
accepted drafts and the -1 padding. The program that finishes last for its row
(:func:`.split.arrive`) draws: inverse CDF over the chunk sums with ``u * total``, then over the
one chunk that holds the crossing (re-read), and writes the token at position r. (Before, the
draw was a second launch, one program per row.)

The law is the reference's exactly; the coupling is exact except that the sum is grouped by
chunks and not normalized before the draw, so a token can differ only when ``u * total`` falls
within rounding of a partial sum (proofs_notes/optimized_coupling.md; checked by
tests/test_optimized_coupled.py::test_split_token_path_agrees_with_the_reference).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import W_P, acceptance, first_rejection, gather_drafts, inverse_cdf
from .split import arrive, chunk_sum, pick_weights


@triton.jit
def stop_node(
    x_ptr,  # [B, K] int64: the drafts
    q_ptr,  # [B, K, V] float: the draft laws (read with HAS_Q only)
    p_ptr,  # [B, K+1, V] float: the target laws
    ua_ptr,  # [B, K+1] float64: u_accept (column 0 unused)
    b,  # the batch row
    K,  # drafts per row
    V,
    HAS_Q: tl.constexpr,
    KB: tl.constexpr,  # a power of two >= K
):
    """The row's acceptance tests; returns (r, the drafts, their positions): drafts 0..r-1 are
    accepted and the step stops at node r (r = K: all accepted)."""
    ks, x, px, qx = gather_drafts(x_ptr, q_ptr, p_ptr, b, K, V, HAS_Q, KB)
    r = first_rejection(ua_ptr, b, K, ks, acceptance(px, qx)).to(tl.int64)
    return r, x, ks


@triton.jit
def token_split_kernel(
    x_ptr,  # [B, K] int64: the drafts
    q_ptr,  # [B, K, V] float: the draft laws (read with HAS_Q only)
    p_ptr,  # [B, K+1, V] float: the target laws
    ua_ptr,  # [B, K+1] float64: u_accept, site ("accept", c) at column c (column 0 unused)
    uf_ptr,  # [B] float64: u_final
    out_ptr,  # [B, K+1] int64: the output tokens (every position written)
    part_ptr,  # [B, C] float64: the chunk sums of the stop row's weights
    cnt_ptr,  # [B] int32: check-in counters (0 before and after)
    K,  # drafts per row
    V,  # vocabulary size
    C,  # chunks per row (the grid's second axis)
    CH,  # entries per chunk
    HAS_Q: tl.constexpr,  # sampled drafts with laws q (else deterministic: q one-hot)
    KB: tl.constexpr,  # a power of two >= K
    CB: tl.constexpr,  # a power of two >= C
    BLOCK: tl.constexpr,  # ids per inner step
):
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    r, x, ks = stop_node(x_ptr, q_ptr, p_ptr, ua_ptr, b, K, V, HAS_Q, KB)
    if c == 0:  # the accepted drafts and the padding; position r is the last program's
        tl.store(out_ptr + b * (K + 1) + ks, tl.where(ks < r, x, -1), mask=(ks < K + 1) & (ks != r))
        tl.store(out_ptr + b * (K + 1) + K, -1, mask=r < K)
    residual = r < K
    p_row = p_ptr + (b * (K + 1) + r) * V
    q_row = q_ptr + (b * K + tl.minimum(r, K - 1)) * V
    x_r = tl.load(x_ptr + b * K + tl.minimum(r, K - 1), mask=K > 0, other=0).to(tl.int64)
    tl.store(part_ptr + b * C + c, chunk_sum(p_row, q_row, x_r, c, V, CH, 1.0, residual, HAS_Q, BLOCK))
    if arrive(cnt_ptr + b, C):
        u = tl.load(uf_ptr + b).to(tl.float64)
        y, total = pick_weights(
            p_row, q_row, x_r, part_ptr + b * C, C, V, CH, u, 1.0, residual, HAS_Q, CB, BLOCK
        )
        if total <= 0:  # (p - q)+ has no mass: the reference's fallback, p itself (exact row path)
            y = inverse_cdf(p_row, q_row, x_r, 1.0, u, V, W_P, BLOCK).to(tl.int64)
        tl.store(out_ptr + b * (K + 1) + r, y)
        tl.store(cnt_ptr + b, 0)
