"""The server's own speculation metrics against the counters its answers carried.

A deployment's dashboard does not read the counters of each answer: it reads the server's global
ones (llama-server's and vLLM's ``/metrics``: draft tokens proposed and accepted since start), and
the acceptance rate a release is signed off on is computed from those. A metric computed the wrong
way (a mean of per-request ratios where a ratio of sums is meant, a counter bumped at the wrong
place) misreports acceptance while every answer is right, and no law test can see it.

An engine that offers ``server_metrics()`` (capability ``metrics``: a dict with ``drafted`` and
``accepted``, the server's cumulative totals, and ``retried``, the requests its client sent twice)
is read before and after the sample stage. In between, the audit sends the law test's
generations and law requests (each one new token after a context: a request that drafts nothing).
So the growth of the server's totals must **equal** the sum of the counters the stage's answers
carried, exactly (integers; :func:`metrics_check`). Where it does not, the verdict is
``misreported``, the report naming both sums.

Not checked (said, with why): where the engine's answers carry no counters; where a request was
retried in between (a server may have counted the lost attempt); after a fault (requests whose
answers never came may have been counted); with the load axis (its background requests draft
too). Traffic from other clients in between also makes the sums differ: audit a server no one else
is using (the report says so beside a difference). Nothing here is timed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specproof.properties.engine.plugin import Check, Finding
from specproof.properties.verdicts import CheckStatus, Verdict

if TYPE_CHECKING:
    from specproof.properties.engine.audit import EngineAudit
    from specproof.properties.engine.contract import Generation

__all__ = ["MetricsCheck", "MetricsPlugin", "Tally", "metrics_check", "read_totals", "stage_check"]


@dataclass
class Tally:
    """The counters the answers of a stage carried (every answer returned, counted or not)."""

    answers: int = 0
    counted: int = 0  # answers that carried counters
    drafted: int = 0
    accepted: int = 0

    def add(self, drafted: int | None, accepted: int | None) -> None:
        self.answers += 1
        if drafted is not None:
            self.counted += 1
            self.drafted += int(drafted)
            self.accepted += int(accepted or 0)


@dataclass
class MetricsCheck:
    """The server's totals over the sample stage against its answers' counters."""

    status: CheckStatus = CheckStatus.NOT_OFFERED  # agree, differ, not_checked, not_offered
    why: str = ""  # why not checked
    before: dict[str, int] | None = None
    after: dict[str, int] | None = None
    tally: Tally = field(default_factory=Tally)

    @property
    def grew(self) -> dict[str, int]:
        """How much the server's totals grew over the stage."""
        if self.before is None or self.after is None:
            return {}
        return {k: int(self.after[k]) - int(self.before[k]) for k in ("drafted", "accepted")}

    def line(self) -> str:
        t = self.tally
        if self.status == CheckStatus.NOT_OFFERED:
            why = self.why or "the engine exposes no global speculation counters"
            return f"server metrics: not offered ({why})"
        if self.status == CheckStatus.NOT_CHECKED:
            return f"server metrics: NOT CHECKED: {self.why}"
        g = self.grew
        theirs = f"{g['accepted']:,} accepted of {g['drafted']:,} drafted"
        ours = f"{t.accepted:,} accepted of {t.drafted:,} drafted over the stage's {t.answers:,} answers"
        if self.status == CheckStatus.AGREE:
            return f"server metrics: agree with the answers' counters ({theirs})"
        return (
            f"server metrics: MISREPORT: the server's totals grew by {theirs} while its answers said "
            f"{ours} (a rate of {_rate(g)} against {_rate({'drafted': t.drafted, 'accepted': t.accepted})}; "
            "traffic from other clients in between also makes them differ: audit a server no one else uses)"
        )

    def to_json(self) -> dict[str, Any]:
        t = self.tally
        return {
            "status": self.status,
            "why": self.why,
            "before": self.before,
            "after": self.after,
            "grew": self.grew or None,
            "answers": {
                "answers": t.answers,
                "counted": t.counted,
                "drafted": t.drafted,
                "accepted": t.accepted,
            },
        }


