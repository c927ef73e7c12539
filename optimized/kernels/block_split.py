"""Block verification split over many programs per row, one launch per level, for a GPU.

Block verification reads the coins from i = K downwards; each ``h_i`` (i < K) needs
``Z_{i+1} = sum_x (p_i p(x|X_<=i) - q(x|X_<=i))+``, a full pass over rows i of p and q, and a
row below the stopping level tau is never needed. So the passes are sequential per batch row,
and the floor is rows tau..K-1 (plus p_K for a bonus). This path launches ``block_level_kernel``
for LEVEL = K, K-1, ..., 0, each over (rows x chunks):

* LEVEL = K: every program computes the weights ``p_i`` from the 2K gathered values and the
  coin ``eta_K < p_K``; chunk 0 stores the weights and whether the row stopped. Rows that
  stopped (tau = K) sum their chunk of p_K, and the last program to finish draws the bonus.
* LEVEL = i < K: rows already decided exit at once (one load). The others sum their chunk of
  ``(p_i p_row_i - q_row_i)+``; the last program to finish forms ``Z_{i+1}`` from the chunk
  sums, ``h_i = Z / (Z + 1 - p_i)``, and tests ``eta_i < h_i``. On success tau = i and the
  residual at tau has exactly those weights, so it draws from the same chunk sums (re-reading
  one chunk). LEVEL 0 has no coin: the rows left stop there, with ``p_0 = 1``.

The deciding program writes the whole output row (drafts X_1..X_tau, Y, -1 padding). Each row
reads only its floor's rows, once, plus one chunk per draw; launches are K + 1, each cheap for
the rows that exit. Coupling: as for the split token path, sums are grouped by chunks, so a
coin or a token can differ from the reference's only when ``eta_i`` lies within rounding of
``h_i`` or ``u * total`` within rounding of a partial sum (proofs_notes/optimized_coupling.md).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import W_P, gather_drafts, inverse_cdf
from .split import arrive, chunk_sum, chunk_total, pick_weights

# A row's ``state`` between the level launches: no coin has stopped it yet, or its output row is
# written (by the bonus at LEVEL = K or by the residual at the level that stopped it).
UNDECIDED = tl.constexpr(0)
DECIDED = tl.constexpr(1)


@triton.jit
def block_weights(
    px,  # [KB] float64: p_i(X_i), gathered
    qx,  # [KB] float64: q_i(X_i) (1 for deterministic drafts)
    ks,  # [KB] int: the chain positions 0..KB-1
    K,  # drafts per row
    KB: tl.constexpr,  # a power of two >= K
):
    """``pws[j] = p_{j+1}``: ``p_i = min(1, p_{i-1} p(X_i) / q(X_i))``, ``p_0 = 1``, in the
    reference's order."""
    pws = tl.full((KB,), 1.0, tl.float64)
    prev = tl.full((), 1.0, tl.float64)
    for j in range(0, K):
        r = prev * tl.sum(tl.where(ks == j, px, 0.0), 0) / tl.sum(tl.where(ks == j, qx, 0.0), 0)
        prev = tl.minimum(r, 1.0)
        pws = tl.where(ks == j, prev, pws)
    return pws


@triton.jit
def write_row(
    x_ptr,  # [B, K] int64: the drafts
    out_ptr,  # [B, K+1] int64: the output tokens
    b,  # the batch row
    K,  # drafts per row
    tau,  # drafts accepted
    y,  # int64: the token at position tau
    KB1: tl.constexpr,  # a power of two >= K + 1
):
    """``out[b] = X_1..X_tau, y, -1, ...``."""
    ks = tl.arange(0, KB1)
    xs = tl.load(x_ptr + b * K + ks, mask=ks < tl.minimum(tau, K), other=-1).to(tl.int64)
    row = tl.where(ks < tau, xs, tl.where(ks == tau, y, -1))
    tl.store(out_ptr + b * (K + 1) + ks, row, mask=ks < K + 1)


