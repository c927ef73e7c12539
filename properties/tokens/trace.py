"""What the token test's wealth did over the tokens it read, in memory that does not grow: the
report's plot of the wealth over tokens, one curve per statistic (proofs_notes/token_audit.md,
"What the report draws").

A point is taken after a chunk of samples is fed (:meth:`Trace.taken`): the tokens read so far,
the audit's wealth, and each statistic's part of it. The audit's wealth is a weighted average of
its bettors' wealths (the cases' families and the pooled one), so it is the sum over statistics
of the part their bettors hold: the curves add up to the audit's, and the one that rises is the
statistic that is finding something. At most :data:`TRACE_POINTS` points are kept: when full,
every other one is let go and points are taken half as often from then on, so the kept points
stay evenly spread over the run; the last state is always the curve's end.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: the most points a trace keeps
TRACE_POINTS = 128

#: one point: tokens read, log10 of the audit's wealth, log10 of each statistic's part of it
Point = tuple[int, float, dict[str, float]]


@dataclass
class Trace:
    """The wealth over tokens (module docstring)."""

    limit: int = TRACE_POINTS
    points: list[Point] = field(default_factory=list)
    every: int = 1  # a point every this many chunks
    chunks: int = 0

    def taken(self, point: Callable[[], Point | None]) -> None:
        """One chunk fed; ``point`` is called only where this chunk's point is kept (None: the
        wealth is infinite, a hard witness, and no curve goes on)."""
        self.chunks += 1
        if (self.chunks - 1) % self.every:
            return
        p = point()
        if p is None:
            return
        if len(self.points) >= self.limit:
            self.points = self.points[::2]
            self.every *= 2
            if (self.chunks - 1) % self.every:
                return
        self.points.append(p)

    def to_json(self, last: Point | None, alpha: float) -> dict[str, Any]:
        """The kept points and ``last`` (the state at the end) as columns: ``tokens``, ``audit``
        (log10 of the wealth) and ``statistics`` (name -> log10 of its part), with the threshold
        ``log10(1/alpha)``."""
        pts = list(self.points)
        if last is not None and (not pts or pts[-1][0] != last[0]):
            pts.append(last)
        names = sorted({s for _, _, parts in pts for s in parts})
        return {
            "tokens": [p[0] for p in pts],
            "audit": [p[1] for p in pts],
            "statistics": {s: [p[2].get(s, -math.inf) for p in pts] for s in names},
            "threshold": math.log10(1 / alpha),
        }
