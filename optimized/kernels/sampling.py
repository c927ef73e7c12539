"""Device functions shared by the kernels: running sums and inverse-CDF sampling on one row.

The reference sums left to right (``sum`` over a Python sequence). Here each block's running
sums are ``cumsum`` of the block with the carry added to its first element, which is the same
left-to-right order whenever ``tl.cumsum`` scans sequentially (it does under the interpreter);
a parallel scan on a GPU may round partial sums differently, which moves a sampled token only
when ``u * total`` falls within rounding of a partial sum.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def running_sums(w, carry, offs, start):
    """Left-to-right partial sums of the block ``w`` continuing from ``carry``."""
    return tl.cumsum(tl.where(offs == start, w + carry, w), 0)


@triton.jit
def row_weights(p_row, q_row, x_det, offs, mask, MODE: tl.constexpr, total1):
    """The weights the final draw uses on one block.

    MODE 0: ``p`` itself (the bonus draw, or the residual's fallback when ``(p - q)+`` has no
    mass); MODE 1: ``(p - q)+ / total1`` with q a given law; MODE 2: the same with q one-hot at
    ``x_det`` (a deterministic draft).
    """
    p = tl.load(p_row + offs, mask=mask, other=0.0).to(tl.float64)
    if MODE == 0:
        return p
    if MODE == 1:
        q = tl.load(q_row + offs, mask=mask, other=0.0).to(tl.float64)
    else:
        q = tl.where(offs == x_det, 1.0, 0.0).to(tl.float64)
    w = tl.maximum(p - q, 0.0)
    return w / total1


@triton.jit
def residual_mass(p_row, q_row, x_det, V, HAS_Q: tl.constexpr, BLOCK: tl.constexpr):
    """``sum((p - q)+)`` over the row, left to right."""
    carry = tl.zeros((), dtype=tl.float64)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        p = tl.load(p_row + offs, mask=mask, other=0.0).to(tl.float64)
        if HAS_Q:
            q = tl.load(q_row + offs, mask=mask, other=0.0).to(tl.float64)
        else:
            q = tl.where(offs == x_det, 1.0, 0.0).to(tl.float64)
        w = tl.where(mask, tl.maximum(p - q, 0.0), 0.0)
        sums = running_sums(w, carry, offs, start)
        carry = tl.max(tl.where(offs == tl.minimum(V, start + BLOCK) - 1, sums, -1.0), 0)
    return carry


@triton.jit
def inverse_cdf(p_row, q_row, x_det, total1, u, V, MODE: tl.constexpr, BLOCK: tl.constexpr):
    """The reference's ``categorical_from_uniform(u, weights)`` on the row's weights: the
    smallest i with ``u * sum(weights) < cumsum[i]`` (and weights[i] > 0), else the last
    positive index."""
    carry = tl.zeros((), dtype=tl.float64)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        w = tl.where(mask, row_weights(p_row, q_row, x_det, offs, mask, MODE, total1), 0.0)
        sums = running_sums(w, carry, offs, start)
        carry = tl.max(tl.where(offs == tl.minimum(V, start + BLOCK) - 1, sums, -1.0), 0)
    target = u * carry
    carry = tl.zeros((), dtype=tl.float64)
    first = V
    last = -1
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        w = tl.where(mask, row_weights(p_row, q_row, x_det, offs, mask, MODE, total1), 0.0)
        sums = running_sums(w, carry, offs, start)
        carry = tl.max(tl.where(offs == tl.minimum(V, start + BLOCK) - 1, sums, -1.0), 0)
        hit = mask & (w > 0) & (target < sums)
        first = tl.minimum(first, tl.min(tl.where(hit, offs, V), 0))
        last = tl.maximum(last, tl.max(tl.where(mask & (w > 0), offs, -1), 0))
    return tl.where(first < V, first, last)