def _rate(c: dict[str, int]) -> str:
    return f"{c['accepted'] / c['drafted']:.3f}" if c.get("drafted") else "n/a"


def metrics_check(
    before: dict[str, int] | None, after: dict[str, int] | None, tally: Tally, why_not: str = ""
) -> MetricsCheck:
    """The check (module docstring): ``before`` and ``after`` the server's totals (None: not
    offered); ``tally`` the stage's answers; ``why_not`` a reason the stage cannot be checked."""
    out = MetricsCheck(before=before, after=after, tally=tally)
    if before is None or after is None:
        return out
    for name, snap in (("before", before), ("after", after)):
        missing = [k for k in ("drafted", "accepted", "retried") if not isinstance(snap.get(k), int)]
        if missing:
            out.status, out.why = (
                CheckStatus.NOT_CHECKED,
                f"the server's metrics {name} the stage lack {missing[0]}",
            )
            return out
    if why_not:
        out.status, out.why = CheckStatus.NOT_CHECKED, why_not
    elif after["retried"] != before["retried"]:
        n = after["retried"] - before["retried"]
        out.status, out.why = (
            CheckStatus.NOT_CHECKED,
            f"{n} request(s) were sent again; the server may have counted both",
        )
    elif tally.counted < tally.answers:
        out.status = CheckStatus.NOT_CHECKED
        out.why = f"{tally.answers - tally.counted} of {tally.answers} answers carried no counters"
    elif out.grew == {"drafted": tally.drafted, "accepted": tally.accepted}:
        out.status = CheckStatus.AGREE
    else:
        out.status = CheckStatus.DIFFER
    return out


def read_totals(runner: Any) -> dict[str, int] | None:
    """The engine's ``server_metrics()`` through its case runner (None: no runner, none given, or
    the server did not answer)."""
    from specproof.properties.engine.contract import EngineUnavailable

    if runner is None:
        return None
    try:
        got = runner.optional("metrics")()
    except EngineUnavailable:
        return None
    return None if got is None else dict(got)


def stage_check(
    meter: Any, before: dict[str, int] | None, after: dict[str, int] | None, tally: Tally, why_not: str
) -> MetricsCheck:
    """The sample stage's check (:func:`metrics_check`), or why there is none: ``meter`` the
    runner whose engine offers the metrics (None: not offered)."""
    if meter is not None and (before is None or after is None):
        return MetricsCheck(why="server_metrics() gave none (a llama-server started without --metrics)")
    return metrics_check(before, after, tally, why_not)


class MetricsPlugin(Check):
    """The server's totals read before and after the sample stage, against the counters of every
    answer it got (module docstring); ``misreported`` where they differ."""

    docs = "docs/endpoint-audit.md#what-it-checks"
    bug = "averaged_metric"
    signoff = "acceptance as the rule predicts"
    calibration = "exact: two sums of integer counters compared for equality"

    name = "metrics"

    def __init__(self) -> None:
        self.tally = Tally()
        self.meter: Any = None
        self.before: dict[str, int] | None = None

    def before_sampling(self, audit: EngineAudit) -> None:
        self.meter = next((rn for rn in audit.runners if "metrics" in rn.offers), None)
        self.before = read_totals(self.meter)

    def answer(self, audit: EngineAudit, g: Generation) -> None:
        self.tally.add(g.drafted, g.accepted)

    def after_sampling(self, audit: EngineAudit) -> None:
        why = "; ".join(a.extra_requests for a, _ in audit.axes if a.extra_requests)
        if audit.result.fault:
            why = "a fault: requests whose answers never came may have been counted"
        audit.result.metrics = stage_check(self.meter, self.before, read_totals(self.meter), self.tally, why)

    def findings(self, audit: EngineAudit) -> list[Finding]:
        return [Finding(Verdict.MISREPORTED)] if audit.result.metrics.status == CheckStatus.DIFFER else []
