"""The engine audit's checks of what an engine says beside its tokens: the speculation its own
counters show (:class:`SpeculationCheck`), and the probabilities it reports for the tokens it
emits, checked against the law within the tolerance a speculation-off control measures
(:class:`ReportsCheck`). Both read the engine through its case runners; seeds of their own, never
the law test's, a fixed number per case (``report_samples``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specproof.properties.engine.checks import (
    Control,
    Reports,
    Speculation,
    judge_reports,
    reports_against,
    tolerance_from,
)
from specproof.properties.engine.contract import EngineUnavailable, Generation
from specproof.properties.engine.plugin import Check, Finding
from specproof.properties.engine.runner import CaseRunner, EngineViolation, sample_seed
from specproof.properties.verdicts import CheckStatus, Verdict

if TYPE_CHECKING:
    from specproof.properties.engine.audit import EngineAudit
    from specproof.properties.engine.case import EngineCaseResult


def idle(r: EngineCaseResult) -> bool:
    """Whether a case shows speculation off: nothing drafted, or drafts never accepted where the
    samples differ. A point-mass case (greedy decoding) draws one path again and again, so drafts
    never accepted there are one observation repeated, not a sign that speculation is off: its
    summary line says speculation was not tested in it, and the verdict does not turn on it."""
    sp = r.speculation
    return sp.status == CheckStatus.NONE and not (r.point_mass and sp.idle == "drafts never accepted")


class SpeculationCheck(Check):
    """The engine's own draft and acceptance counters over the law test's samples, per case and in
    all; ``no_speculation`` where nothing was drafted or accepted."""

    docs = "docs/endpoint-audit.md#what-it-checks"
    bug = "no_speculation"
    signoff = "speculation ran"
    calibration = "exact: the engine's draft and acceptance counters compared with zero"

    name = "speculation"

    def sample(self, audit: EngineAudit, runner: CaseRunner, r: EngineCaseResult, g: Generation) -> None:
        r.speculation.add(g)
        audit.result.speculation.add(g)

    def findings(self, audit: EngineAudit) -> list[Finding]:
        res = audit.result
        if res.speculation.status == CheckStatus.NONE or any(idle(r) for r in res.cases):
            return [Finding(Verdict.NO_SPECULATION)]
        return []


class ReportsCheck(Check):
    """The control on the speculation-off twin (the numerical tolerance; the same seeds with and
    without speculation), then the probabilities the engine reports, checked against the law
    within the control's tolerance; ``misreported`` where they are wrong or missing."""

    docs = "docs/endpoint-audit.md#what-it-checks"
    bug = "zero_logprobs"
    signoff = "reported probabilities are the law's"
    calibration = (
        "exact: each reported probability against the law within the tolerance the "
        "speculation-off control measures"
    )

    name = "reports"

    def run(self, audit: EngineAudit) -> None:
        c, res = audit.config, audit.result
        # the control compares a seed's samples with and without speculation: one sample a seed
        twins = [rn.optional("twin") if audit.single(rn.case) else None for rn in audit.runners]
        if any(t is not None for t in twins):
            res.control = self._control(audit, twins)
        offered = [rn for rn in audit.runners if rn.optional("reports", False)]
        if not offered:
            return
        res.reports.tolerance, res.reports.tolerance_from = tolerance_from(res.control)
        counts = Speculation()
        for rn in offered:
            seeds = [sample_seed(c.seed, rn.case.index, 10**6 + j) for j in range(c.report_samples)]
            audit.say(f"reports {rn.case.name}", 1.0)
            try:
                gens = rn.draw(seeds, report=True)
            except EngineUnavailable as e:
                res.fault = f"{e.detail} (while drawing samples with probabilities requested)"
                res.reports.stop(res.fault)
                return
            except EngineViolation as v:
                res.reports.stop(f"[{v.kind}] {v.detail}")
                raise
            for g in gens:
                counts.add(g)
            reports_against(rn, gens, res.reports)
        res.speculation.reported = {
            "samples": counts.samples,
            "counted": counts.counted,
            "drafted": counts.drafted,
            "accepted": counts.accepted,
        }
        judge_reports(res.reports)

    def _control(self, audit: EngineAudit, twins: list[Any]) -> Control:
        """The twin's reported probabilities against the recipe's laws (the numerical tolerance),
        and the same seeds with and without speculation (the seed-coupled share)."""
        c, control = audit.config, Control()
        diffs = Reports()
        for rn, twin in zip(audit.runners, twins):
            if twin is None:
                continue
            twin_runner = CaseRunner(twin, rn.case, rn.vocab)
            audit.say(f"control {rn.case.name}", 1.0)
            try:
                if twin_runner.optional("reports", False):
                    seeds = [
                        sample_seed(c.seed, rn.case.index, 2 * 10**6 + j) for j in range(c.report_samples)
                    ]
                    reports_against(rn, twin_runner.draw(seeds, report=True), diffs)
                seeds = [sample_seed(c.seed, rn.case.index, 3 * 10**6 + j) for j in range(c.report_samples)]
                ours, theirs = rn.draw(seeds), twin_runner.draw(seeds)
            except EngineUnavailable as e:
                control.notes.append(f"{rn.case.name}: the control stopped: {e.detail}")
                continue
            control.coupled += len(seeds)
            control.identical += sum(a.tokens == b.tokens for a, b in zip(ours, theirs))
            same = sum(x == y for a, b in zip(ours, theirs) for x, y in zip(a.tokens, b.tokens))
            control.identical_tokens = (control.identical_tokens or 0.0) + same
        if control.coupled:
            control.identical_tokens = (control.identical_tokens or 0.0) / (
                control.coupled * audit.spec.tokens
            )
        if diffs.checked:
            control.samples, control.tolerance = diffs.samples, diffs.max_error
        return control

    def findings(self, audit: EngineAudit) -> list[Finding]:
        return (
            [Finding(Verdict.MISREPORTED)]
            if audit.result.reports.status in (CheckStatus.WRONG, CheckStatus.ABSENT)
            else []
        )
