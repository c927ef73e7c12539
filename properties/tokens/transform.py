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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specproof.properties.tokens import scan
from specproof.properties.tokens.law import TokenLaw
from specproof.properties.tokens.scratch import scratch
from specproof.properties.tokens.streams import uniforms
from specproof.properties.tokens.tilt import sparse_factors
from specproof.reference.errors import ShapeError, SpecproofInputError

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
    return uniforms([abs(int(seed)), int(case), int(sample), 0x70A1], n)  # numpy's default_rng(key).random(n)


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


class RowNotALaw(SpecproofInputError):
    """A row of the laws given to :func:`observe_dense` that is not a law (within
    :data:`ROW_TOLERANCE`): ``row`` its index, ``which`` "laws" or "drafts", ``total`` its sum and
    ``least`` its smallest entry."""

    def __init__(self, which: str, row: int, total: float, least: float) -> None:
        super().__init__(which, f"row {row} is not a law (sum {total:.9g}, min {least:.3g})")
        self.which, self.row, self.total, self.least = which, row, total, least


#: how far a row's sum may lie from 1 (the engine contract's tolerance)
ROW_TOLERANCE = 1e-6


def _check_rows(B: np.ndarray, which: str, first: int, s: np.ndarray, negative: np.ndarray) -> None:
    """Each row a law's: its sum ``s`` within :data:`ROW_TOLERANCE` of 1 (a NaN or infinite entry
    makes it NaN or infinite) and no negative entry (``negative`` counts them)."""
    bad = np.flatnonzero(~((np.abs(s - 1.0) <= ROW_TOLERANCE) & (negative == 0)))
    if len(bad):
        r = int(bad[0])
        raise RowNotALaw(which, first + r, float(s[r]), float(B[r].min()))


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
    rows of about :data:`BLOCK_BYTES`, each row read once for every statistic by the compiled
    passes of :mod:`.scan`. The rows are read up to the first whose token has probability 0 (the
    sample's end: :attr:`Observations.impossible`); that row is checked, the rows after it are not
    read. The laws' own dtype is kept until a block is read (float32 laws are not copied whole)."""
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
    _check_shapes(P, x, v, Q, eos, weights)
    out = Observations(np.zeros(m), np.zeros(m), np.zeros(m), np.zeros(m))
    if Q is not None:
        out.q, out.expected_q = np.zeros(m), np.zeros(m)
    if eos is not None:
        out.p_eos, out.eos_hit = np.zeros(m), x == eos
    out.u_id = np.zeros(m)
    if weights is not None:
        out.ids_log, out.ids_seen, out.ids_mass = np.zeros(m), x, np.zeros(V)
    rows = max(1, BLOCK_BYTES // (8 * max(1, V)))
    for a in range(0, m, rows):
        stop = _read_block(P, Q, x, v, eos, out, a, min(m, a + rows), weights)
        if stop is not None:
            out.impossible = stop
            return _cut(out, stop)
    return out


def _check_shapes(
    P: np.ndarray, x: np.ndarray, v: np.ndarray, Q: np.ndarray | None, eos: int | None, w: np.ndarray | None
) -> None:
    """What :func:`observe_dense`'s passes index, checked first (they read without bounds)."""
    if P.ndim != 2:
        raise ShapeError("laws", f"must be [M, V], got shape {P.shape}")
    m, V = P.shape
    if x.shape != (m,):
        raise ShapeError("tokens", f"must be one token per law ({m}), got shape {x.shape}")
    if m and (x.min() < 0 or x.max() >= V):
        raise SpecproofInputError("tokens", f"must be ids in [0, {V}), got {x.min()} to {x.max()}")
    if len(v) < m:
        raise ShapeError("v", f"must have a uniform per token ({m}), got {len(v)}")
    if Q is not None and Q.shape != P.shape:
        raise ShapeError("drafts", f"must be shaped as the laws {P.shape}, got {Q.shape}")
    if eos is not None and not 0 <= eos < V:
        raise SpecproofInputError("eos", f"must be an id in [0, {V}), got {eos}")
    if w is not None and len(w) < V:
        raise ShapeError("weights", f"must have a weight per id ({V}), got {len(w)}")


#: a block of laws has the logarithms of its entries above :data:`.scan.HEAD` taken one by one when
#: at most this share of its entries lie there (a language model's peaked laws); above it, numpy
#: takes the logarithm of the whole block at once, faster
HEAD_SHARE = 1 / 20


def _block(A: np.ndarray, a: int, b: int, name: str) -> np.ndarray:
    """Rows ``a`` to ``b`` of ``A`` as C-contiguous float64: a view where they are, else copied
    into the scratch kept for ``name``."""
    rows = A[a:b]
    if rows.dtype == np.float64 and rows.flags.c_contiguous:
        return rows
    out = scratch(name, rows.shape)
    np.copyto(out, rows)
    return out


def _read_block(
    P: np.ndarray,
    Q: np.ndarray | None,
    x: np.ndarray,
    v: np.ndarray,
    eos: int | None,
    out: Observations,
    a: int,
    b: int,
    weights: np.ndarray | None,
) -> int | None:
    """:func:`observe_dense`'s reading of rows ``a`` to ``b`` into ``out``: the first position
    whose token has probability 0 (None: none), or :class:`RowNotALaw` for the first row up to
    it that is not a law."""
    K = scan.kernels()
    B, xb = _block(P, a, b, "laws"), x[a:b]
    st = np.empty((b - a, 8))
    K.rows(B, xb, weights if weights is not None else _NO_WEIGHTS, st)
    raw = st[:, scan.RAW]
    zero = np.flatnonzero(raw <= 0)
    k = len(raw) if not len(zero) else int(zero[0])
    seen = min(len(raw), k + 1)  # the row of the impossible token is checked too
    _check_rows(B, "laws", a, st[:seen, scan.SUM], st[:seen, scan.NEGATIVE])
    if k:
        B, xb, st, raw = B[:k], xb[:k], st[:k], raw[:k]
        s = st[:, scan.SUM]
        ls = np.log(s)
        floor = ls - SURPRISAL_CLIP
        logs = _NO_ROWS  # the logarithms taken in the pass, of the head alone
        if st[:, scan.IN_HEAD].sum() > HEAD_SHARE * B.size:
            with np.errstate(divide="ignore"):  # a zero's logarithm: the floor replaces it
                logs = np.log(B, out=scratch("logs", B.shape))
        acc = np.empty(k)
        K.clipped(B, logs, s, floor, acc)
        px = raw / s
        sl = slice(a, a + k)
        vk = v[sl]
        out.u[sl] = (st[:, scan.ABOVE] + raw * st[:, scan.TIES]) / s + vk * px
        out.u_id[sl] = st[:, scan.SMALLER] / s + vk * px  # type: ignore[index]
        out.p_first[sl] = B.max(axis=1) / s
        out.surprisal[sl] = np.minimum(-np.log(px), SURPRISAL_CLIP)  # px > 0 before the stop
        out.expected_surprisal[sl] = ls - acc / s
        if out.p_eos is not None:
            out.p_eos[sl] = B[:, eos] / s
        if weights is not None:  # the ids statistic (.tilt): the factor and the laws' mass
            out.ids_log[sl] = np.log(weights[xb]) - np.log(st[:, scan.WEIGHTED] / s)  # type: ignore[index]
            K.gathered(B, 1.0 / s, out.ids_mass)
        if Q is not None:
            D = _block(Q, a, a + k, "drafts")
            dt = np.empty((k, 4))
            K.drafts(B, D, xb, dt)
            sq = dt[:, scan.D_SUM]
            _check_rows(D, "drafts", a, sq, dt[:, scan.D_NEGATIVE])
            out.q[sl] = dt[:, scan.D_TOKEN] / sq  # type: ignore[index]
            out.expected_q[sl] = dt[:, scan.D_DOT] / (s * sq)  # type: ignore[index]
    return a + k if a + k < b else None


#: what the passes are given for weights or logarithms they are not to read
_NO_WEIGHTS = np.zeros(0)
_NO_ROWS = np.zeros((0, 0))


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
