"""Test martingales for the token test: testing by betting, valid at every stopping time.

A **bettor** holds a wealth that starts at 1 and, at each observation, is multiplied by a
factor whose expectation under the null, given the past, is at most 1, and which is never
negative: its wealth is then a nonnegative supermartingale, and by Ville's inequality the chance
that it *ever* reaches ``1/alpha`` under the null is at most ``alpha``. So an audit may look at
it after every chunk of samples, stop when it crosses, when the budget ends, or never, and its
false-alarm rate is still at most ``alpha`` (proofs_notes/token_audit.md, claim 3). A weighted
average of such wealths, weights summing to 1, is one too: the family of statistics is combined
into one wealth, tested at ``1/alpha``, and the statistic that moved it is named.

Three kinds:

* :class:`MeanBettor`, on a statistic ``g`` with conditional mean 0 under the null and
  ``|g| <= c``: the average over a grid of fixed bets ``lambda`` (``+-1/(2c) 2^-k``, k = 0..K-1)
  of ``prod (1 + lambda g_t)``; every factor is at least 1/2, each product a test martingale, and
  the mixture follows the best bet of the grid within a factor of 2K (``log(2K)`` nats, 3.3 for
  K = 14);
* :class:`BinBettor`, on a transform that is uniform under the null, binned into ``K`` equal
  cells: the likelihood ratio of the Krichevsky-Trofimov sequential estimator of the cell
  frequencies against the uniform law (``prod K p_t(b_t)``, ``p_t`` the add-1/2 estimate from the
  cells seen before ``t``): a test martingale that grows against any deviation of the cell law.

* :class:`FactorBettor`, on factors a statistic computed itself, each nonnegative with
  conditional mean 1 under the null (a likelihood ratio of a law it learned against the target's:
  :mod:`.tilt`): their product.

All take their observations in order, in arrays (a chunk at a time), and keep their wealth in
logarithms.
"""

from __future__ import annotations

import math

import numpy as np

from specproof.properties.tokens.scratch import scratch
from specproof.reference.errors import InternalError

#: bets of the mean bettor's grid: +-1/(2c) 2^-k for k < LEVELS
LEVELS = 14
#: cells of the bin bettor
BINS = 8


def _logmeanexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    return m + math.log(float(np.mean(np.exp(x - m))))


class MeanBettor:
    """The mixture of fixed bets on a zero-mean statistic bounded by ``bound`` (module docstring)."""

    def __init__(self, bound: float, levels: int = LEVELS) -> None:
        if not bound > 0:
            raise InternalError(f"bound: must be positive, got {bound}")
        half = (0.5 / bound) * 2.0 ** -np.arange(levels)
        self.bets = np.concatenate([half, -half])
        self.bound = bound
        self.log_wealths = np.zeros(len(self.bets))
        self.n = 0
        self.total = 0.0  # sum of the statistic (its mean says which way it drifts)

    def update(self, g: np.ndarray) -> None:
        g = np.asarray(g, dtype=np.float64)
        if not len(g):
            return
        if np.abs(g).max() > self.bound * (1 + 1e-9):
            raise InternalError(f"a statistic of {np.abs(g).max():.6g} outside its bound {self.bound}")
        factors = scratch("bets", (len(self.bets), len(g)))  # a fresh one a call: 5 times the cost
        np.multiply.outer(self.bets, g, out=factors)
        self.log_wealths += np.log1p(factors, out=factors).sum(axis=1)
        self.n += len(g)
        self.total += float(g.sum())

    @property
    def log_wealth(self) -> float:
        return _logmeanexp(self.log_wealths)

    @property
    def drift(self) -> float:
        """The statistic's mean so far (its sign: which way the emitted tokens lean)."""
        return self.total / self.n if self.n else 0.0


class BinBettor:
    """The sequential likelihood ratio of the bin frequencies of a uniform transform against the
    uniform law (module docstring)."""

    def __init__(self, bins: int = BINS) -> None:
        self.bins = bins
        self.counts = np.zeros(bins)
        self.log_wealth = 0.0
        self.n = 0

    def update(self, u: np.ndarray) -> None:
        u = np.asarray(u, dtype=np.float64)
        if not len(u):
            return
        b = np.minimum((u * self.bins).astype(np.int64), self.bins - 1)
        onehot = np.zeros((len(b), self.bins))
        onehot[np.arange(len(b)), b] = 1.0
        seen = self.counts[b] + (np.cumsum(onehot, axis=0) - onehot)[np.arange(len(b)), b]
        t = self.n + np.arange(len(b))
        predicted = (seen + 0.5) / (t + 0.5 * self.bins)
        self.log_wealth += float(np.log(self.bins * predicted).sum())
        self.counts += onehot.sum(axis=0)
        self.n += len(b)

    @property
    def drift(self) -> float:
        """The largest departure of a bin's share from 1/K so far (signed)."""
        if not self.n:
            return 0.0
        share = self.counts / self.n - 1.0 / self.bins
        return float(share[int(np.argmax(np.abs(share)))])


class FactorBettor:
    """The product of factors, given as logarithms, each of conditional mean 1 under the null
    (module docstring): its wealth is theirs."""

    def __init__(self) -> None:
        self.log_wealth = 0.0
        self.n = 0

    def update(self, log_factors: np.ndarray) -> None:
        logs = np.asarray(log_factors, dtype=np.float64)
        if not len(logs):
            return
        if np.isnan(logs).any():
            raise InternalError("a factor that is not a number")
        self.log_wealth += float(logs.sum())
        self.n += len(logs)

    @property
    def drift(self) -> float:
        """The mean log factor so far: positive where the learned tilt has been gaining."""
        return self.log_wealth / self.n if self.n else 0.0
