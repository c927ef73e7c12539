"""The strict rule on a tree, one program per row (reference: ``rules/strict.py``).

At the current node draw ``y`` from the target's law by the reference's inverse CDF with the
uniform of site ``("y", node)``; move to the child carrying ``y``, or stop and emit it. Reads one
full row per visited node and the tree's parents and tokens.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import W_P, inverse_cdf


@triton.jit
def strict_tree_kernel(
    par_ptr,  # [B, N] int64: the trees' parents (-1 at the root)
    tok_ptr,  # [B, N] int64: the nodes' tokens
    p_ptr,  # [B, N, V] float: the target laws, one per node
    uy_ptr,  # [B, N] float64: u_y, site ("y", v) at column v
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
            p_row = p_ptr + (b * N + node) * V
            u = tl.load(uy_ptr + b * N + node).to(tl.float64)
            y = inverse_cdf(p_row, p_row, 0, 1.0, u, V, WEIGHTS=W_P, BLOCK=BLOCK).to(tl.int64)
            nxt = tl.min(tl.where((pars == node) & (ns > 0) & (toks == y), ns, NB), 0).to(tl.int64)
            if nxt < NB:
                node = nxt
                depth += 1
                tl.store(acc_ptr + b * N + depth, node)
            else:
                done = 1
    tl.store(nxt_ptr + b, y)
