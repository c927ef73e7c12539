"""The target-only tree rule, one program per row (reference: ``rules/target_only.py``).

At each visited node one coin chooses among "child 1, ..., child k, none" with the weights the
reference builds from the children's gathered ``p(x_j)`` (two passes over the children, no row
read). Only the node where the walk stops is read in full: its "none" law, p without the
children's tokens (or p at a leaf). ``target_only_tree_kernel`` is one program per row;
``target_only_split_kernel`` (rows x chunks, one launch) spreads that row over chunk programs,
each redoing the cheap walk, and the last program of a row draws (:mod:`.split`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import W_P, W_WITHOUT, inverse_cdf
from .split import NO_HIT, arrive, crossing_chunk, pick_step

# How ``walk`` ended (its ``done``): still walking; at a leaf (the draw is from p); or at a node
# none of whose children was accepted (the draw is from p without their tokens, ``W_WITHOUT``).
WALKING = tl.constexpr(0)
AT_LEAF = tl.constexpr(1)
NONE_ACCEPTED = tl.constexpr(2)
# A node's coin while it is read: no outcome yet, or the outcome "none of the children".
UNDECIDED = tl.constexpr(-2)
NO_CHILD = tl.constexpr(-1)


@triton.jit
def child_weight(
    px,  # float64: the child's p(x) at its parent
    bound,  # float64: the coin's cumulative bound before this child
    accv,  # float64: the children's mass so far
    stopped,  # int32: 1 once a child reached threshold_single (the rest get nothing)
    ts,  # float64: threshold_single
    ta,  # float64: threshold_acc
):
    """One child's weight in the reference's order; returns (w, bound, accv, stopped)."""
    single = px >= ts
    accv2 = tl.where(single, accv, accv + px)
    new = tl.minimum(accv2 / ta, 1.0)
    w = tl.where(single, 1.0 - bound, new - bound)
    bound2 = tl.where(single, 1.0, new)
    return w, bound2, accv2, tl.where(single, 1, stopped)


@triton.jit
def walk(
    par_ptr,  # [B, N] int64: the trees' parents (-1 at the root)
    tok_ptr,  # [B, N] int64: the nodes' tokens
    p_ptr,  # [B, N, V] float: the target laws, one per node
    uc_ptr,  # [B, N] float64: u_coin, site ("coin", v) at column v
    acc_ptr,  # [B, N] int64: the accepted nodes from the root (the caller fills -1)
    b,  # the batch row
    N,  # nodes per tree
    V,  # vocabulary size
    ts,  # float64: threshold_single
    ta,  # float64: threshold_acc
    write,  # bool: store the accepted path (one program of the row)
    NB: tl.constexpr,  # a power of two >= N
):
    """The walk over the tree with one coin per visited node, from the children's gathered
    ``p(x)`` alone. Returns ``(node, done, pars)``: done is ``NONE_ACCEPTED`` when no child
    of ``node`` was accepted, ``AT_LEAF`` at a leaf. Stores the accepted path into ``acc`` when ``write``."""
    ns = tl.arange(0, NB)
    pars = tl.load(par_ptr + b * N + ns, mask=ns < N, other=-2).to(tl.int64)
    node = tl.zeros((), dtype=tl.int64)
    depth = tl.zeros((), dtype=tl.int64)
    done = tl.full((), WALKING, tl.int32)
    tl.store(acc_ptr + b * N, 0, mask=write)
    for _ in range(0, N):
        if done == WALKING:
            p_row = p_ptr + (b * N + node) * V
            n_kids = tl.sum(tl.where((pars == node) & (ns > 0), 1, 0), 0)
            if n_kids == 0:
                done = AT_LEAF
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
                chosen = tl.full((), UNDECIDED, tl.int64)
                last = tl.full((), UNDECIDED, tl.int64)
                for c in range(1, N):
                    par = tl.load(par_ptr + b * N + c).to(tl.int64)
                    if (par == node) & (stopped == 0):
                        x = tl.load(tok_ptr + b * N + c).to(tl.int64)
                        px = tl.load(p_row + x).to(tl.float64)
                        w, bound, accv, stopped = child_weight(px, bound, accv, stopped, ts, ta)
                        if (w > 0) & (chosen == UNDECIDED):
                            cum = cum + w
                            last = tl.zeros((), dtype=tl.int64) + c
                            if target < cum:
                                chosen = last
                w_none = 1.0 - bound
                if (w_none > 0) & (chosen == UNDECIDED):
                    cum = cum + w_none
                    last = tl.full((), NO_CHILD, tl.int64)
                    if target < cum:
                        chosen = last
                if chosen == UNDECIDED:
                    chosen = last
                if chosen >= 0:  # a child (not NO_CHILD)
                    node = chosen
                    depth += 1
                    tl.store(acc_ptr + b * N + depth, node, mask=write)
                else:
                    done = NONE_ACCEPTED
    return node, done, pars


@triton.jit
def target_only_tree_kernel(
    par_ptr,  # [B, N] int64: the trees' parents (-1 at the root)
    tok_ptr,  # [B, N] int64: the nodes' tokens
    p_ptr,  # [B, N, V] float: the target laws, one per node
    uc_ptr,  # [B, N] float64: u_coin, site ("coin", v) at column v
    uf_ptr,  # [B] float64: u_final
    acc_ptr,  # [B, N] int64: the accepted nodes from the root (the caller fills -1)
    nxt_ptr,  # [B] int64: the next token
    N,  # nodes per tree
    V,  # vocabulary size
    ts,  # float64: threshold_single
    ta,  # float64: threshold_acc
    NB: tl.constexpr,  # a power of two >= N
    BLOCK: tl.constexpr,  # ids per inner step
):
    b = tl.program_id(0).to(tl.int64)
    ns = tl.arange(0, NB)
    toks = tl.load(tok_ptr + b * N + ns, mask=ns < N, other=0).to(tl.int64)
    node, done, pars = walk(par_ptr, tok_ptr, p_ptr, uc_ptr, acc_ptr, b, N, V, ts, ta, True, NB)
    p_row = p_ptr + (b * N + node) * V
    uf = tl.load(uf_ptr + b).to(tl.float64)
    if done == NONE_ACCEPTED:  # no child accepted: p without the children's tokens
        drop = tl.where((pars == node) & (ns > 0), toks, -1)
        y = inverse_cdf(p_row, p_row, 0, 1.0, uf, V, W_WITHOUT, BLOCK, 1.0, drop)
        if y < 0:  # the children carry all of p's mass: the reference draws from p
            y = inverse_cdf(p_row, p_row, 0, 1.0, uf, V, W_P, BLOCK)
    else:
        y = inverse_cdf(p_row, p_row, 0, 1.0, uf, V, W_P, BLOCK)
    tl.store(nxt_ptr + b, y.to(tl.int64))


@triton.jit
def dropped(
    p_row,  # [V] float: the target row
    offs,  # [BLOCK] int: the block's ids
    mask,  # [BLOCK] bool: the block's ids inside the chunk and the row
    drop,  # [NB] int64: the ids set to 0 (entries < 0 ignored)
):
    """``p`` with the ids in ``drop`` (entries < 0 ignored) set to 0; 0 outside ``mask``."""
    p = tl.load(p_row + offs, mask=mask, other=0.0).to(tl.float64)
    hit = tl.sum(tl.where(offs[:, None] == drop[None, :], 1, 0), 1) > 0
    return tl.where(mask & ~hit, p, 0.0)


@triton.jit
def target_only_split_kernel(
    par_ptr,  # [B, N] int64: the trees' parents (-1 at the root)
    tok_ptr,  # [B, N] int64: the nodes' tokens
    p_ptr,  # [B, N, V] float: the target laws, one per node
    uc_ptr,  # [B, N] float64: u_coin, site ("coin", v) at column v
    uf_ptr,  # [B] float64: u_final
    acc_ptr,  # [B, N] int64: the accepted nodes from the root (the caller fills -1)
    nxt_ptr,  # [B] int64: the next token
    part_ptr,  # [B, C] float64: the chunk sums of the stop node's final law
    cnt_ptr,  # [B] int32: check-in counters (0 before and after)
    N,  # nodes per tree
    V,  # vocabulary size
    ts,  # float64: threshold_single
    ta,  # float64: threshold_acc
    C,  # chunks per row (the grid's second axis)
    CH,  # entries per chunk
    NB: tl.constexpr,  # a power of two >= N
    CB: tl.constexpr,  # a power of two >= C
    BLOCK: tl.constexpr,  # ids per inner step
):
    """Rows x chunks: every program redoes its row's walk (gathers only), sums its chunk of the
    stop node's final law; the last program of the row draws (:mod:`.split`)."""
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    ns = tl.arange(0, NB)
    toks = tl.load(tok_ptr + b * N + ns, mask=ns < N, other=0).to(tl.int64)
    node, done, pars = walk(par_ptr, tok_ptr, p_ptr, uc_ptr, acc_ptr, b, N, V, ts, ta, c == 0, NB)
    p_row = p_ptr + (b * N + node) * V
    drop = tl.where((pars == node) & (ns > 0) & (done == NONE_ACCEPTED), toks, -1)
    total = tl.zeros((BLOCK,), dtype=tl.float64)
    for start in range(0, CH, BLOCK):
        offs = c * CH + start + tl.arange(0, BLOCK)
        total += dropped(p_row, offs, (offs < V) & (start + tl.arange(0, BLOCK) < CH), drop)
    tl.store(part_ptr + b * C + c, tl.sum(total, 0))
    if arrive(cnt_ptr + b, C):
        u = tl.load(uf_ptr + b).to(tl.float64)
        tot, target, cc, carry = crossing_chunk(part_ptr + b * C, C, u, CB)
        first = tl.full((), NO_HIT, tl.int64)
        last = tl.full((), -1, tl.int64)
        if tot > 0:
            end = tl.minimum(V, cc * CH + CH)
            for start in range(0, CH, BLOCK):
                offs = cc * CH + start + tl.arange(0, BLOCK)
                mask = (offs < V) & (start + tl.arange(0, BLOCK) < CH)
                w = dropped(p_row, offs, mask, drop)
                carry, first, last = pick_step(
                    w, offs, mask, cc * CH + start, end, carry, target, first, last, BLOCK
                )
            y = tl.where(first < NO_HIT, first, last)
        else:  # the children carry all of p's mass: the reference draws from p
            y = inverse_cdf(p_row, p_row, 0, 1.0, u, V, W_P, BLOCK).to(tl.int64)
        tl.store(nxt_ptr + b, y)
        tl.store(cnt_ptr + b, 0)