@triton.jit
def block_level_kernel(
    x_ptr,  # [B, K] int64: the drafts
    q_ptr,  # [B, K, V] float: the draft laws (read with HAS_Q only)
    p_ptr,  # [B, K+1, V] float: the target laws
    ue_ptr,  # [B, K+1] float64: u_eta, site ("eta", i) at column i (column 0 unused)
    uf_ptr,  # [B] float64: u_final
    out_ptr,  # [B, K+1] int64: the output tokens (the deciding program writes the row)
    pw_ptr,  # [B, K+1] float64: the weights p_0..p_K (written at LEVEL = K)
    state_ptr,  # [B] int32: UNDECIDED or DECIDED (written at LEVEL = K)
    part_ptr,  # [B, C] float64: this level's chunk sums
    cnt_ptr,  # [B] int32: check-in counters (0 before and after)
    K,  # drafts per row
    V,  # vocabulary size
    C,  # chunks per row (the grid's second axis)
    CH,  # entries per chunk
    LEVEL,  # the level i of this launch: K, K-1, ..., 0 in turn
    HAS_Q: tl.constexpr,  # sampled drafts with laws q (else deterministic: q one-hot)
    KB: tl.constexpr,  # a power of two >= K
    KB1: tl.constexpr,  # a power of two >= K + 1
    CB: tl.constexpr,  # a power of two >= C
    BLOCK: tl.constexpr,  # ids per inner step
):
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    u = tl.load(uf_ptr + b).to(tl.float64)
    if LEVEL == K:
        ks, x, px, qx = gather_drafts(x_ptr, q_ptr, p_ptr, b, K, V, HAS_Q, KB)
        pws = block_weights(px, qx, ks, K, KB)
        p_K = tl.sum(tl.where(ks == K - 1, pws, 0.0), 0)
        p_K = tl.where(K > 0, p_K, 1.0)
        eta = tl.load(ue_ptr + b * (K + 1) + K).to(tl.float64)
        bonus = (K == 0) | (eta < p_K)
        if c == 0:  # for the lower levels: the weights, and whether this row is decided
            tl.store(pw_ptr + b * (K + 1) + 1 + ks, pws, mask=ks < K)
            tl.store(pw_ptr + b * (K + 1), 1.0)
            tl.store(state_ptr + b, bonus.to(tl.int32))  # DECIDED if the bonus coin succeeded
        if bonus:
            p_row = p_ptr + (b * (K + 1) + K) * V
            no = tl.zeros((), dtype=tl.int1)
            tl.store(part_ptr + b * C + c, chunk_sum(p_row, p_row, 0, c, V, CH, 1.0, no, False, BLOCK))
            if arrive(cnt_ptr + b, C):
                y, total = pick_weights(
                    p_row, p_row, 0, part_ptr + b * C, C, V, CH, u, 1.0, no, False, CB, BLOCK
                )
                write_row(x_ptr, out_ptr, b, K, K, y, KB1)
                tl.store(cnt_ptr + b, 0)
    else:
        if tl.load(state_ptr + b, volatile=True) == UNDECIDED:
            i = LEVEL
            a = tl.load(pw_ptr + b * (K + 1) + i)  # p_i
            p_row = p_ptr + (b * (K + 1) + i) * V
            q_row = q_ptr + (b * K + i) * V
            x_next = tl.load(x_ptr + b * K + i).to(tl.int64)  # X_{i+1}: q one-hot there without HAS_Q
            yes = tl.full((), 1, tl.int1)
            tl.store(part_ptr + b * C + c, chunk_sum(p_row, q_row, x_next, c, V, CH, a, yes, HAS_Q, BLOCK))
            if arrive(cnt_ptr + b, C):
                Z = chunk_total(part_ptr + b * C, C, CB)
                den = Z + 1.0 - a
                h = tl.where(den > 0, Z / tl.where(den > 0, den, 1.0), 1.0)
                h = tl.minimum(h, 1.0)
                eta = tl.load(ue_ptr + b * (K + 1) + i).to(tl.float64)
                if (i == 0) | (eta < h):  # tau = i: Y from norm((p_i p - q)+), the same weights
                    y, total = pick_weights(
                        p_row, q_row, x_next, part_ptr + b * C, C, V, CH, u, a, yes, HAS_Q, CB, BLOCK
                    )
                    if total <= 0:  # no residual mass: the reference falls back to p itself
                        y = inverse_cdf(p_row, q_row, x_next, 1.0, u, V, W_P, BLOCK).to(tl.int64)
                    write_row(x_ptr, out_ptr, b, K, i, y, KB1)
                    tl.store(state_ptr + b, DECIDED)
                tl.store(cnt_ptr + b, 0)
