"""Multi-draft speculative sampling on a tree, one program per row (reference: ``rules/mss.py``
with replacement, ``rules/rrs.py`` without).

The walk visits the nodes in index order: a node's children come after it, so one pass over
c = 1..N-1 meets the children of the current node in order, and after an acceptance the
children of the new node. It reads the gathered ``p(x)``, ``q(x)`` of each tested child; a
rejection rewrites the residual ``norm((p - q)+)`` (and, without replacement, ``q`` with the
rejected token removed) into the row's float64 scratch, one pass over the row. The final draw
reads the current law once more.

``multi_draft_level_kernel`` (the split path) writes no scratch row: after k rejections at a
node the current laws at any id are recomputed from the original ``p``, ``q`` and the k
recorded masses, with the same operations in the same order (:func:`current_laws`). Each
launch does one full-row pass per walking row, spread over chunk programs.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .sampling import W_P, acceptance, inverse_cdf, last_of, residual_mass, residual_terms, running_sums
from .split import NO_HIT, arrive, chunk_total, crossing_chunk, pick_step

# Where ``multi_draft_kernel`` reads a node's current laws (its ``p_at``, ``q_at``): the node's
# rows of p and q as given, or the row's float64 scratch (pw: the residual after a rejection;
# qw: rrs's draft law without the rejected tokens).
INPUT_ROW = tl.constexpr(0)
SCRATCH_ROW = tl.constexpr(1)


@triton.jit
def write_residual(
    p_row,  # [V] float: the node's current target row (its row of p, or pw)
    q_row,  # [V] float: its current draft row (its row of q, or qw; read with HAS_Q only)
    x_det,  # the rejected token (q one-hot there without HAS_Q)
    out_row,  # [V] float64: the scratch row written (pw; may be p_row)
    total,  # float64: the residual's mass, > 0
    V,
    HAS_Q: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """``out = (p - q)+ / total`` (q one-hot at x_det without HAS_Q)."""
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        w = residual_terms(p_row, q_row, x_det, 1.0, offs, mask, HAS_Q)
        tl.debug_barrier()
        tl.store(out_row + offs, w / total, mask=mask)
    tl.debug_barrier()


@triton.jit
def write_without(
    q_row,  # [V] float: the node's current draft row (its row of q, or qw)
    x,  # the rejected token
    out_row,  # [V] float64: the scratch row written (qw; may be q_row)
    V,
    BLOCK: tl.constexpr,
):
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
def load_at(
    row,  # [V] float: the node's row of the input
    x,  # the id read
    from_scratch,  # bool: read scratch_row instead
    scratch_row,  # [V] float64: the row's scratch (pw or qw)
):
    if from_scratch:
        v = tl.load(scratch_row + x)
    else:
        v = tl.load(row + x).to(tl.float64)
    return v


@triton.jit
def multi_draft_kernel(
    par_ptr,  # [B, N] int64: the trees' parents (-1 at the root)
    tok_ptr,  # [B, N] int64: the nodes' tokens
    q_ptr,  # [B, N, V] float: the draft laws, one per node (read with HAS_Q only)
    p_ptr,  # [B, N, V] float: the target laws, one per node
    ua_ptr,  # [B, N] float64: u_accept, site ("accept", c) at column c (column 0 unused)
    uf_ptr,  # [B] float64: u_final
    pw_ptr,  # [B, V] float64: scratch, the current node's residual target law
    qw_ptr,  # [B, V] float64: scratch, its draft law without the rejected tokens (rrs)
    acc_ptr,  # [B, N] int64: the accepted nodes from the root (the caller fills -1)
    nxt_ptr,  # [B] int64: the next token
    N,  # nodes per tree
    V,  # vocabulary size
    HAS_Q: tl.constexpr,  # sampled drafts with laws q (else deterministic: q one-hot)
    WITHOUT_REPLACEMENT: tl.constexpr,  # rrs (else mss)
    BLOCK: tl.constexpr,  # ids per inner step
):
    b = tl.program_id(0).to(tl.int64)
    node = tl.zeros((), dtype=tl.int64)
    depth = tl.zeros((), dtype=tl.int64)
    p_at = tl.full((), INPUT_ROW, tl.int32)  # SCRATCH_ROW: the node's current law is in pw (a residual)
    q_at = tl.full((), INPUT_ROW, tl.int32)  # SCRATCH_ROW: its current draft law is in qw (rrs)
    pw = pw_ptr + b * V
    qw = qw_ptr + b * V
    tl.store(acc_ptr + b * N, 0)
    for c in range(1, N):
        par = tl.load(par_ptr + b * N + c).to(tl.int64)
        if par == node:
            x = tl.load(tok_ptr + b * N + c).to(tl.int64)
            p_row = p_ptr + (b * N + node) * V
            q_row = q_ptr + (b * N + node) * V
            px = load_at(p_row, x, p_at == SCRATCH_ROW, pw)
            if HAS_Q:
                qx = load_at(q_row, x, q_at == SCRATCH_ROW, qw)
            else:
                qx = tl.full((), 1.0, tl.float64)
            a = acceptance(px, qx)
            u = tl.load(ua_ptr + b * N + c).to(tl.float64)
            if u < a:
                node = tl.zeros((), dtype=tl.int64) + c
                depth += 1
                tl.store(acc_ptr + b * N + depth, node)
                p_at = INPUT_ROW
                q_at = INPUT_ROW
            else:
                # p <- norm((p - q)+); p itself when that has no mass (the reference's fallback)
                if p_at == SCRATCH_ROW:
                    if q_at == SCRATCH_ROW:
                        total = residual_mass(pw, qw, x, 1.0, V, HAS_Q, BLOCK)
                        if total > 0:
                            write_residual(pw, qw, x, pw, total, V, HAS_Q, BLOCK)
                    else:
                        total = residual_mass(pw, q_row, x, 1.0, V, HAS_Q, BLOCK)
                        if total > 0:
                            write_residual(pw, q_row, x, pw, total, V, HAS_Q, BLOCK)
                else:
                    if q_at == SCRATCH_ROW:
                        total = residual_mass(p_row, qw, x, 1.0, V, HAS_Q, BLOCK)
                        if total > 0:
                            write_residual(p_row, qw, x, pw, total, V, HAS_Q, BLOCK)
                            p_at = SCRATCH_ROW
                    else:
                        total = residual_mass(p_row, q_row, x, 1.0, V, HAS_Q, BLOCK)
                        if total > 0:
                            write_residual(p_row, q_row, x, pw, total, V, HAS_Q, BLOCK)
                            p_at = SCRATCH_ROW
                if WITHOUT_REPLACEMENT and HAS_Q:
                    if q_at == SCRATCH_ROW:
                        write_without(qw, x, qw, V, BLOCK)
                    else:
                        write_without(q_row, x, qw, V, BLOCK)
                        q_at = SCRATCH_ROW
    uf = tl.load(uf_ptr + b).to(tl.float64)
    if p_at == SCRATCH_ROW:
        y = inverse_cdf(pw, pw, 0, 1.0, uf, V, W_P, BLOCK)
    else:
        y = inverse_cdf(p_ptr + (b * N + node) * V, pw, 0, 1.0, uf, V, W_P, BLOCK)
    tl.store(nxt_ptr + b, y.to(tl.int64))


@triton.jit
def pick(
    vec,  # [n] a small vector
    j,  # the entry wanted
):
    """Entry j of a small vector (a scalar)."""
    return tl.sum(tl.where(tl.arange(0, vec.shape[0]) == j, vec, tl.zeros_like(vec)), 0)


@triton.jit
def current_laws(
    p,  # float64 (scalar or [BLOCK]): the node's original p at the ids y
    q,  # float64, like p: its original q there (ignored without HAS_Q)
    y,  # int (like p): the ids
    k,  # rejections so far at the node
    hx,  # [NB] int64: the rejected ids, in order
    hz,  # [NB] float64: the residual mass after each rejection
    hs,  # [NB] float64: rrs's draft mass after each rejection
    HAS_Q: tl.constexpr,
    WITHOUT_REPLACEMENT: tl.constexpr,
):
    """The node's current target and draft values at ids ``y`` after its first k rejections,
    recomputed from the original values ``p(y)``, ``q(y)`` and the history (rejected ids hx,
    residual masses hz, rrs draft masses hs) with the reference's operations in its order:
    ``p <- (p - q)+ / Z`` (unchanged when Z = 0, the fallback), then, without replacement,
    ``q <- (q without x) / S`` (unnormalized when S = 0). So no scratch row is written."""
    for j in range(0, k):
        xj = pick(hx, j)
        zj = pick(hz, j)
        if HAS_Q:
            qj = q
        else:
            qj = tl.where(y == xj, 1.0, 0.0)
        p = tl.where(zj > 0, tl.maximum(p - qj, 0.0) / tl.where(zj > 0, zj, 1.0), p)
        if HAS_Q and WITHOUT_REPLACEMENT:
            sj = pick(hs, j)
            q = tl.where(y == xj, 0.0, q)
            q = tl.where(sj > 0, q / tl.where(sj > 0, sj, 1.0), q)
    return p, q


@triton.jit
def pass_weights(
    p_row,  # [V] float: the node's row of p
    q_row,  # [V] float: its row of q (read with HAS_Q only)
    offs,  # [BLOCK] int: the block's ids
    mask,  # [BLOCK] bool: the block's ids inside the chunk and the row
    k,  # rejections so far at the node
    hx,  # [NB] int64: the rejected ids, in order
    hz,  # [NB] float64: the residual mass after each rejection
    hs,  # [NB] float64: rrs's draft mass after each rejection
    reject,  # bool: a rejection's residual pass (else the final law's)
    x_rej,  # int64: the rejected id (-1: none)
    HAS_Q: tl.constexpr,
    WITHOUT_REPLACEMENT: tl.constexpr,
):
    """One block of a pass: ``(p_k - q_k)+`` after rejecting x_rej (q one-hot at x_rej without
    HAS_Q) or ``p_k`` for the final law; and ``q_k`` without x_rej (the rrs renormalizer)."""
    p = tl.load(p_row + offs, mask=mask, other=0.0).to(tl.float64)
    if HAS_Q:
        q = tl.load(q_row + offs, mask=mask, other=0.0).to(tl.float64)
    else:
        q = tl.zeros_like(p)
    p, q = current_laws(p, q, offs, k, hx, hz, hs, HAS_Q, WITHOUT_REPLACEMENT)
    if HAS_Q:
        qt = q
    else:
        qt = tl.where(offs == x_rej, 1.0, 0.0)
    w = tl.where(reject, tl.maximum(p - qt, 0.0), p)
    return tl.where(mask, w, 0.0), tl.where(mask & (offs != x_rej), q, 0.0)


@triton.jit
def multi_draft_level_kernel(
    par_ptr,  # [B, N] int64: the trees' parents (-1 at the root)
    tok_ptr,  # [B, N] int64: the nodes' tokens
    q_ptr,  # [B, N, V] float: the draft laws, one per node (read with HAS_Q only)
    p_ptr,  # [B, N, V] float: the target laws, one per node
    ua_ptr,  # [B, N] float64: u_accept, site ("accept", c) at column c (column 0 unused)
    uf_ptr,  # [B] float64: u_final
    acc_ptr,  # [B, N] int64: the accepted nodes from the root (the caller fills -1)
    nxt_ptr,  # [B] int64: the next token
    st_ptr,  # [B, 4] int64: (node, next child to test, depth, k); node -1 once done
    hx_ptr,  # [B, NB] int64: the node's rejected ids, in order
    hz_ptr,  # [B, NB] float64: the residual mass after each
    hs_ptr,  # [B, NB] float64: rrs's draft mass after each
    part_ptr,  # [B, C] float64: the chunk sums of this pass's weights
    part_s_ptr,  # [B, C] float64: the chunk sums of q without the rejected id
    cnt_ptr,  # [B] int32: check-in counters (0 before and after)
    N,  # nodes per tree
    V,  # vocabulary size
    C,  # chunks per row (the grid's second axis)
    CH,  # entries per chunk
    LEVEL,  # the pass of this launch: 0, 1, ... in turn (state read from LEVEL 1 on)
    HAS_Q: tl.constexpr,  # sampled drafts with laws q (else deterministic: q one-hot)
    WITHOUT_REPLACEMENT: tl.constexpr,  # rrs (else mss)
    NB: tl.constexpr,  # a power of two >= N
    CB: tl.constexpr,  # a power of two >= C
    BLOCK: tl.constexpr,  # ids per inner step
):
    """One full-row pass of the multi-draft walk for every row still walking, split over chunk
    programs. Each program replays the row's cheap part from the state (node, next child to
    test, depth, k rejections and their history): it tests children on gathered values until
    one is rejected (a pass over the residual's mass is due) or none is left (a pass over the
    final law is due), sums its chunk of that pass, and the last program of the row folds the
    result into the state, or draws the token (:mod:`.split`). ``st[b] = (node, next child,
    depth, k)``, node -1 once the row is done."""
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64)
    js = tl.arange(0, NB)
    node = tl.zeros((), dtype=tl.int64)
    cur = tl.full((), 1, tl.int64)
    depth = tl.zeros((), dtype=tl.int64)
    k = tl.zeros((), dtype=tl.int64)
    if LEVEL > 0:
        node = tl.load(st_ptr + b * 4, volatile=True)
        cur = tl.load(st_ptr + b * 4 + 1, volatile=True)
        depth = tl.load(st_ptr + b * 4 + 2, volatile=True)
        k = tl.load(st_ptr + b * 4 + 3, volatile=True)
    elif c == 0:
        tl.store(acc_ptr + b * N, 0)
    if node >= 0:
        hx = tl.load(hx_ptr + b * NB + js, mask=js < k, other=-1)
        hz = tl.load(hz_ptr + b * NB + js, mask=js < k, other=0.0)
        hs = tl.load(hs_ptr + b * NB + js, mask=js < k, other=0.0)
        reject = tl.zeros((), dtype=tl.int1)
        c_rej = tl.zeros((), dtype=tl.int64)
        x_rej = tl.full((), -1, tl.int64)
        for cc in range(1, N):
            if (cc >= cur) & (reject == 0):
                par = tl.load(par_ptr + b * N + cc).to(tl.int64)
                if par == node:
                    x = tl.load(tok_ptr + b * N + cc).to(tl.int64)
                    px = tl.load(p_ptr + (b * N + node) * V + x).to(tl.float64)
                    if HAS_Q:
                        qx = tl.load(q_ptr + (b * N + node) * V + x).to(tl.float64)
                    else:
                        qx = tl.zeros_like(px)
                    px, qx = current_laws(px, qx, x, k, hx, hz, hs, HAS_Q, WITHOUT_REPLACEMENT)
                    if not HAS_Q:
                        qx = tl.full((), 1.0, tl.float64)
                    u = tl.load(ua_ptr + b * N + cc).to(tl.float64)
                    if u < acceptance(px, qx):
                        node = tl.zeros((), dtype=tl.int64) + cc
                        depth += 1
                        k = tl.zeros((), dtype=tl.int64)
                        tl.store(acc_ptr + b * N + depth, node, mask=c == 0)
                    else:
                        reject = tl.full((), 1, tl.int1)
                        c_rej = tl.zeros((), dtype=tl.int64) + cc
                        x_rej = x
        p_row = p_ptr + (b * N + node) * V
        q_row = q_ptr + (b * N + node) * V
        total = tl.zeros((BLOCK,), dtype=tl.float64)
        total_s = tl.zeros((BLOCK,), dtype=tl.float64)
        for start in range(0, CH, BLOCK):
            offs = c * CH + start + tl.arange(0, BLOCK)
            mask = (offs < V) & (start + tl.arange(0, BLOCK) < CH)
            w, s = pass_weights(
                p_row, q_row, offs, mask, k, hx, hz, hs, reject, x_rej, HAS_Q, WITHOUT_REPLACEMENT
            )
            total += w
            total_s += s
        tl.store(part_ptr + b * C + c, tl.sum(total, 0))
        tl.store(part_s_ptr + b * C + c, tl.sum(total_s, 0))
        if arrive(cnt_ptr + b, C):
            ns = tl.arange(0, NB)
            pars = tl.load(par_ptr + b * N + ns, mask=ns < N, other=-2).to(tl.int64)
            more = tl.sum(tl.where((pars == node) & (ns > c_rej), 1, 0), 0) > 0
            Z = chunk_total(part_ptr + b * C, C, CB)
            if reject & (more | (Z <= 0)):  # record the rejection; the walk goes on
                tl.store(hx_ptr + b * NB + k, x_rej)
                tl.store(hz_ptr + b * NB + k, tl.where(Z > 0, Z, 0.0))
                tl.store(hs_ptr + b * NB + k, chunk_total(part_s_ptr + b * C, C, CB))
                tl.store(st_ptr + b * 4, node)
                tl.store(st_ptr + b * 4 + 1, c_rej + 1)
                tl.store(st_ptr + b * 4 + 2, depth)
                tl.store(st_ptr + b * 4 + 3, k + 1)
            else:  # draw: from the last residual (every child rejected), or from the final law
                u = tl.load(uf_ptr + b).to(tl.float64)
                tot, target, ch, carry = crossing_chunk(part_ptr + b * C, C, u, CB)
                first = tl.full((), NO_HIT, tl.int64)
                last = tl.full((), -1, tl.int64)
                end = tl.minimum(V, ch * CH + CH)
                for start in range(0, CH, BLOCK):
                    offs = ch * CH + start + tl.arange(0, BLOCK)
                    mask = (offs < V) & (start + tl.arange(0, BLOCK) < CH)
                    w, _ = pass_weights(
                        p_row, q_row, offs, mask, k, hx, hz, hs, reject, x_rej, HAS_Q, WITHOUT_REPLACEMENT
                    )
                    carry, first, last = pick_step(
                        w, offs, mask, ch * CH + start, end, carry, target, first, last, BLOCK
                    )
                tl.store(nxt_ptr + b, tl.where(first < NO_HIT, first, last))
                tl.store(st_ptr + b * 4, -1)
            tl.store(cnt_ptr + b, 0)
