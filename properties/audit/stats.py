"""The statistics of the audit: tests, the sample-size planner, Holm, and a TV interval.

Every function states its assumptions; proofs_notes/audit_statistics.md has the arguments.

* **Pearson's chi-square** on a partition of the completed-sequence space (expected count at
  least 10 per cell by construction of :mod:`.partition`), df = cells - 1.
* **An exact cell test**: a two-sided exact binomial test per cell, Bonferroni over the cells.
  Valid at any sample size; strong against a deviation concentrated in one cell.
* A case's p-value combines the two with Bonferroni: ``min(1, 2 min(p_chi2, p_cells))``.
* **Planner**: for any law Q on the cells with ``TV(Q, P) >= eps``, the chi-square
  noncentrality ``n * sum (q - p)^2 / p`` is at least ``4 n eps^2`` (Cauchy-Schwarz), and the
  power of the test grows with it. :func:`plan_samples` is the smallest ``n`` whose power at
  noncentrality ``4 n eps^2`` reaches the goal (noncentral chi-square approximation).
* **Holm's step-down** procedure controls the family-wise error rate over the cases.
* **TV interval**: distribution-free, from McDiarmid's inequality (no normal approximation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as st

from specproof.properties.plan import check_probability
from specproof.reference.errors import UsageError


def power_at(n: int, eps: float, alpha: float, df: int) -> float:
    """Power of the level-``alpha`` chi-square test with ``df`` degrees of freedom against every
    law at TV distance ``eps`` or more (the least favourable noncentrality ``4 n eps^2``)."""
    if df < 1 or n < 1 or eps <= 0:
        return 0.0
    crit = st.chi2.isf(alpha, df)
    return float(st.ncx2.sf(crit, df, 4.0 * n * eps * eps))


def plan_samples(eps: float, alpha: float, power: float, df: int, cap: int = 10**9) -> int:
    """The smallest n with ``power_at(n, eps, alpha, df) >= power`` (at most ``cap``)."""
    check_probability(eps, "tv")
    check_probability(alpha, "alpha")
    check_probability(power, "power")
    if df < 1:
        raise UsageError(f"df: a test needs at least 2 cells, got df={df}")
    lo, hi = 1, 1
    while power_at(hi, eps, alpha, df) < power:
        hi *= 2
        if hi >= cap:
            return cap
    while lo < hi:
        mid = (lo + hi) // 2
        if power_at(mid, eps, alpha, df) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo


def detectable_tv(n: int, alpha: float, power: float, df: int) -> float:
    """The smallest TV that the test detects with the given power at ``n`` samples."""
    if df < 1 or n < 1:
        return 1.0
    lo, hi = 0.0, 1.0
    if power_at(n, hi, alpha, df) < power:
        return 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if power_at(n, mid, alpha, df) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def pearson(counts: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """Pearson's statistic and its chi-square p-value (df = cells - 1)."""
    n = counts.sum()
    if len(probs) < 2 or n == 0:
        return 0.0, 1.0
    expected = n * probs
    stat = float(((counts - expected) ** 2 / expected).sum())
    return stat, float(st.chi2.sf(stat, len(probs) - 1))


def exact_cells(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Bonferroni-combined two-sided exact binomial tests, one per cell: (p-value, worst cell)."""
    n = int(counts.sum())
    if len(probs) < 2 or n == 0:
        return 1.0, 0
    lower = st.binom.cdf(counts, n, probs)
    upper = st.binom.sf(counts - 1, n, probs)
    per_cell = np.minimum(1.0, 2.0 * np.minimum(lower, upper))
    worst = int(np.argmin(per_cell))
    return float(min(1.0, len(probs) * per_cell[worst])), worst


def holm(pvalues: list[float], alpha: float) -> list[bool]:
    """Holm's step-down procedure: which hypotheses are rejected at family-wise level alpha."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    reject = [False] * len(pvalues)
    m = len(pvalues)
    for rank, i in enumerate(order):
        if pvalues[i] <= alpha / (m - rank):
            reject[i] = True
        else:
            break
    return reject


@dataclass(frozen=True)
class TVInterval:
    estimate: float
    low: float
    high: float
    confidence: float

    def to_json(self) -> dict[str, float]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "confidence": self.confidence}


def tv_interval(counts: np.ndarray, probs: np.ndarray, confidence: float = 0.95) -> TVInterval:
    """TV between the sampled law and ``probs`` on the cells, with a distribution-free interval.

    With ``T = TV(empirical, P)`` and Q the true law: ``|TV(Q, P) - T| <= TV(empirical, Q)``,
    ``E TV(empirical, Q) <= sqrt(k / n) / 2`` and McDiarmid bounds its upper deviation by
    ``sqrt(log(1 / gamma) / (2 n))``; so ``TV(Q, P)`` lies within ``T -/+ (sqrt(k/n)/2 +
    sqrt(log(1/gamma)/(2n)))`` with probability at least ``1 - gamma``.
    """
    n = float(counts.sum())
    if n == 0:
        return TVInterval(float("nan"), 0.0, 1.0, confidence)
    t = 0.5 * float(np.abs(counts / n - probs).sum())
    gamma = 1.0 - confidence
    half = 0.5 * math.sqrt(len(probs) / n) + math.sqrt(math.log(1.0 / gamma) / (2.0 * n))
    return TVInterval(t, max(0.0, t - half), min(1.0, t + half), confidence)


def plugin_floor(probs: np.ndarray, n: int) -> float:
    """The plug-in TV an exact sampler shows on these cells at ``n`` samples, in expectation:
    ``E|p_hat - p| ~ sqrt(2 p (1 - p) / (pi n))`` per cell (the normal approximation of the
    binomial's mean absolute deviation), halved and summed. A plug-in TV near it is noise; one
    well above it is the deviation's size."""
    p = np.clip(np.asarray(probs, dtype=float), 0.0, 1.0)
    return 0.5 * float(np.sqrt(2.0 * p * (1.0 - p) / (math.pi * max(1, n))).sum())


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval of a binomial rate: ``k`` of ``n``."""
    a = 1 - level
    lo = 0.0 if k == 0 else float(st.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(st.beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi
