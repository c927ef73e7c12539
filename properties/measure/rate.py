"""The one harness every calibration measures with: seeded runs of one audit (or one simulated
test), how many were flagged, and the binomial interval of that rate.

It is shaped like scipy's ``stats.power`` (a test, how its data are drawn, its level -> a result
object), with the seeds stated instead of a random state, so that a row of a calibration table
is reproduced by its seeds alone::

    runs = rejection_rate(lambda seed: audit_engine(spec, config(seed)), range(1000, 1300),
                          flagged=lambda r: r.verdict == Verdict.LOSSY)
    runs.rate.hits, runs.rate.runs, runs.rate.ci    # k of n, its Clopper-Pearson 95% interval

:class:`Rate` is the typed result; a calibration's JSON writes it with :meth:`Rate.fields`
under the key that row has always had (``false_alarms``, ``rejected``, ``crossed``), so the
documents under docs/measurements keep their shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from specproof.properties.audit import stats
from specproof.reference.errors import SpecproofInputError

R = TypeVar("R")
K = TypeVar("K")


@dataclass(frozen=True)
class Rate:
    """``hits`` of ``runs`` flagged, and the exact (Clopper-Pearson) interval of the rate at
    ``level``; no runs gives the whole interval [0, 1]."""

    hits: int
    runs: int
    level: float = 0.95

    def __post_init__(self) -> None:
        for name in ("hits", "runs"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise SpecproofInputError(name, f"a count >= 0, got {v!r}")
        if self.hits > self.runs:
            raise SpecproofInputError("hits", f"{self.hits} of {self.runs} runs is more than the runs")
        if not 0 < self.level < 1:
            raise SpecproofInputError("level", f"in (0, 1), got {self.level!r}")

    @property
    def rate(self) -> float:
        return self.hits / self.runs if self.runs else 0.0

    @property
    def ci(self) -> tuple[float, float]:
        return stats.clopper_pearson(self.hits, self.runs, self.level) if self.runs else (0.0, 1.0)

    def fields(self, key: str) -> dict[str, Any]:
        """The rate as a calibration row writes it: ``{key: hits, "rate": ..., "ci95": [lo, hi]}``."""
        lo, hi = self.ci
        return {key: self.hits, "rate": self.rate, "ci95": [lo, hi]}

    def text(self, digits: int = 3) -> str:
        """``"k of n [95% CI lo, hi]"``."""
        lo, hi = self.ci
        pct = round(100 * self.level)
        return f"{self.hits} of {self.runs} [{pct}% CI {lo:.{digits}f}, {hi:.{digits}f}]"


@dataclass
class Runs(Generic[K]):
    """What :func:`rejection_rate` returns: what was kept of each run, in seed order; the rate of
    those flagged; the seconds the runs took."""

    results: list[K]
    rate: Rate
    seconds: float


def _itself(r: Any) -> Any:
    return r


def rejection_rate(
    run: Callable[[int], R],
    seeds: Iterable[int],
    flagged: Callable[[R], bool],
    after: Callable[[int, R], None] | None = None,
    keep: Callable[[R], K] = _itself,
) -> Runs[K]:
    """``run(seed)`` for each seed in order; how many results ``flagged`` calls flagged.
    ``after(j, result)`` is called after run ``j`` (0-based), for progress or for counting what
    else a run found; ``keep(result)`` is what is kept of each run (the whole result unless told:
    a calibration of hundreds of audits keeps the few numbers its table needs, not the audits)."""
    results: list[K] = []
    hits = 0
    t0 = time.perf_counter()
    for j, seed in enumerate(seeds):
        r = run(seed)
        hits += bool(flagged(r))
        if after is not None:
            after(j, r)
        results.append(keep(r))
    return Runs(results, Rate(hits, len(results)), time.perf_counter() - t0)
