"""Block verification of a chain, one program per row (reference: ``rules/block.py``).

Reads the K gathered ``p(X_i)``, ``q(X_i)`` for the weights ``p_i``, then walks the coins from
i = K downwards: ``h_K = p_K`` needs no row; each ``h_i`` (i < K) needs ``Z_{i+1}``, one pass
over row i; the walk stops at the first success tau, whose residual is one more pass over row
tau. Rows below tau are never read.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import W_P, W_RESIDUAL, W_RESIDUAL_ONEHOT, gather_drafts, inverse_cdf, residual_mass


@triton.jit
def block_chain_kernel(
    x_ptr,  # [B, K] int64: the drafts
    q_ptr,  # [B, K, V] float: the draft laws (read with HAS_Q only)
    p_ptr,  # [B, K+1, V] float: the target laws
    ue_ptr,  # [B, K+1] float64: u_eta, site ("eta", i) at column i (column 0 unused)
    uf_ptr,  # [B] float64: u_final
    out_ptr,  # [B, K+1] int64: the output tokens (the caller fills -1)
    K,  # drafts per row
    V,  # vocabulary size
    HAS_Q: tl.constexpr,  # sampled drafts with laws q (else deterministic: q one-hot)
    KB: tl.constexpr,  # a power of two >= K
    BLOCK: tl.constexpr,  # ids per inner step
):
    b = tl.program_id(0).to(tl.int64)
    ks, x, px, qx = gather_drafts(x_ptr, q_ptr, p_ptr, b, K, V, HAS_Q, KB)
    # p_i = min(1, p_{i-1} p(X_i) / q(X_i)), p_0 = 1; pws[j] holds p_{j+1}
    pws = tl.full((KB,), 1.0, tl.float64)
    prev = tl.full((), 1.0, tl.float64)
    for j in range(0, K):
        r = prev * tl.sum(tl.where(ks == j, px, 0.0), 0) / tl.sum(tl.where(ks == j, qx, 0.0), 0)
        prev = tl.minimum(r, 1.0)
        pws = tl.where(ks == j, prev, pws)
    tau = tl.zeros((), dtype=tl.int32)
    found = tl.zeros((), dtype=tl.int32)
    for j in range(0, K):
        i = K - j
        if found == 0:
            p_i = tl.sum(tl.where(ks == i - 1, pws, 0.0), 0)
            if i == K:
                h = p_i
            else:
                x_next = tl.load(x_ptr + b * K + i).to(tl.int64)
                Z = residual_mass(
                    p_ptr + (b * (K + 1) + i) * V, q_ptr + (b * K + i) * V, x_next, p_i, V, HAS_Q, BLOCK
                )
                den = Z + 1.0 - p_i
                h = tl.where(den > 0, Z / tl.where(den > 0, den, 1.0), 1.0)
                h = tl.minimum(h, 1.0)
            eta = tl.load(ue_ptr + b * (K + 1) + i).to(tl.float64)
            if eta < h:
                tau = i
                found = 1
    tl.store(out_ptr + b * (K + 1) + ks, x, mask=ks < tau)
    uf = tl.load(uf_ptr + b).to(tl.float64)
    p_row = p_ptr + (b * (K + 1) + tau) * V
    if tau == K:
        y = inverse_cdf(p_row, q_ptr, 0, 1.0, uf, V, W_P, BLOCK)
    else:
        q_row = q_ptr + (b * K + tau) * V
        a = tl.where(tau == 0, 1.0, tl.sum(tl.where(ks == tau - 1, pws, 0.0), 0))
        x_t = tl.load(x_ptr + b * K + tau).to(tl.int64)
        total1 = residual_mass(p_row, q_row, x_t, a, V, HAS_Q, BLOCK)
        if total1 > 0:
            if HAS_Q:
                y = inverse_cdf(p_row, q_row, x_t, total1, uf, V, W_RESIDUAL, BLOCK, a)
            else:
                y = inverse_cdf(p_row, q_row, x_t, total1, uf, V, W_RESIDUAL_ONEHOT, BLOCK, a)
        else:  # no residual mass: the reference falls back to p itself
            y = inverse_cdf(p_row, q_row, x_t, 1.0, uf, V, W_P, BLOCK)
    tl.store(out_ptr + b * (K + 1) + tau, y)
