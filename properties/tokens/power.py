"""The token test's plan and its power, stated in tokens, beside the information limit.

A plan asks for a per-token deviation ``tv`` (total variation between the emitted token's law and
the target's, at each position), a family-wise ``alpha`` and a ``power``. Each directional
statistic has a **reference deviation** of that size, the one its plan is stated for:

* ``mean``: mass ``tv`` moved, evenly, from the less likely half of the law (transforms above
  1/2) to the likelier half: the transform's density ``1 + 2 tv`` below 1/2 and ``1 - 2 tv`` above,
  a drift of ``-tv/2`` in ``U - 1/2`` (sharpening; flattening is its mirror);
* ``greedy``: mass ``tv`` moved onto the likeliest token: a drift of ``tv`` in the indicator;
* ``uniform``: ``tv`` spread over the 8 cells of the transform, half of them up and half down
  (the hardest deviation of that size for a test of the cells);
* ``serial``: consecutive transforms of a sample correlated by ``rho`` (a drift of ``rho/3``).

:func:`tokens_needed` is the number of tokens after which the bettor of a statistic, at its
weight in the family and the audit's threshold, has crossed with probability ``power`` under its
reference deviation (the normal approximation of the best bet's log-wealth; the power is checked
by simulation: ``specproof calibrate --tokens``). :func:`information_limit` is the number of
tokens the most powerful test there is needs for the same deviation, alpha and power: a
likelihood-ratio test that knows the deviation exactly (Neyman-Pearson). The plan is the larger of
the ``mean`` and ``greedy`` numbers; docs/token-audit.md tabulates every ratio to the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from specproof.properties.tokens.eprocess import BINS, LEVELS
from specproof.properties.tokens.family import BLOCK_INDICES, LAGS
from specproof.properties.tokens.family import shares as family_shares
from specproof.reference.errors import InternalError

#: the statistics the plan is stated for
PLANNED = ("mean", "greedy")
#: with several cases, the share of the audit's wealth held by the family fed every case's tokens
#: (the pooled family); the rest is the average of the cases' own families
POOLED_SHARE = 0.5


@dataclass(frozen=True)
class Reference:
    """A statistic's reference deviation: its per-token drift and variance, and the bound of its
    bettor (or, for ``uniform``, the alternative cell law)."""

    drift: float
    variance: float
    bound: float
    cells: np.ndarray | None = None


def reference(statistic: str, tv: float) -> Reference:
    """The reference deviation of per-token size ``tv`` for ``statistic`` (module docstring; for
    ``serial``, ``tv`` is the correlation ``rho``)."""
    if statistic == "mean":
        return Reference(-tv / 2, 1 / 12 - (tv / 2) ** 2, 0.5)
    if statistic == "greedy":
        return Reference(tv, 0.25, 1.0)
    if statistic == "serial":
        return Reference(tv / 3, 1 / 9, 1.0)
    if statistic == "uniform":
        half = BINS // 2
        cells = np.array([1 + 2 * tv] * half + [1 - 2 * tv] * half) / BINS
        return Reference(0.0, 0.0, 1.0, cells)
    raise InternalError(f"no reference deviation for statistic {statistic!r}")


def _sqrt_n(growth: float, sd: float, need: float, z: float) -> float:
    """The smallest sqrt(N) with N growth - z sd sqrt(N) >= need (growth > 0)."""
    return (z * sd + math.sqrt(z * z * sd * sd + 4 * growth * need)) / (2 * growth)


def tokens_needed(statistic: str, tv: float, log_threshold: float, power: float = 0.99) -> int:
    """Tokens for ``statistic``'s bettor to reach ``exp(log_threshold)`` with probability
    ``power`` under its reference deviation of size ``tv`` (module docstring). ``log_threshold``
    is the bettor's own: the audit's ``log(1/alpha)`` plus ``log(1/weight)`` of its share."""
    z = float(norm.ppf(power))
    ref = reference(statistic, tv)
    if ref.cells is not None:  # the KT bettor: N KL - (K-1)/2 log N against the sd of the log ratio
        lr = np.log(BINS * ref.cells)
        kl = float((ref.cells * lr).sum())
        sd = math.sqrt(float((ref.cells * lr * lr).sum()) - kl * kl)
        n = 16.0
        while n * kl - 0.5 * (BINS - 1) * math.log(n) - z * sd * math.sqrt(n) < log_threshold:
            n *= 1.02
        return math.ceil(n)
    return _mean_bettor_tokens(ref, log_threshold, z)


def _mean_bettor_tokens(ref: Reference, log_threshold: float, z: float) -> int:
    """Tokens for a mean bettor (:class:`.eprocess.MeanBettor`) on a statistic of drift, variance
    and bound ``ref`` to reach ``exp(log_threshold)`` at the power whose normal quantile is ``z``."""
    bets = (0.5 / ref.bound) * 2.0 ** -np.arange(LEVELS)
    need = log_threshold + math.log(2 * LEVELS)  # the mixture averages 2 LEVELS bets
    best = math.inf
    for lam in bets:
        g = lam * abs(ref.drift) - lam * lam * (ref.variance + ref.drift**2) / 2  # E log(1 + lam g)
        if g > 0:
            best = min(best, _sqrt_n(g, lam * math.sqrt(ref.variance), need, z) ** 2)
    return math.ceil(best)


def eos_tokens(shift: float, p_eos: float, log_threshold: float, power: float = 0.99) -> int:
    """Tokens for the ``eos`` bettor to reach ``exp(log_threshold)`` with probability ``power``
    where every token's law moves ``shift`` of mass onto the end of sequence (off it where
    negative) from its probability ``p_eos``: its statistic ``[x = eos] - p_eos`` then has drift
    ``shift`` and the variance of an indicator of mean ``p_eos + shift`` (bound 1)."""
    q = p_eos + shift
    if not (0 < q < 1 and 0 < p_eos < 1 and shift != 0):
        raise InternalError(f"eos_tokens: p_eos {p_eos} and shift {shift} make no deviation")
    return _mean_bettor_tokens(Reference(shift, q * (1 - q), 1.0), log_threshold, float(norm.ppf(power)))


#: the bettors whose power :func:`bettor_tokens` states: (the statistic whose reference deviation
#: it is tested against, its family, the bettor's part of the family's share, whether the engine
#: tells its steps), the family's other bettors holding the rest (:class:`.family.Family`); a
#: ``block[b]`` bettor reads only the tokens at index ``b`` of their step
BETTORS: dict[str, tuple[str, str, float, bool]] = {
    "serial": ("serial", "serial", 1 / 2, False),
    "index": ("uniform", "index", 1 / 2, False),
    "index.mean": ("mean", "index", 1 / 2, False),
    "block[b].uniform": ("uniform", "block", 1 / (2 * BLOCK_INDICES + 1), True),
    "block[b].mean": ("mean", "block", 1 / (2 * BLOCK_INDICES + 1), True),
    "index.repeat[L]": ("serial", "index", 1 / (3 * len(LAGS)), True),
}


def bettor_tokens(bettor: str, tv: float, alpha: float, power: float = 0.99) -> int:
    """Tokens for one bettor of a one-case audit without draft law or end of sequence to cross at
    ``power`` under its reference deviation of size ``tv`` (:data:`BETTORS`): ``serial`` against
    consecutive transforms correlated by ``tv``; ``index`` (the cells of the transform in the
    ids' order) and ``index.mean`` (its mean: a drift toward lower or higher ids) against
    ``uniform``'s and ``mean``'s reference deviations of that transform; ``block[b].uniform`` and
    ``block[b].mean`` against those deviations at one index of the speculative step, in tokens
    at that index (an engine that tells its steps); ``index.repeat[L]`` (any one lag of
    :data:`~.family.LAGS`) against the index transforms of a token and of the token at its index
    ``L`` steps before correlated by ``tv``, in such pairs. Its threshold is ``log(1/alpha)`` less the
    log of its weight: its family's share times its part."""
    reference_of, family, part, blocks = BETTORS[bettor]
    lt = log_threshold(alpha, 1, family, shares(False, blocks)) - math.log(part)
    return tokens_needed(reference_of, tv, lt, power)


def information_limit(statistic: str, tv: float, alpha: float, power: float = 0.99) -> int:
    """Tokens the Neyman-Pearson test of the reference deviation needs at ``alpha`` and ``power``
    (its log likelihood ratio per token has mean KL and variance V: N KL - z sqrt(N V) = log 1/alpha
    in the normal approximation)."""
    z = float(norm.ppf(power))
    if statistic == "mean":
        cells = np.array([1 + 2 * tv, 1 - 2 * tv]) / 2
    elif statistic == "greedy":
        cells = None
        p0 = 0.5  # the hardest likeliest token: its indicator's variance is largest there
        a, b = p0 + tv, p0
        lr = np.array([math.log(a / b), math.log((1 - a) / (1 - b))])
        w = np.array([a, 1 - a])
    elif statistic == "uniform":
        cells = reference("uniform", tv).cells
    else:
        raise InternalError(f"no reference deviation for statistic {statistic!r}")
    if cells is not None:
        w = cells
        lr = np.log(len(cells) * cells)
    kl = float((w * lr).sum())
    sd = math.sqrt(max(0.0, float((w * lr * lr).sum()) - kl * kl))
    return math.ceil(_sqrt_n(kl, sd, math.log(1 / alpha), z) ** 2)


def family_share(cases: int, pooled: bool = False, family: str = "case") -> float:
    """A family's share of the audit's wealth: 1 for the one case of an audit; among several
    cases, ``1/cases`` each without a pooled family, and with one (``pooled``) the pooled family
    (``family="pooled"``) :data:`POOLED_SHARE` and each case the rest over ``cases``."""
    if cases == 1:
        return 1.0
    if not pooled:
        return 1.0 / cases
    return POOLED_SHARE if family == "pooled" else (1 - POOLED_SHARE) / cases


def log_threshold(
    alpha: float, cases: int, statistic: str, weights: dict[str, float], share: float | None = None
) -> float:
    """A bettor's own threshold in the audit: the audit's wealth crosses ``1/alpha`` when this
    bettor alone reaches ``1 / (alpha share weight)``, ``share`` its family's share of the audit's
    wealth (:func:`family_share`; by default ``1/cases``)."""
    share = 1.0 / cases if share is None else share
    return math.log(1 / (alpha * share)) - math.log(weights[statistic])


def shares(draft: bool, blocks: bool, eos: bool = False) -> dict[str, float]:
    """The family's weights over the statistics that apply (:func:`.family.shares`)."""
    return family_shares(draft, blocks, eos)


def plan_tokens(
    tv: float,
    alpha: float,
    power: float,
    cases: int,
    draft: bool = False,
    blocks: bool = False,
    pooled: bool = False,
    eos: bool = False,
) -> int:
    """Tokens per case the plan asks for: the larger of the ``mean`` and ``greedy`` bettors'
    numbers at their shares (module docstring). With several cases and a ``pooled`` family, the
    plan is the pooled family's, shared evenly: a deviation shared by every case is detected at
    ``power`` from the cases' tokens together; a deviation in one case alone is detected at the
    size its own family reaches with its share (:func:`detectable`, said with every pass)."""
    w = shares(draft, blocks, eos)
    share = family_share(cases, True, "pooled") if cases > 1 and pooled else None
    total = max(tokens_needed(s, tv, log_threshold(alpha, cases, s, w, share), power) for s in PLANNED)
    return math.ceil(total / cases) if share is not None else total


def tv_text(tv: float) -> str:
    """A per-token TV :func:`detectable` gave, for a report: ``> 0.45`` where it says none below
    0.45 is detected (its 1), else the number."""
    return "> 0.45" if tv >= 1 else f"{tv:.3g}"


def detectable(
    statistic: str,
    tokens: int,
    alpha: float,
    power: float,
    cases: int,
    weights: dict[str, float],
    share: float | None = None,
) -> float:
    """The smallest reference deviation ``statistic`` detects at ``power`` after ``tokens`` tokens
    of a family whose share of the audit's wealth is ``share`` (:func:`family_share`; by default
    ``1/cases``), by bisection on :func:`tokens_needed`; 1 when none below 0.45 is."""
    lt = log_threshold(alpha, cases, statistic, weights, share)
    lo, hi = 1e-5, 0.45
    if tokens_needed(statistic, hi, lt, power) > tokens:
        return 1.0
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        if tokens_needed(statistic, mid, lt, power) <= tokens:
            hi = mid
        else:
            lo = mid
    return hi
