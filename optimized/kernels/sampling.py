"""Device functions shared by the kernels: running sums and inverse-CDF sampling on one row.

The reference sums left to right (``sum`` over a Python sequence). Here each block's running
sums are ``cumsum`` of the block with the carry added to its first element, which is the same
left-to-right order whenever ``tl.cumsum`` scans sequentially (it does under the interpreter);
a parallel scan on a GPU may round partial sums differently, which moves a sampled token only
when ``u * total`` falls within rounding of a partial sum.

The weights of a row (``row_weights``, ``inverse_cdf``) are chosen by the constexpr
``WEIGHTS``, one of the module's named modes:

* ``W_P``: ``p`` itself (a bonus draw, or a residual's fallback when ``(p - q)+`` has no mass);
* ``W_RESIDUAL``: ``(a p - q)+ / total1`` with q a given law (token-level: a = 1; block:
  a = p_tau);
* ``W_RESIDUAL_ONEHOT``: the same with q one-hot at ``x_det`` (a deterministic draft);
* ``W_WITHOUT``: ``p`` with the ids in ``drop`` (a vector; entries < 0 ignored) set to 0, not
  renormalized (the reference's ``laws.without``: the target-only rule's "no child accepted" law);
* ``W_TRUNCATED``: ``p`` where ``p >= a``, else 0, not renormalized (typical acceptance's
  truncated law).

Each is a module-level ``tl.constexpr`` (the only globals a jit function may read), so the
kernels compile one specialization per mode, as with the integers they replace.
"""

from __future__ import annotations

import triton
import triton.language as tl

W_P = tl.constexpr(0)
W_RESIDUAL = tl.constexpr(1)
W_RESIDUAL_ONEHOT = tl.constexpr(2)
W_WITHOUT = tl.constexpr(3)
W_TRUNCATED = tl.constexpr(4)


@triton.jit
def running_sums(
    w,  # [BLOCK] float64: the block's weights
    carry,  # float64: the sum of the row's earlier blocks
    offs,  # [BLOCK] int: the block's ids
    start,  # the block's first id
):
    """Left-to-right partial sums of the block ``w`` continuing from ``carry``."""
    return tl.cumsum(tl.where(offs == start, w + carry, w), 0)


@triton.jit
def last_of(
    sums,  # [BLOCK] float64: the block's running sums
    offs,  # [BLOCK] int: the block's ids
    start,  # the block's first id
    V,  # the row's length (the block may run past it)
    BLOCK: tl.constexpr,
):
    """The block's last running sum (the carry into the next block); exact for any sign, since
    the other terms of the sum are zeros."""
    return tl.sum(tl.where(offs == tl.minimum(V, start + BLOCK) - 1, sums, 0.0), 0)


@triton.jit
def row_weights(
    p_row,  # [V] float: the target row
    q_row,  # [V] float: the draft row (read by W_RESIDUAL only)
    x_det,  # the deterministic draft, where W_RESIDUAL_ONEHOT's q is one-hot
    offs,  # [BLOCK] int: the block's ids
    mask,  # [BLOCK] bool: offs < V
    WEIGHTS: tl.constexpr,  # one of the W_* modes
    total1,  # float64: the residual's mass (W_RESIDUAL*: the weights are divided by it)
    a,  # float64: p's factor in a residual (1; block's p_tau), or W_TRUNCATED's threshold
    drop,  # [NB] int64: the ids W_WITHOUT sets to 0 (entries < 0 ignored)
):
    p = tl.load(p_row + offs, mask=mask, other=0.0).to(tl.float64)
    if WEIGHTS == W_P:
        return p
    if WEIGHTS == W_TRUNCATED:
        return tl.where(p >= a, p, 0.0)
    if WEIGHTS == W_WITHOUT:
        hit = tl.sum(tl.where(offs[:, None] == drop[None, :], 1, 0), 1) > 0
        return tl.where(hit, 0.0, p)
    if WEIGHTS == W_RESIDUAL:
        q = tl.load(q_row + offs, mask=mask, other=0.0).to(tl.float64)
    else:  # W_RESIDUAL_ONEHOT
        q = tl.where(offs == x_det, 1.0, 0.0).to(tl.float64)
    w = tl.maximum(a * p - q, 0.0)
    return w / total1


@triton.jit
def residual_terms(
    p_row,  # [V] float: the target row
    q_row,  # [V] float: the draft row (read with HAS_Q only)
    x_det,  # the deterministic draft (q one-hot there without HAS_Q)
    a,  # float64: p's factor (1; block's p_i)
    offs,  # [BLOCK] int: the block's ids
    mask,  # [BLOCK] bool: offs < V
    HAS_Q: tl.constexpr,
):
    """``(a p - q)+`` on one block (q one-hot at x_det without HAS_Q), 0 outside ``mask``."""
    p = tl.load(p_row + offs, mask=mask, other=0.0).to(tl.float64)
    if HAS_Q:
        q = tl.load(q_row + offs, mask=mask, other=0.0).to(tl.float64)
    else:
        q = tl.where(offs == x_det, 1.0, 0.0).to(tl.float64)
    return tl.where(mask, tl.maximum(a * p - q, 0.0), 0.0)


