"""Acceptance across a workload axis, where no rule predicts it: the same prompt and setting must
not accept fewer drafts with N requests in flight than alone, nor after a prefix-cache hit than
cold.

A served engine rarely gives the law its drafts come from, so the acceptance oracle
(:mod:`.acceptance`) cannot predict its acceptance. Its counters still say how many drafts each
sample drafted and accepted, and under the contract a request's speculation does not depend on
the other requests in flight or on the cache (a draft state taken from another request of the
batch, or left by the request that filled the cache, keeps the law when the verifier is told the
law the drafts came from, and loses acceptance). For each prompt and setting, the case alone (or
cold) is the base and every other place on the axis is compared with it.

The statistic of a sample is its accepted share ``a / d`` (samples with ``d > 0``), in [0, 1]; the
samples of a case are i.i.d. (their seeds differ; each is a function of its seed), and the two cases
are independent. If the other case's mean share is lower by ``t``, Hoeffding's inequality for the
difference of two means of variables in [0, 1] bounds the chance of that under equal laws by
``exp(-2 t^2 / (1/n_base + 1/n_other))``. A pair is ``low`` when that bound is below its share
of the test's alpha (Bonferroni over the pairs); the verdict is then ``acceptance_low``, naming the
place. Fixed-sample: the cases' sizes are the plan's (they stop early only on a law rejection,
which is the verdict then). It spends a quarter of the audit's alpha where it runs (an axis, and
counters, and no declared rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specproof.properties.engine.case import EngineCaseResult
from specproof.properties.verdicts import CheckStatus


def _where(r: EngineCaseResult) -> str:
    return r.case.where or ""


@dataclass
class AxisAcceptance:
    """The comparison of each case's accepted share with its base's (module docstring)."""

    alpha: float
    status: CheckStatus = CheckStatus.NOT_RUN  # same | low | not_run
    why: str = ""
    pairs: list[dict[str, Any]] = field(default_factory=list)

    def judge(
        self,
        cases: Sequence[EngineCaseResult],
        shares: dict[int, list[float]],
        is_base: Callable[[EngineCaseResult], bool],
    ) -> None:
        """Compare each case's accepted share with its base's (``is_base``: the place the axis
        compares others with: alone, cold)."""
        groups: dict[tuple[Any, ...], list[EngineCaseResult]] = {}
        for r in cases:
            groups.setdefault((r.case.prompt, r.case.sampling), []).append(r)
        for rs in groups.values():
            base = next((r for r in rs if is_base(r)), None)
            for r in rs:
                if base is None or r is base:
                    continue
                a, b = shares.get(base.case.index, []), shares.get(r.case.index, [])
                if not a or not b:
                    continue
                t = sum(a) / len(a) - sum(b) / len(b)
                bound = math.exp(-2 * t * t / (1 / len(a) + 1 / len(b))) if t > 0 else 1.0
                self.pairs.append(
                    {
                        "case": r.case.name,
                        "base": _where(base),
                        "where": _where(r),
                        "share": sum(b) / len(b),
                        "base_share": sum(a) / len(a),
                        "samples": len(b),
                        "base_samples": len(a),
                        "bound": bound,
                    }
                )
        if not self.pairs:
            self.status, self.why = CheckStatus.NOT_RUN, "no case drafted on both sides of the axis"
            return
        level = self.alpha / len(self.pairs)
        for p in self.pairs:
            p["low"] = p["bound"] <= level
        self.status = CheckStatus.LOW if any(p["low"] for p in self.pairs) else CheckStatus.SAME

    @property
    def factor(self) -> str:
        """What a low pair reads as (empty where none is)."""
        low = [p for p in self.pairs if p.get("low")]
        if not low:
            return ""
        p = min(low, key=lambda p: p["bound"])
        return (
            f"acceptance lower {p['where']} than {p['base']}: {p['share']:.3f} of the drafts accepted "
            f"against {p['base_share']:.3f} (bound {p['bound']:.2g} <= {self.alpha / len(self.pairs):.2g})"
        )

    def line(self) -> str:
        if self.status == CheckStatus.NOT_RUN:
            return f"acceptance across the axis: NOT TESTED ({self.why})"
        rows = "; ".join(
            f"{p['where']}: {p['share']:.3f} vs {p['base_share']:.3f} {p['base']}" for p in self.pairs
        )
        head = f"acceptance across the axis (accepted share per sample, alpha {self.alpha:g}): {rows}"
        return (
            f"{head}: LOW, {self.factor}"
            if self.status == CheckStatus.LOW
            else f"{head}: the same within the bound"
        )

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "why": self.why, "alpha": self.alpha, "pairs": list(self.pairs)}
