"""Token-level verification of a chain, one program per row (reference: ``rules/token.py``).

Reads only what the step needs: the K gathered values ``p_i(x_i)`` and ``q_i(x_i)``, then the
one row where the step stops (its residual, or the bonus law), never the other rows.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import (
    W_P,
    W_RESIDUAL,
    W_RESIDUAL_ONEHOT,
    acceptance,
    first_rejection,
    gather_drafts,
    inverse_cdf,
    residual_mass,
)


@triton.jit
def token_chain_kernel(
    x_ptr,  # [B, K] int64: the drafts
    q_ptr,  # [B, K, V] float: the draft laws (read with HAS_Q only)
    p_ptr,  # [B, K+1, V] float: the target laws
    ua_ptr,  # [B, K+1] float64: u_accept, site ("accept", c) at column c (column 0 unused)
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
    r = first_rejection(ua_ptr, b, K, ks, acceptance(px, qx))  # drafts 0..r-1 accepted; stop at r
    tl.store(out_ptr + b * (K + 1) + ks, x, mask=ks < r)

    p_row = p_ptr + (b * (K + 1) + r) * V
    q_row = q_ptr + (b * K + r) * V
    x_r = tl.load(x_ptr + b * K + tl.minimum(r, K - 1), mask=K > 0, other=0).to(tl.int64)
    uf = tl.load(uf_ptr + b).to(tl.float64)
    if r < K:
        total1 = residual_mass(p_row, q_row, x_r, 1.0, V, HAS_Q, BLOCK)
        if total1 > 0:
            if HAS_Q:
                y = inverse_cdf(p_row, q_row, x_r, total1, uf, V, W_RESIDUAL, BLOCK)
            else:
                y = inverse_cdf(p_row, q_row, x_r, total1, uf, V, W_RESIDUAL_ONEHOT, BLOCK)
        else:  # (p - q)+ has no mass: the reference's documented fallback, p itself
            y = inverse_cdf(p_row, q_row, x_r, total1, uf, V, W_P, BLOCK)
    else:
        y = inverse_cdf(p_row, q_row, x_r, 1.0, uf, V, W_P, BLOCK)
    tl.store(out_ptr + b * (K + 1) + r, y)
