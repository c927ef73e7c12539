"""Each emitted token scored against the target's law at its own prefix: the randomized
probability integral transform and what the token test's statistics read beside it.

For a token ``x`` emitted where the law is ``p`` (its cells in the test's order: by probability,
largest first, ties to the smaller id; a censored law's tail one cell, last), with ``F(x)`` the mass
of the cells before ``x``'s and ``v`` an auxiliary uniform drawn from the audit's seed,

    U = F(x) + v * p(x).

Under a lossless engine ``U`` is uniform on [0, 1] and independent of every earlier token and
transform, at every position, whatever the law (proofs_notes/token_audit.md, claim 1). Beside it
each position gives: ``p_first`` (the likeliest cell's probability: ``U < p_first`` exactly when
the token is the likeliest), the clipped surprisal of the token's cell and its expectation under
the law, and, where the engine tells its draft law ``q``, ``q`` of the token's cell and its
expectation under ``p``.

Two paths give the same numbers (tests/test_tokens.py): :func:`observe` on :class:`TokenLaw` rows
(sparse or censored laws, any vocabulary), and :func:`observe_dense` on a dense ``[M, V]`` array of
laws (one pass per position, no sort: O(M V)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specproof.properties.tokens.law import TokenLaw
from specproof.properties.tokens.tilt import sparse_factors
from specproof.reference.errors import SpecproofInputError

#: surprisal is clipped at this many nats (a bounded statistic: its betting stays valid)
SURPRISAL_CLIP = 12.0


@dataclass
class Observations:
    """The token test's reading of one sample, one entry per emitted token (arrays of length M)."""

    u: np.ndarray  # the randomized transforms
    p_first: np.ndarray  # the likeliest cell's probability
    surprisal: np.ndarray  # min(-log p(cell), SURPRISAL_CLIP)
    expected_surprisal: np.ndarray  # its expectation under the cell law
    q: np.ndarray | None = None  # the draft's probability of the token's cell (None: not exposed)
    expected_q: np.ndarray | None = None  # its expectation under p
    #: the first position (0-based) whose token the law gives probability 0 (None: none)
    impossible: int | None = None
    #: each token's index in its speculative step, where the engine tells (None: not told)
    block: np.ndarray | None = None
    #: where the audit has an end of sequence: its probability at each position (NaN where a
    #: censored law hides it) and whether the token is it (None: no end of sequence)
    p_eos: np.ndarray | None = None
    eos_hit: np.ndarray | None = None
    #: the transform in the order of the ids (``F_id(x) + v p(x)``, ``F_id`` the mass of the smaller
    #: ids): uniform under the null too, it sees deviations tied to the ids' order (an inverse-CDF
    #: sampler fed a uniform it already used); NaN where a censored law hides the smaller ids' mass
    u_id: np.ndarray | None = None
    #: where the audit gave weights over the ids (:mod:`.tilt`): each token's log factor under
    #: them, the ids to count and the laws' mass per id (the last two dropped once learned)
    ids_log: np.ndarray | None = None
    ids_seen: np.ndarray | None = None
    ids_mass: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.u)


def seeded_uniforms(seed: int, case: int, sample: int, n: int) -> np.ndarray:
    """The auxiliary uniforms ``v`` of a sample's ``n`` tokens: a function of the audit's seed, the
    case and the sample's index alone (never of who drew it, or when)."""
    ss = np.random.SeedSequence([abs(int(seed)), int(case), int(sample), 0x70A1])
    return np.random.default_rng(ss).random(n)


