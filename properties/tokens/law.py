"""One position's next-token law as the token test reads it: dense, sparse, or censored.

A law may be known in full (every id's probability: a dense row, or the ids of a sparse support
and their masses), or only in part: a server that returns its top-n log-probabilities tells the n
likeliest ids and their probabilities, and of the rest only that they carry the remaining mass
(the **tail**). :class:`TokenLaw` holds what is known: the known ids in the test's order (by
probability, largest first, ties to the smaller id), their probabilities, and the tail's mass.

The token test never needs more: every statistic is a function of the emitted token's **cell**
in this partition (a known id, or the tail as one cell), whose law under a lossless engine is
exactly the partition's (proofs_notes/token_audit.md, claim 2). A token of probability 0 (not a
known id, and no tail to hold it) is impossible under the law: a hard witness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specproof.reference.errors import SpecproofInputError

#: the mass below which a tail is none (float rounding of a law that carries all its mass)
TAIL_FLOOR = 1e-9
#: a law whose known mass exceeds 1 by more than this is not a law
MASS_TOLERANCE = 1e-6


@dataclass(frozen=True)
class TokenLaw:
    """The known part of a next-token law (module docstring). ``ids`` and ``probs`` are in the
    test's order; ``tail`` is the mass of every other id (0 when the law is known in full)."""

    ids: np.ndarray  # int64, the known ids, likeliest first (ties to the smaller id)
    probs: np.ndarray  # float64, their probabilities (positive)
    tail: float
    vocab: int

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def dense(cls, row: Sequence[float] | np.ndarray) -> TokenLaw:
        """A law known in full, from its row of V probabilities (zeros dropped)."""
        p = np.asarray(row, dtype=np.float64)
        if p.ndim != 1 or not np.isfinite(p).all() or (p < 0).any():
            raise SpecproofInputError("law", "expected a row of non-negative finite probabilities")
        ids = np.flatnonzero(p > 0)
        return cls._ordered(ids, p[ids], 0.0, len(p))

    @classmethod
    def sparse(cls, support: Mapping[int, float], vocab: int) -> TokenLaw:
        """A law known in full from its support: id -> probability (every other id has 0)."""
        ids = np.fromiter((int(k) for k in support), dtype=np.int64, count=len(support))
        probs = np.fromiter((float(v) for v in support.values()), dtype=np.float64, count=len(support))
        keep = probs > 0
        return cls._ordered(ids[keep], probs[keep], 0.0, vocab)

    @classmethod
    def top(cls, known: Mapping[int, float], vocab: int) -> TokenLaw:
        """A censored law: the probabilities of the ids a server returned (its top n), the rest
        one tail cell of the mass they leave (none when they carry it all, within rounding)."""
        ids = np.fromiter((int(k) for k in known), dtype=np.int64, count=len(known))
        probs = np.fromiter((float(v) for v in known.values()), dtype=np.float64, count=len(known))
        keep = probs > 0
        ids, probs = ids[keep], probs[keep]
        tail = 1.0 - float(probs.sum())
        if tail < -MASS_TOLERANCE:
            raise SpecproofInputError("law", f"the known probabilities sum to {1 - tail:.9f} > 1")
        if len(ids) >= vocab or tail < TAIL_FLOOR:  # the known ids carry it all (within rounding)
            return cls._ordered(ids, probs / probs.sum(), 0.0, vocab)
        return cls._ordered(ids, probs, tail, vocab)

    @classmethod
    def _ordered(cls, ids: np.ndarray, probs: np.ndarray, tail: float, vocab: int) -> TokenLaw:
        if len(ids) and (ids.min() < 0 or ids.max() >= vocab):
            raise SpecproofInputError("law", f"an id outside [0, {vocab})")
        order = np.lexsort((ids, -probs))  # largest probability first, ties to the smaller id
        ids, probs = ids[order].astype(np.int64), probs[order].astype(np.float64)
        total = float(probs.sum()) + tail
        if abs(total - 1.0) > MASS_TOLERANCE:
            raise SpecproofInputError("law", f"the probabilities sum to {total:.9f}, not 1")
        return cls(ids, probs, tail, vocab)

    # -- reading --------------------------------------------------------------------------------

    @property
    def censored(self) -> bool:
        return self.tail > 0

    @property
    def cells(self) -> int:
        """Cells of the partition: the known ids, and the tail when there is one."""
        return len(self.ids) + (1 if self.censored else 0)

    @property
    def cell_probs(self) -> np.ndarray:
        """The partition's law, in the test's order (the tail last)."""
        return np.append(self.probs, self.tail) if self.censored else self.probs

    def probability_of(self, token: int) -> float:
        """The law's probability of ``token``: its own where it is a known id, 0 where the law is
        known in full and it is not, NaN where a tail hides it (the tail's share of it is not known)."""
        where = np.flatnonzero(self.ids == token)
        if len(where):
            return float(self.probs[where[0]])
        return float("nan") if self.censored else 0.0

    def cell(self, token: int) -> int:
        """The emitted token's cell: its index among the known ids, ``len(ids)`` for the tail,
        or -1 when the law gives it probability 0 (not known, and no tail)."""
        where = np.flatnonzero(self.ids == token)
        if len(where):
            return int(where[0])
        return len(self.ids) if self.censored else -1
