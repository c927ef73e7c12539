"""Multi-draft speculative sampling on a tree, one program per row (reference: ``rules/mss.py``
with replacement, ``rules/rrs.py`` without).

The walk visits the nodes in index order: a node's children come after it, so one pass over
c = 1..N-1 meets the children of the current node in order, and after an acceptance the
children of the new node. It reads the gathered ``p(x)``, ``q(x)`` of each tested child; a
rejection rewrites the residual ``norm((p - q)+)`` (and, without replacement, ``q`` with the
rejected token removed) into the row's float64 scratch, one pass over the row. The final draw
reads the current law once more.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import acceptance, inverse_cdf, last_of, residual_mass, residual_terms, running_sums


@triton.jit
def write_residual(p_row, q_row, x_det, out_row, total, V, HAS_Q: tl.constexpr, BLOCK: tl.constexpr):
    """``out = (p - q)+ / total`` (q one-hot at x_det without HAS_Q)."""
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        w = residual_terms(p_row, q_row, x_det, 1.0, offs, mask, HAS_Q)
        tl.debug_barrier()
        tl.store(out_row + offs, w / total, mask=mask)
    tl.debug_barrier()


@triton.jit
def write_without(q_row, x, out_row, V, BLOCK: tl.constexpr):
    """``out = norm(q without x)`` (left unnormalized, all zero, when nothing is left)."""
    carry = tl.zeros((), dtype=tl.float64)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        q = tl.load(q_row + offs, mask=mask, other=0.0).to(tl.float64)
        w = tl.where(mask & (offs != x), q, 0.0)
        carry = last_of(running_sums(w, carry, offs, start), offs, start, V, BLOCK)
    total = tl.where(carry > 0, carry, 1.0)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        q = tl.load(q_row + offs, mask=mask, other=0.0).to(tl.float64)
        tl.debug_barrier()
        tl.store(out_row + offs, tl.where(offs != x, q, 0.0) / total, mask=mask)
    tl.debug_barrier()


@triton.jit
def load_at(row, x, FROM_SCRATCH, scratch_row):
    if FROM_SCRATCH:
        v = tl.load(scratch_row + x)
    else:
        v = tl.load(row + x).to(tl.float64)
    return v


@triton.jit
def multi_draft_kernel(
    par_ptr,
    tok_ptr,
    q_ptr,
    p_ptr,
    ua_ptr,
    uf_ptr,
    pw_ptr,
    qw_ptr,
    acc_ptr,
    nxt_ptr,
    N,
    V,
    HAS_Q: tl.constexpr,
    WITHOUT_REPLACEMENT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    node = tl.zeros((), dtype=tl.int64)
    depth = tl.zeros((), dtype=tl.int64)
    p_scratch = tl.zeros((), dtype=tl.int32)  # 1: the node's current law is in pw (a residual)
    q_scratch = tl.zeros((), dtype=tl.int32)  # 1: its current draft law is in qw (rrs)
    pw = pw_ptr + b * V
    qw = qw_ptr + b * V
    tl.store(acc_ptr + b * N, 0)
    for c in range(1, N):
        par = tl.load(par_ptr + b * N + c).to(tl.int64)
        if par == node:
            x = tl.load(tok_ptr + b * N + c).to(tl.int64)
            p_row = p_ptr + (b * N + node) * V
            q_row = q_ptr + (b * N + node) * V
            px = load_at(p_row, x, p_scratch == 1, pw)
            if HAS_Q:
                qx = load_at(q_row, x, q_scratch == 1, qw)
            else:
                qx = tl.full((), 1.0, tl.float64)
            a = acceptance(px, qx)
            u = tl.load(ua_ptr + b * N + c).to(tl.float64)
            if u < a:
                node = tl.zeros((), dtype=tl.int64) + c
                depth += 1
                tl.store(acc_ptr + b * N + depth, node)
                p_scratch = 0
                q_scratch = 0
            else:
                # p <- norm((p - q)+); p itself when that has no mass (the reference's fallback)
                if p_scratch == 1:
                    if q_scratch == 1:
                        total = residual_mass(pw, qw, x, 1.0, V, HAS_Q, BLOCK)
                        if total > 0:
                            write_residual(pw, qw, x, pw, total, V, HAS_Q, BLOCK)
                    else:
                        total = residual_mass(pw, q_row, x, 1.0, V, HAS_Q, BLOCK)
                        if total > 0:
                            write_residual(pw, q_row, x, pw, total, V, HAS_Q, BLOCK)
                else:
                    if q_scratch == 1:
                        total = residual_mass(p_row, qw, x, 1.0, V, HAS_Q, BLOCK)
                        if total > 0:
                            write_residual(p_row, qw, x, pw, total, V, HAS_Q, BLOCK)
                            p_scratch = 1
                    else:
                        total = residual_mass(p_row, q_row, x, 1.0, V, HAS_Q, BLOCK)
                        if total > 0:
                            write_residual(p_row, q_row, x, pw, total, V, HAS_Q, BLOCK)
                            p_scratch = 1
                if WITHOUT_REPLACEMENT and HAS_Q:
                    if q_scratch == 1:
                        write_without(qw, x, qw, V, BLOCK)
                    else:
                        write_without(q_row, x, qw, V, BLOCK)
                        q_scratch = 1
    uf = tl.load(uf_ptr + b).to(tl.float64)
    if p_scratch == 1:
        y = inverse_cdf(pw, pw, 0, 1.0, uf, V, 0, BLOCK)
    else:
        y = inverse_cdf(p_ptr + (b * N + node) * V, pw, 0, 1.0, uf, V, 0, BLOCK)
    tl.store(nxt_ptr + b, y.to(tl.int64))