def _clip(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.minimum(-np.log(p), SURPRISAL_CLIP)


def observe(
    laws: Sequence[TokenLaw],
    tokens: Sequence[int],
    v: np.ndarray,
    drafts: Sequence[np.ndarray] | None = None,
    eos: int | None = None,
    weights: np.ndarray | None = None,
) -> Observations:
    """The observations of one sample from its laws as :class:`TokenLaw` rows (module docstring);
    ``drafts``: the draft's dense law at each position, where the engine tells it; ``eos``: the
    audit's end of sequence, where it has one; ``weights``: the ``ids`` statistic's weights over
    the ids (:mod:`.tilt`), sized to the vocabulary."""
    m = len(tokens)
    out = Observations(np.zeros(m), np.zeros(m), np.zeros(m), np.zeros(m))
    if drafts is not None:
        out.q, out.expected_q = np.zeros(m), np.zeros(m)
    if eos is not None:
        out.p_eos, out.eos_hit = np.zeros(m), np.asarray(tokens, dtype=np.int64) == eos
    out.u_id = np.full(m, np.nan)
    for t, (law, x) in enumerate(zip(laws, tokens)):
        if out.p_eos is not None:
            out.p_eos[t] = law.probability_of(int(eos))  # type: ignore[arg-type]
        c = law.cell(int(x))
        if c < 0:
            out.impossible = t
            return _cut(out, t)
        cp = law.cell_probs
        before = float(cp[:c].sum())
        out.u[t] = before + v[t] * cp[c]
        if not law.censored:
            out.u_id[t] = float(law.probs[law.ids < int(x)].sum()) + v[t] * cp[c]
        out.p_first[t] = cp[0]
        out.surprisal[t] = _clip(cp[c : c + 1])[0]
        out.expected_surprisal[t] = float((cp * _clip(cp)).sum())
        if drafts is not None:
            q = np.asarray(drafts[t], dtype=np.float64)
            qc = q[law.ids]
            if law.censored:
                qc = np.append(qc, max(0.0, 1.0 - qc.sum()))
            out.q[t], out.expected_q[t] = qc[c], float((cp * qc).sum())  # type: ignore[index]
    if weights is not None:
        out.ids_log, out.ids_seen, out.ids_mass = sparse_factors(list(laws[:m]), list(tokens), weights)
    return out


#: bytes of laws scored at once by :func:`observe_dense`: a block of rows small enough to stay in
#: the processor's cache while every statistic is read from it
BLOCK_BYTES = 1 << 21
#: the vocabulary from which :func:`observe_dense` sums each row's prefix apart (below it, a mask)
PREFIX_LOOP = 2048


class RowNotALaw(SpecproofInputError):
    """A row of the laws given to :func:`observe_dense` that is not a law (within
    :data:`ROW_TOLERANCE`): ``row`` its index, ``which`` "laws" or "drafts", ``total`` its sum and
    ``least`` its smallest entry."""

    def __init__(self, which: str, row: int, total: float, least: float) -> None:
        super().__init__(which, f"row {row} is not a law (sum {total:.9g}, min {least:.3g})")
        self.which, self.row, self.total, self.least = which, row, total, least


#: how far a row's sum may lie from 1 (the engine contract's tolerance)
ROW_TOLERANCE = 1e-6


def _rows_checked(
    B: np.ndarray, which: str, first: int, values: np.ndarray | None = None, s: np.ndarray | None = None
) -> np.ndarray:
    """The row sums of a block (``s`` where the caller has them), each checked to be a law's: the
    sum within :data:`ROW_TOLERANCE` of 1 (a NaN or infinite entry makes it NaN or infinite), and
    no negative entry: read from ``values``, a per-row reduction that is NaN where an entry is
    negative or NaN (the expected surprisal), else from the rows' minima."""
    s = np.einsum("ij->i", B) if s is None else s
    ok = np.abs(s - 1.0) <= ROW_TOLERANCE
    ok &= ~np.isnan(values) if values is not None else B.min(axis=1) >= 0
    bad = np.flatnonzero(~ok)
    if len(bad):
        r = int(bad[0])
        raise RowNotALaw(which, first + r, float(s[r]), float(B[r].min()))
    return s


def observe_dense(
    laws: np.ndarray,
    tokens: Sequence[int],
    v: np.ndarray,
    drafts: np.ndarray | None = None,
    eos: int | None = None,
    weights: np.ndarray | None = None,
) -> Observations:
    """:func:`observe` for laws given as a dense ``[M, V]`` array (each row a law, checked here and
    normalized by its sum: :class:`RowNotALaw` names a row that is not one), read in blocks of
    rows of about :data:`BLOCK_BYTES` so that each block is read from the cache by every
    statistic: its sum (the check, with the expected surprisal, which is NaN where an entry is
    negative or NaN), the token's probability, the mass of the likelier ids, the largest
    probability, and the expected clipped surprisal.
    The laws' own dtype is kept until a block is read (float32 laws are not copied whole)."""
    P = np.asarray(laws)
    if P.dtype.kind != "f":
        P = P.astype(np.float64)
    x = np.asarray(tokens, dtype=np.int64)
    m, V = P.shape
    Q = None
    if drafts is not None:
        Q = np.asarray(drafts)
        if Q.dtype.kind != "f":
            Q = Q.astype(np.float64)
    out = Observations(np.zeros(m), np.zeros(m), np.zeros(m), np.zeros(m))
    if Q is not None:
        out.q, out.expected_q = np.zeros(m), np.zeros(m)
    if eos is not None:
        out.p_eos, out.eos_hit = np.zeros(m), x == eos
    out.u_id = np.zeros(m)
    if weights is not None:
        out.ids_log, out.ids_seen, out.ids_mass = np.zeros(m), x, np.zeros(V)
    rows = max(1, BLOCK_BYTES // (8 * max(1, V)))
    stop = _read_rows(P, Q, x, v, eos, out, rows, weights)
    if stop is not None:
        out.impossible = stop
        return _cut(out, stop)
    return out


def _read_rows(
    P: np.ndarray,
    Q: np.ndarray | None,
    x: np.ndarray,
    v: np.ndarray,
    eos: int | None,
    out: Observations,
    rows: int,
    weights: np.ndarray | None = None,
) -> int | None:
    """:func:`observe_dense`'s reading of the rows into ``out``, ``rows`` at a time, in order: the
    first position whose token has probability 0 (None: none), or :class:`RowNotALaw` for the
    first row before it that is not a law."""
    m, V = P.shape
    with np.errstate(divide="ignore", invalid="ignore"):  # zeros and rows that are not laws: read as such
        for a in range(0, m, rows):
            b = min(m, a + rows)
            B = P[a:b].astype(np.float64, copy=False)
            xb = x[a:b]
            r = np.arange(b - a)
            s = np.einsum("ij->i", B)
            head = Head.of(B, s)
            expected = _expected_clipped(B, s) if head is None else head.expected(s)
            _rows_checked(B, "laws", a, expected if head is None else None, s)
            raw = B[r, xb]
            zero = np.flatnonzero(raw <= 0)
            stop = b if not len(zero) else a + int(zero[0])
            if stop > a:
                k = stop - a
                B, xb, r, s, raw = B[:k], xb[:k], r[:k], s[:k], raw[:k]
                above = _likelier(B, s, raw, xb, None if head is None else head.first(k))
                px = raw / s
                sl = slice(a, stop)
                out.u[sl] = above / s + v[a:stop] * px
                if V >= PREFIX_LOOP:  # the smaller ids' mass: each row's own prefix summed
                    smaller = np.fromiter((B[j, : xb[j]].sum() for j in range(k)), np.float64, k)
                else:  # at small V one masked pass costs less than a call per row
                    smaller = np.einsum("ij,ij->i", B, np.arange(V) < xb[:, None])
                out.u_id[sl] = smaller / s + v[a:stop] * px  # type: ignore[index]
                out.p_first[sl] = B.max(axis=1) / s
                out.surprisal[sl] = np.minimum(-np.log(px), SURPRISAL_CLIP)  # px > 0 before the stop
                out.expected_surprisal[sl] = expected[:k]
                if out.p_eos is not None:
                    out.p_eos[sl] = B[:, eos] / s
                if weights is not None:  # the ids statistic (.tilt): the factor and the laws' mass
                    out.ids_log[sl] = np.log(weights[xb]) - np.log((B @ weights) / s)  # type: ignore[index]
                    inv = 1.0 / s  # one row (a large V) as a scaled add: a one-row product is slower
                    out.ids_mass += B[0] * inv[0] if len(B) == 1 else inv @ B
                if Q is not None:
                    D = Q[a:stop].astype(np.float64, copy=False)
                    sq = _rows_checked(D, "drafts", a)
                    out.q[sl] = D[r, xb] / sq  # type: ignore[index]
                    out.expected_q[sl] = _rowdot(B, D) / (s * sq)  # type: ignore[index]
            if stop < b:
                return stop
        return None


#: an id of probability below ``exp(-SURPRISAL_CLIP)`` adds ``SURPRISAL_CLIP`` times its probability
#: to the expected clipped surprisal: no logarithm is needed for it
HEAD = math.exp(-SURPRISAL_CLIP)
#: a block of laws is read through its head (:class:`Head`) when at most this share of its entries
#: lie in it; above it, dense passes over the whole rows cost less
HEAD_SHARE = 1 / 20


@dataclass
class Head:
    """The entries of a block of laws ``B`` (rows normalized by ``s``) whose probability is at least
    :data:`HEAD`: row ``rows[i]``, value ``vals[i]``, rows ascending. Where a law's mass sits on few
    ids (a language model's, at any vocabulary), every statistic but the sums and the smaller ids'
    mass is read from them alone: the expected clipped surprisal needs the logarithm of no other
    entry, and an id likelier than a token in the head is in the head."""

    rows: np.ndarray
    vals: np.ndarray
    least: np.ndarray  # each row's threshold, s * HEAD

    @staticmethod
    def of(B: np.ndarray, s: np.ndarray) -> Head | None:
        """The block's head, or None where more than :data:`HEAD_SHARE` of its entries are in it."""
        least = s * HEAD
        mask = B >= least[:, None]
        if np.count_nonzero(mask) > HEAD_SHARE * mask.size:
            return None
        at = np.flatnonzero(mask)  # a 2-d nonzero costs ten times as much
        return Head(at // B.shape[1], B.reshape(-1)[at], least)

    def first(self, k: int) -> Head:
        """The head of the block's first ``k`` rows."""
        keep = self.rows < k
        return Head(self.rows[keep], self.vals[keep], self.least[:k])

    def expected(self, s: np.ndarray) -> np.ndarray:
        """``sum_i p_i min(-log p_i, SURPRISAL_CLIP)`` per row: the head's ``-p log p`` and the
        clip times the rest of the mass."""
        k = len(self.least)
        p = self.vals / s[self.rows]
        inside = np.bincount(self.rows, weights=-p * np.log(p), minlength=k)  # p > 0 where s > 0
        mass = np.bincount(self.rows, weights=p, minlength=k)
        return inside + SURPRISAL_CLIP * np.maximum(0.0, 1.0 - mass)


def _likelier(B: np.ndarray, s: np.ndarray, raw: np.ndarray, x: np.ndarray, head: Head | None) -> np.ndarray:
    """Each row's mass of the ids before the token's in the test's order: the likelier ids, then
    the ids of equal probability smaller than the token's (``raw``: the token's entry, ``x`` its
    id). Through ``head`` where given: a row whose token lies outside it is read whole."""
    k = len(raw)
    ties: np.ndarray | None
    if head is not None:
        at = raw[head.rows]
        above = np.bincount(head.rows, weights=np.where(head.vals > at, head.vals, 0.0), minlength=k)
        ties = np.bincount(head.rows, weights=head.vals == at, minlength=k)
        for j in np.flatnonzero(raw < head.least):  # the token outside the head: its row read whole
            above[j] = B[j][B[j] > raw[j]].sum()
            ties[j] = np.count_nonzero(B[j] == raw[j])
    else:
        if B.shape[1] >= PREFIX_LOOP:  # a row at a time: a compress costs less than a masked product
            above = np.fromiter((B[j][B[j] > raw[j]].sum() for j in range(k)), np.float64, k)
        else:
            above = np.einsum("ij,ij->i", B, B > raw[:, None])
        equal = B == raw[:, None]
        ties = np.count_nonzero(equal, axis=1) if np.count_nonzero(equal) > k else None
    if ties is not None:  # a tie besides the token itself: the smaller ids of equal probability first
        for j in np.flatnonzero(ties > 1):
            above[j] += raw[j] * np.count_nonzero(B[j, : x[j]] == raw[j])
    return above


def _expected_clipped(B: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``sum_i p_i min(-log p_i, SURPRISAL_CLIP)`` for each row of ``B`` normalized by ``s``
    (``p = B / s``; an id of probability 0 contributes 0), as ``log s - sum_i p_i max(log B_i,
    log s - SURPRISAL_CLIP)``. A negative or NaN entry makes its row's value NaN (the caller's
    check of the rows reads it so)."""
    c = np.log(s)
    L = np.log(B)
    np.maximum(L, (c - SURPRISAL_CLIP)[:, None], out=L)
    return c - _rowdot(B, L) / s


def _rowdot(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Each row of ``A`` dotted with the same row of ``B``: numpy's vector dot where it has one
    (SIMD products with a pairwise sum, about 40 % less time than ``einsum`` at V = 32,768), else
    ``einsum``. Either sums in its own order: the last bits differ, no more."""
    return _VECDOT(A, B) if _VECDOT is not None else np.einsum("ij,ij->i", A, B)


_VECDOT = getattr(np, "vecdot", None)


def joined(parts: Sequence[Observations]) -> Observations:
    """Several samples' observations laid end to end (in order)."""

    def cat(name: str) -> np.ndarray | None:
        values = [getattr(p, name) for p in parts]
        return None if any(v is None for v in values) else np.concatenate(values)

    out = Observations(cat("u"), cat("p_first"), cat("surprisal"), cat("expected_surprisal"))  # type: ignore[arg-type]
    out.q, out.expected_q = cat("q"), cat("expected_q")
    out.p_eos, out.eos_hit = cat("p_eos"), cat("eos_hit")
    out.u_id = cat("u_id")
    out.ids_log = cat("ids_log")
    return out


def _cut(out: Observations, t: int) -> Observations:
    """The observations before position ``t`` (where the law gave the token probability 0)."""
    names: tuple[str, ...] = ("u", "p_first", "surprisal", "expected_surprisal", "q", "expected_q")
    names += ("p_eos", "eos_hit", "u_id", "ids_log", "ids_seen")
    for name in names:
        value = getattr(out, name)
        if value is not None:
            setattr(out, name, value[:t])
    return out
