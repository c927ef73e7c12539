"""Typical acceptance on a tree, one program per row (reference: ``rules/typical.py``).

The threshold of every node needs its row's entropy, so this rule reads all N rows in full:
its floor is N V values per row, against token-level's 2K + V.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import W_TRUNCATED, argmax_row, inverse_cdf, last_of, running_sums


@triton.jit
def entropy_row(
    p_row,  # [V] float: the target row
    V,
    BLOCK: tl.constexpr,
):
    """``H = -sum_x p(x) log(p(x) + 1e-5)``, summed left to right."""
    carry = tl.zeros((), dtype=tl.float64)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        p = tl.load(p_row + offs, mask=mask, other=0.0).to(tl.float64)
        t = tl.where(mask, p * tl.log(p + 1e-5), 0.0)
        carry = last_of(running_sums(t, carry, offs, start), offs, start, V, BLOCK)
    return -carry


@triton.jit
def typical_tree_kernel(
    par_ptr,  # [B, N] int64: the trees' parents (-1 at the root)
    tok_ptr,  # [B, N] int64: the nodes' tokens
    p_ptr,  # [B, N, V] float: the target laws, one per node
    uf_ptr,  # [B] float64: u_final
    acc_ptr,  # [B, N] int64: the accepted nodes from the root (the caller fills -1)
    nxt_ptr,  # [B] int64: the next token
    N,  # nodes per tree
    V,  # vocabulary size
    eps,  # float64: the threshold's cap (Medusa's epsilon)
    delta,  # float64: the threshold's entropy factor, min(eps, delta exp(-H))
    NB: tl.constexpr,  # a power of two >= N
    BLOCK: tl.constexpr,  # ids per inner step
):
    b = tl.program_id(0).to(tl.int64)
    ns = tl.arange(0, NB)
    thr = tl.zeros((NB,), dtype=tl.float64)
    for v in range(0, N):
        H = entropy_row(p_ptr + (b * N + v) * V, V, BLOCK)
        t = tl.minimum(eps, delta * tl.exp(-H))
        thr = tl.where(ns == v, t, thr)
    ok = ns == 0
    score = tl.zeros((NB,), dtype=tl.float64)
    depth = tl.zeros((NB,), dtype=tl.int32)
    for c in range(1, N):
        pv = tl.load(par_ptr + b * N + c)
        x = tl.load(tok_ptr + b * N + c).to(tl.int64)
        pvx = tl.load(p_ptr + (b * N + pv) * V + x).to(tl.float64)
        ok_v = tl.max(tl.where((ns == pv) & ok, 1, 0), 0) > 0
        thr_v = tl.sum(tl.where(ns == pv, thr, 0.0), 0)
        ok_c = ok_v & (pvx > thr_v)
        s = tl.sum(tl.where(ns == pv, score, 0.0), 0) + tl.where(ok_c, tl.log(tl.where(ok_c, pvx, 1.0)), 0.0)
        ok = ok | ((ns == c) & ok_c)
        score = tl.where(ns == c, s, score)
        depth = tl.where(ns == c, tl.sum(tl.where(ns == pv, depth, 0), 0) + 1, depth)
    # deepest accepted node; ties: larger score, then smaller index
    d_best = tl.max(tl.where(ok, depth, -1), 0)
    cand = ok & (depth == d_best)
    s_best = tl.max(tl.where(cand, score, float("-inf")), 0)
    best = tl.min(tl.where(cand & (score == s_best), ns, NB), 0)
    node = best
    for j in range(0, N):
        d = d_best - j
        if d >= 0:
            tl.store(acc_ptr + b * N + d, node.to(tl.int64))
            node = tl.load(par_ptr + b * N + node, mask=d > 0, other=0).to(tl.int32)
    p_row = p_ptr + (b * N + best) * V
    t_best = tl.sum(tl.where(ns == best, thr, 0.0), 0)
    uf = tl.load(uf_ptr + b).to(tl.float64)
    y = inverse_cdf(p_row, p_row, 0, 1.0, uf, V, W_TRUNCATED, BLOCK, t_best).to(tl.int64)
    if y < 0:  # the typical set is empty (only with delta > 1): the reference keeps the argmax
        y = argmax_row(p_row, V, BLOCK)
    tl.store(nxt_ptr + b, y.to(tl.int64))
