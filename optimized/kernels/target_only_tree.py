"""The target-only tree rule, one program per row (reference: ``rules/target_only.py``).

At each visited node one coin chooses among "child 1, ..., child k, none" with the weights the
reference builds from the children's gathered ``p(x_j)`` (two passes over the children, no row
read). Only the node where the walk stops is read in full: its "none" law, p without the
children's tokens (or p at a leaf).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import inverse_cdf


@triton.jit
def child_weight(px, bound, accv, stopped, ts, ta):
    """One child's weight in the reference's order; returns (w, bound, accv, stopped)."""
    single = px >= ts
    accv2 = tl.where(single, accv, accv + px)
    new = tl.minimum(accv2 / ta, 1.0)
    w = tl.where(single, 1.0 - bound, new - bound)
    bound2 = tl.where(single, 1.0, new)
    return w, bound2, accv2, tl.where(single, 1, stopped)


@triton.jit
def target_only_tree_kernel(
    par_ptr,
    tok_ptr,
    p_ptr,
    uc_ptr,
    uf_ptr,
    acc_ptr,
    nxt_ptr,
    N,
    V,
    ts,
    ta,
    NB: tl.constexpr,
    BLOCK: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    ns = tl.arange(0, NB)
    pars = tl.load(par_ptr + b * N + ns, mask=ns < N, other=-2).to(tl.int64)
    toks = tl.load(tok_ptr + b * N + ns, mask=ns < N, other=0).to(tl.int64)
    node = tl.zeros((), dtype=tl.int64)
    depth = tl.zeros((), dtype=tl.int64)
    done = tl.zeros((), dtype=tl.int32)
    tl.store(acc_ptr + b * N, 0)
    for _ in range(0, N):
        if done == 0:
            p_row = p_ptr + (b * N + node) * V
            n_kids = tl.sum(tl.where((pars == node) & (ns > 0), 1, 0), 0)
            if n_kids == 0:
                done = 1
            else:
                u = tl.load(uc_ptr + b * N + node).to(tl.float64)
                bound = tl.zeros((), dtype=tl.float64)
                accv = tl.zeros((), dtype=tl.float64)
                total = tl.zeros((), dtype=tl.float64)
                stopped = tl.zeros((), dtype=tl.int32)
                for c in range(1, N):
                    par = tl.load(par_ptr + b * N + c).to(tl.int64)
                    if (par == node) & (stopped == 0):
                        x = tl.load(tok_ptr + b * N + c).to(tl.int64)
                        px = tl.load(p_row + x).to(tl.float64)
                        w, bound, accv, stopped = child_weight(px, bound, accv, stopped, ts, ta)
                        total = total + w
                total = total + (1.0 - bound)
                target = u * total
                bound = tl.zeros((), dtype=tl.float64)
                accv = tl.zeros((), dtype=tl.float64)
                stopped = tl.zeros((), dtype=tl.int32)
                cum = tl.zeros((), dtype=tl.float64)
                chosen = tl.full((), -2, tl.int64)  # -2: not decided; -1: none
                last = tl.full((), -2, tl.int64)
                for c in range(1, N):
                    par = tl.load(par_ptr + b * N + c).to(tl.int64)
                    if (par == node) & (stopped == 0):
                        x = tl.load(tok_ptr + b * N + c).to(tl.int64)
                        px = tl.load(p_row + x).to(tl.float64)
                        w, bound, accv, stopped = child_weight(px, bound, accv, stopped, ts, ta)
                        if (w > 0) & (chosen == -2):
                            cum = cum + w
                            last = tl.zeros((), dtype=tl.int64) + c
                            if target < cum:
                                chosen = last
                w_none = 1.0 - bound
                if (w_none > 0) & (chosen == -2):
                    cum = cum + w_none
                    last = tl.full((), -1, tl.int64)
                    if target < cum:
                        chosen = last
                if chosen == -2:
                    chosen = last
                if chosen >= 0:
                    node = chosen
                    depth += 1
                    tl.store(acc_ptr + b * N + depth, node)
                else:
                    done = 2
    p_row = p_ptr + (b * N + node) * V
    uf = tl.load(uf_ptr + b).to(tl.float64)
    if done == 2:  # no child accepted: p without the children's tokens
        drop = tl.where((pars == node) & (ns > 0), toks, -1)
        y = inverse_cdf(p_row, p_row, 0, 1.0, uf, V, 3, BLOCK, 1.0, drop)
        if y < 0:  # the children carry all of p's mass: the reference draws from p
            y = inverse_cdf(p_row, p_row, 0, 1.0, uf, V, 0, BLOCK)
    else:
        y = inverse_cdf(p_row, p_row, 0, 1.0, uf, V, 0, BLOCK)
    tl.store(nxt_ptr + b, y.to(tl.int64))
