"""The engine audit's streaming check: the same seeds asked whole and streamed, one request at a
time (so that what differs is the streaming, not what else is in flight), compared by
:class:`~specproof.properties.engine.checks.Streaming`; where the engine reports probabilities,
the streamed ones are checked against the law too."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from specproof.properties.engine.checks import judge_reports, reports_against
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.contract import EngineUnavailable, NotStreamed
from specproof.properties.engine.plugin import Check, Finding
from specproof.properties.engine.runner import CaseRunner, sample_seed
from specproof.properties.verdicts import CheckStatus, Verdict

if TYPE_CHECKING:
    from specproof.properties.engine.audit import EngineAudit
    from specproof.properties.engine.results import EngineAuditResult


def stream_check(
    runners: Sequence[CaseRunner],
    config: EngineAuditConfig,
    res: EngineAuditResult,
    say: Callable[[str, float], None],
) -> None:
    """Fill ``res.streaming`` from the first case at the lowest level whose engine streams."""
    offered = [r for r in runners if "stream" in r.offers]
    if not offered:
        return
    rn = min(offered, key=lambda r: (r.case.order, r.case.index))  # the plainest place first
    report = bool(rn.optional("reports", False))
    seeds = [sample_seed(config.seed, rn.case.index, 6 * 10**6 + j) for j in range(config.report_samples)]
    say(f"streaming {rn.case.name}", 1.0)
    try:
        whole = [g for s in seeds for g in rn.draw([s], report=report)]
        streamed = [g for s in seeds for g in rn.draw_stream([s], report=report)]
    except EngineUnavailable as e:
        res.streaming.status, res.streaming.stopped = CheckStatus.STOPPED, e.detail
        return
    except NotStreamed as e:  # a server that does not stream: nothing to compare, never a violation
        res.streaming.status, res.streaming.why = CheckStatus.NOT_OFFERED, str(e)
        return
    for s, a, b in zip(seeds, whole, streamed):
        res.streaming.add(s, a, b, res.reports.tolerance)
    if report:
        out = res.streaming.reports
        out.tolerance, out.tolerance_from = res.reports.tolerance, res.reports.tolerance_from
        reports_against(rn, streamed, out)
        judge_reports(out)
    res.streaming.judge()


class StreamingCheck(Check):
    """Streamed answers against whole ones (:func:`stream_check`): tokens or text that differ are a
    contract violation (``stream_differs``), reported probabilities that differ ``misreported``."""

    docs = "docs/endpoint-audit.md#what-it-checks"
    bug = "stream_step_tail"
    signoff = "a streamed answer equals the whole answer"
    calibration = "exact: the tokens, text and counters of a seed streamed and whole compared for equality"

    name = "streaming"

    def run(self, audit: EngineAudit) -> None:
        if not audit.result.fault:
            stream_check(audit.runners, audit.config, audit.result, audit.say)

    def findings(self, audit: EngineAudit) -> list[Finding]:
        st = audit.result.streaming
        if st.status == CheckStatus.DIFFERS:
            f = st.first or {}
            violation = {
                "kind": "stream_differs",
                "detail": (
                    f"{st.hard} of {st.samples} seeds answered other tokens or text streamed than whole; "
                    f"seed {f.get('seed')}: {f.get('what')}"
                ),
                "case": audit.result.cases[0].case.name if audit.result.cases else "",
                "stage": "checks",
            }
            return [Finding(Verdict.CONTRACT_VIOLATION, violation=violation)]
        if st.status == CheckStatus.REPORTS_DIFFER:
            return [Finding(Verdict.MISREPORTED)]
        return []
