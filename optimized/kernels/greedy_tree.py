"""Greedy verification on a tree, one program per row (reference: ``rules/greedy.py``).

Reads one full row per visited node (its argmax) and the tree's parents and tokens.
``greedy_tree_kernel`` is one program per row; ``greedy_level_kernel`` takes one level of the
walk for all rows at once, each visited row split over chunk programs (one launch per level).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import argmax_row
from .split import NO_HIT, arrive


@triton.jit
def greedy_tree_kernel(
    par_ptr,  # [B, N] int64: the trees' parents (-1 at the root)
    tok_ptr,  # [B, N] int64: the nodes' tokens
    p_ptr,  # [B, N, V] float: the target laws, one per node
    acc_ptr,  # [B, N] int64: the accepted nodes from the root (the caller fills -1)
    nxt_ptr,  # [B] int64: the next token
    N,  # nodes per tree
    V,  # vocabulary size
    NB: tl.constexpr,  # a power of two >= N
    BLOCK: tl.constexpr,  # ids per inner step
):
    b = tl.program_id(0).to(tl.int64)
    ns = tl.arange(0, NB)
    pars = tl.load(par_ptr + b * N + ns, mask=ns < N, other=-2).to(tl.int64)
    toks = tl.load(tok_ptr + b * N + ns, mask=ns < N, other=-1).to(tl.int64)
    node = tl.zeros((), dtype=tl.int64)
    depth = tl.zeros((), dtype=tl.int64)
    done = tl.zeros((), dtype=tl.int32)
    y = tl.zeros((), dtype=tl.int64)
    tl.store(acc_ptr + b * N, 0)
    for _ in range(0, N):
        if done == 0:
            y = argmax_row(p_ptr + (b * N + node) * V, V, BLOCK)
            nxt = tl.min(tl.where((pars == node) & (ns > 0) & (toks == y), ns, NB), 0).to(tl.int64)
            if nxt < NB:
                node = nxt
                depth += 1
                tl.store(acc_ptr + b * N + depth, node)
            else:
                done = 1
    tl.store(nxt_ptr + b, y)


@triton.jit
def greedy_level_kernel(
    par_ptr,  # [B, N] int64: the trees' parents (-1 at the root)
    tok_ptr,  # [B, N] int64: the nodes' tokens
    p_ptr,  # [B, N, V] float: the target laws, one per node
    acc_ptr,  # [B, N] int64: the accepted nodes from the root (the caller fills -1)
    nxt_ptr,  # [B] int64: the next token
    node_ptr,  # [B] int64: the row's current node, -1 once stopped (written at LEVEL 0)
    part_v_ptr,  # [B, C] float64: each chunk's largest value
    part_i_ptr,  # [B, C] int64: the smallest id holding it
    cnt_ptr,  # [B] int32: check-in counters (0 before and after)
    N,  # nodes per tree
    V,  # vocabulary size
    C,  # chunks per row (the grid's second axis)
    CH,  # entries per chunk
    LEVEL,  # the depth of this launch's nodes: 0, 1, ... in turn
    NB: tl.constexpr,  # a power of two >= N
    CB: tl.constexpr,  # a power of two >= C
    BLOCK: tl.constexpr,  # ids per inner step
):
    """One level of the walk for every row still walking, its row split over chunk programs:
    each program takes its chunk's argmax; the last one of the row combines them (first chunk
    holding the largest value, so ties still go to the smallest id), then moves to the child
    carrying that token or stops. ``node[b]`` is the row's current node, -1 once stopped."""
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    node = tl.zeros((), dtype=tl.int64)
    if LEVEL > 0:
        node = tl.load(node_ptr + b, volatile=True)
    if node >= 0:
        p_row = p_ptr + (b * N + node) * V
        best_v = tl.full((BLOCK,), -1.0, tl.float64)
        best_i = tl.zeros((BLOCK,), dtype=tl.int64)
        for start in range(0, CH, BLOCK):
            offs = c * CH + start + tl.arange(0, BLOCK)
            mask = (offs < V) & (start + tl.arange(0, BLOCK) < CH)
            p = tl.load(p_row + offs, mask=mask, other=-1.0).to(tl.float64)
            better = p > best_v  # strictly: an earlier block keeps its tie
            best_i = tl.where(better, offs, best_i)
            best_v = tl.where(better, p, best_v)
        m = tl.max(best_v, 0)
        tl.store(part_v_ptr + b * C + c, m)
        tl.store(part_i_ptr + b * C + c, tl.min(tl.where(best_v == m, best_i, NO_HIT), 0))
        if arrive(cnt_ptr + b, C):
            cs = tl.arange(0, CB)
            vs = tl.load(part_v_ptr + b * C + cs, mask=cs < C, other=-2.0, volatile=True)
            ids = tl.load(part_i_ptr + b * C + cs, mask=cs < C, other=NO_HIT, volatile=True)
            y = tl.min(tl.where(vs == tl.max(vs, 0), ids, NO_HIT), 0)
            ns = tl.arange(0, NB)
            pars = tl.load(par_ptr + b * N + ns, mask=ns < N, other=-2).to(tl.int64)
            toks = tl.load(tok_ptr + b * N + ns, mask=ns < N, other=-1).to(tl.int64)
            nxt = tl.min(tl.where((pars == node) & (ns > 0) & (toks == y), ns, NB), 0).to(tl.int64)
            if LEVEL == 0:
                tl.store(acc_ptr + b * N, 0)
            if nxt < NB:
                tl.store(acc_ptr + b * N + LEVEL + 1, nxt)
                tl.store(node_ptr + b, nxt)
            else:
                tl.store(nxt_ptr + b, y)
                tl.store(node_ptr + b, -1)
            tl.store(cnt_ptr + b, 0)