@triton.jit
def residual_mass(
    p_row,  # [V] float: the target row
    q_row,  # [V] float: the draft row (read with HAS_Q only)
    x_det,  # the deterministic draft (q one-hot there without HAS_Q)
    a,  # float64: p's factor (1; block's p_i)
    V,
    HAS_Q: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """``sum((a p - q)+)`` over the row, left to right (q one-hot at x_det without HAS_Q)."""
    carry = tl.zeros((), dtype=tl.float64)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        w = residual_terms(p_row, q_row, x_det, a, offs, offs < V, HAS_Q)
        carry = last_of(running_sums(w, carry, offs, start), offs, start, V, BLOCK)
    return carry


@triton.jit
def inverse_cdf(
    p_row,  # [V] float: the target row
    q_row,  # [V] float: the draft row (read by W_RESIDUAL only)
    x_det,  # the deterministic draft (W_RESIDUAL_ONEHOT)
    total1,  # float64: the residual's mass (W_RESIDUAL*)
    u,  # float64: the draw's uniform
    V,
    WEIGHTS: tl.constexpr,  # one of the W_* modes
    BLOCK: tl.constexpr,
    a=1.0,  # p's factor in a residual, or W_TRUNCATED's threshold
    drop=None,  # [NB] int64: the ids W_WITHOUT sets to 0 (entries < 0 ignored)
):
    """The reference's ``categorical_from_uniform(u, weights)`` on the row's weights: the
    smallest i with ``u * sum(weights) < cumsum[i]`` (and weights[i] > 0), else the last
    positive index."""
    carry = tl.zeros((), dtype=tl.float64)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        w = tl.where(mask, row_weights(p_row, q_row, x_det, offs, mask, WEIGHTS, total1, a, drop), 0.0)
        carry = last_of(running_sums(w, carry, offs, start), offs, start, V, BLOCK)
    target = u * carry
    carry = tl.zeros((), dtype=tl.float64)
    first = V
    last = -1
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        w = tl.where(mask, row_weights(p_row, q_row, x_det, offs, mask, WEIGHTS, total1, a, drop), 0.0)
        sums = running_sums(w, carry, offs, start)
        carry = last_of(sums, offs, start, V, BLOCK)
        hit = mask & (w > 0) & (target < sums)
        first = tl.minimum(first, tl.min(tl.where(hit, offs, V), 0))
        last = tl.maximum(last, tl.max(tl.where(mask & (w > 0), offs, -1), 0))
    return tl.where(first < V, first, last)


@triton.jit
def argmax_row(
    p_row,  # [V] float: the target row
    V,
    BLOCK: tl.constexpr,
):
    """The most likely id of the row; ties go to the smallest id (the reference's argmax)."""
    best_v = tl.full((), -1.0, tl.float64)
    best_i = tl.zeros((), dtype=tl.int64)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        p = tl.load(p_row + offs, mask=mask, other=-1.0).to(tl.float64)
        m = tl.max(p, 0)
        i = tl.min(tl.where(p == m, offs, V), 0).to(tl.int64)
        better = m > best_v
        best_i = tl.where(better, i, best_i)
        best_v = tl.where(better, m, best_v)
    return best_i


@triton.jit
def gather_drafts(
    x_ptr,  # [B, K] int64: the drafts
    q_ptr,  # [B, K, V] float: the draft laws (read with HAS_Q only)
    p_ptr,  # [B, K+1, V] float: the target laws
    b,  # the batch row
    K,  # drafts per row
    V,
    HAS_Q: tl.constexpr,  # sampled drafts with laws q (else deterministic: q one-hot)
    KB: tl.constexpr,  # a power of two >= K
):
    """Row b's K drafts and their gathered ``p_i(x_i)``, ``q_i(x_i)`` (q = 1 for deterministic
    drafts): the only reads the acceptance tests need. Returns (positions, x, p(x), q(x))."""
    ks = tl.arange(0, KB)
    kmask = ks < K
    x = tl.load(x_ptr + b * K + ks, mask=kmask, other=0).to(tl.int64)
    px = tl.load(p_ptr + (b * (K + 1) + ks) * V + x, mask=kmask, other=0.0).to(tl.float64)
    if HAS_Q:
        qx = tl.load(q_ptr + (b * K + ks) * V + x, mask=kmask, other=1.0).to(tl.float64)
    else:
        qx = tl.full((KB,), 1.0, tl.float64)
    return ks, x, px, qx


@triton.jit
def acceptance(px, qx):
    """``min(1, p(x) / q(x))`` with ``q(x) = 0`` read as 1 if ``p(x) > 0`` else 0 (the
    reference's ``laws.acceptance``); elementwise, for scalars or blocks."""
    return tl.where(qx == 0, tl.where(px > 0, 1.0, 0.0), tl.minimum(px / tl.where(qx == 0, 1.0, qx), 1.0))


@triton.jit
def first_rejection(
    ua_ptr,  # [B, K+1] float64: the acceptance coins' uniforms (column 0 unused)
    b,  # the batch row
    K,  # drafts per row
    ks,  # [KB] int: the chain positions 0..KB-1
    acc,  # [KB] float64: acc[i] = P(accept draft i)
):
    """The first chain position whose coin ``u_accept[b, i + 1] < acc[i]`` fails (K if none)."""
    u = tl.load(ua_ptr + b * (K + 1) + 1 + ks, mask=ks < K, other=1.0).to(tl.float64)
    return tl.min(tl.where((ks < K) & ~(u < acc), ks, K), 0)
