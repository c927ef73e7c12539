"""The dense scoring's passes over a block of laws, compiled: what the token test reads from each
row in one pass that numpy would spread over a dozen (:func:`.transform.observe_dense`).

numpy reads a row once per statistic: its sum, its largest entry, the mass above the token, the
ties, the smaller ids' mass, the ``ids`` weights' product, the draft's products. Each pass costs
little, but together they were most of the audit's own work at large vocabularies, and at small
ones the calls themselves were. These loops read each row once for everything that needs only
the token, once more for what needs the row's sum first (the expected clipped surprisal, the
laws' mass per id), and the draft's rows in a pass of their own; numba compiles them on first use
and keeps them in its cache. The logarithm of a whole row stays numpy's (vectorised, about five
times faster than a compiled scalar loop); where a law's mass sits on few ids, the loop takes the
logarithm of those alone.

The loops are plain Python: :func:`kernels` returns them compiled, and they compute the same
numbers run as they are (tests/test_tokens.py runs both). Sums are vectorised (``reassoc``): they
add in another order than numpy's, the last bits differ, no more. Nothing here assumes a row is a
law: its sum and its count of negative entries are returned for the caller's check.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from specproof.properties.tokens.jit import compiled

#: an id of probability below this (``exp(-SURPRISAL_CLIP)``) adds the clip times its probability
#: to the expected clipped surprisal: no logarithm is needed for it
HEAD = math.exp(-12.0)

#: the columns of :func:`rows`'s output
SUM, NEGATIVE, RAW, ABOVE, TIES, SMALLER, WEIGHTED, IN_HEAD = range(8)
#: the columns of :func:`drafts`'s output
D_SUM, D_NEGATIVE, D_TOKEN, D_DOT = range(4)


def rows(B: np.ndarray, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
    """Per row ``j`` of ``B`` (token ``x[j]``): the sum, the count of negative entries, the token's
    entry ``r``, the mass of the entries above ``r``, the count of entries equal to ``r`` at
    smaller ids, the mass of the smaller ids, the product with ``w`` (where ``w`` is not empty)
    and the count of entries at or above :data:`HEAD`."""
    k, V = B.shape
    weighted = len(w) > 0
    for j in range(k):
        row = B[j]
        t = x[j]
        r = row[t]
        s = 0.0
        neg = 0.0
        above = 0.0
        head = 0.0
        for i in range(V):
            b = row[i]
            s += b
            neg += 1.0 if b < 0.0 else 0.0
            above += b if b > r else 0.0
            head += 1.0 if b >= HEAD else 0.0
        smaller = 0.0
        ties = 0.0
        for i in range(t):
            b = row[i]
            smaller += b
            ties += 1.0 if b == r else 0.0
        bw = 0.0
        if weighted:
            for i in range(V):
                bw += row[i] * w[i]
        out[j, SUM], out[j, NEGATIVE], out[j, RAW], out[j, ABOVE] = s, neg, r, above
        out[j, TIES], out[j, SMALLER], out[j, WEIGHTED], out[j, IN_HEAD] = ties, smaller, bw, head


def clipped(B: np.ndarray, L: np.ndarray, s: np.ndarray, floor: np.ndarray, out: np.ndarray) -> None:
    """Per row ``j`` (its sum ``s[j]``): ``sum_i B_ji max(log B_ji, floor_j)``, the logarithms read
    from ``L`` where it has the rows, else taken here for the entries at or above ``HEAD s[j]``
    alone, the rest of the mass adding ``floor_j`` times itself."""
    k, V = B.shape
    given = L.shape[0] == k
    for j in range(k):
        row = B[j]
        f = floor[j]
        acc = 0.0
        if given:
            lr = L[j]
            for i in range(V):
                acc += row[i] * (lr[i] if lr[i] > f else f)
        else:
            c = HEAD * s[j]
            mass = 0.0
            for i in range(V):
                b = row[i]
                if b >= c:  # rare: no sum runs through the loop's every step
                    acc += b * np.log(b)
                    mass += b
            acc += f * (s[j] - mass)
        out[j] = acc


def gathered(B: np.ndarray, scale: np.ndarray, mass: np.ndarray) -> None:
    """``mass += sum_j scale[j] B_j`` (the laws' mass per id, each row normalized)."""
    k, V = B.shape
    for j in range(k):
        row = B[j]
        c = scale[j]
        for i in range(V):
            mass[i] += row[i] * c


def drafts(B: np.ndarray, D: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """Per row ``j`` of the draft's laws ``D``: its sum, its count of negative entries, its entry
    at the token and its product with ``B``'s row."""
    k, V = B.shape
    for j in range(k):
        row = D[j]
        s = 0.0
        neg = 0.0
        dot = 0.0
        for i in range(V):
            d = row[i]
            s += d
            neg += 1.0 if d < 0.0 else 0.0
            dot += d * B[j, i]
        out[j, D_SUM], out[j, D_NEGATIVE], out[j, D_TOKEN], out[j, D_DOT] = s, neg, row[x[j]], dot


def kernels() -> Any:
    """The loops above compiled (:mod:`.jit`): sums vectorised (``reassoc``)."""
    return compiled(__name__, ("rows", "clipped", "gathered", "drafts"), fastmath={"reassoc"})


def warm() -> None:
    """Compile (or load from the cache) every loop once, on a tiny block: the first use's cost
    (numba's import and the loading, about a second; a compile on a cold cache, about two) paid
    here rather than inside whatever is timed next."""
    K = kernels()
    B = np.full((1, 2), 0.5)
    x = np.zeros(1, dtype=np.int64)
    K.rows(B, x, np.ones(2), np.empty((1, 8)))
    for L in (np.log(B), np.zeros((0, 0))):
        K.clipped(B, L, np.ones(1), np.full(1, -12.0), np.empty(1))
    K.gathered(B, np.ones(1), np.zeros(2))
    K.drafts(B, B, x, np.empty((1, 4)))
