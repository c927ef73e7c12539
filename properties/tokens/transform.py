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

from specproof.properties.tokens.law import TokenLaw

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
) -> Observations:
    """The observations of one sample from its laws as :class:`TokenLaw` rows (module docstring);
    ``drafts``: the draft's dense law at each position, where the engine tells it."""
    m = len(tokens)
    out = Observations(np.zeros(m), np.zeros(m), np.zeros(m), np.zeros(m))
    if drafts is not None:
        out.q, out.expected_q = np.zeros(m), np.zeros(m)
    for t, (law, x) in enumerate(zip(laws, tokens)):
        c = law.cell(int(x))
        if c < 0:
            out.impossible = t
            return _cut(out, t)
        cp = law.cell_probs
        before = float(cp[:c].sum())
        out.u[t] = before + v[t] * cp[c]
        out.p_first[t] = cp[0]
        out.surprisal[t] = _clip(cp[c : c + 1])[0]
        out.expected_surprisal[t] = float((cp * _clip(cp)).sum())
        if drafts is not None:
            q = np.asarray(drafts[t], dtype=np.float64)
            qc = q[law.ids]
            if law.censored:
                qc = np.append(qc, max(0.0, 1.0 - qc.sum()))
            out.q[t], out.expected_q[t] = qc[c], float((cp * qc).sum())  # type: ignore[index]
    return out


def observe_dense(
    laws: np.ndarray, tokens: Sequence[int], v: np.ndarray, drafts: np.ndarray | None = None
) -> Observations:
    """:func:`observe` for laws given as a dense ``[M, V]`` array (each row a law), vectorized."""
    P = np.asarray(laws, dtype=np.float64)
    x = np.asarray(tokens, dtype=np.int64)
    m, V = P.shape
    rows = np.arange(m)
    px = P[rows, x]
    zero = np.flatnonzero(px <= 0)
    ids = np.arange(V)[None, :]
    higher = (P > px[:, None]) | ((P == px[:, None]) & (ids < x[:, None]))
    before = np.where(higher, P, 0.0).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        clipped = np.where(P > 0, np.minimum(-np.log(np.where(P > 0, P, 1.0)), SURPRISAL_CLIP), 0.0)
    out = Observations(
        u=before + v[:m] * px,
        p_first=P.max(axis=1),
        surprisal=_clip(np.where(px > 0, px, 1e-300)),
        expected_surprisal=(P * clipped).sum(axis=1),
    )
    if drafts is not None:
        Q = np.asarray(drafts, dtype=np.float64)
        out.q, out.expected_q = Q[rows, x], (P * Q).sum(axis=1)
    if len(zero):
        out.impossible = int(zero[0])
        return _cut(out, out.impossible)
    return out


def joined(parts: Sequence[Observations]) -> Observations:
    """Several samples' observations laid end to end (in order)."""

    def cat(name: str) -> np.ndarray | None:
        values = [getattr(p, name) for p in parts]
        return None if any(v is None for v in values) else np.concatenate(values)

    out = Observations(cat("u"), cat("p_first"), cat("surprisal"), cat("expected_surprisal"))  # type: ignore[arg-type]
    out.q, out.expected_q = cat("q"), cat("expected_q")
    return out


def _cut(out: Observations, t: int) -> Observations:
    """The observations before position ``t`` (where the law gave the token probability 0)."""
    for name in ("u", "p_first", "surprisal", "expected_surprisal", "q", "expected_q"):
        value = getattr(out, name)
        if value is not None:
            setattr(out, name, value[:t])
    return out
