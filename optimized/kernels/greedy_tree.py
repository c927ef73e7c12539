"""Greedy verification on a tree, one program per row (reference: ``rules/greedy.py``).

Reads one full row per visited node (its argmax) and the tree's parents and tokens.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import argmax_row


@triton.jit
def greedy_tree_kernel(
    par_ptr, tok_ptr, p_ptr, acc_ptr, nxt_ptr, N, V, NB: tl.constexpr, BLOCK: tl.constexpr
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
