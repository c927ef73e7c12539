"""The results of an engine audit: one :class:`EngineCaseResult` per case (a prompt and a
sampling setting) and the :class:`EngineAuditResult` of the engine (verdict, witness, summary,
JSON). They hold what :class:`~.audit.EngineAudit` found; nothing here samples or tests.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specproof.properties.engine.case import EngineCase, EngineCaseResult  # noqa: F401 (re-exported)
from specproof.properties.engine.checks import Control, Reports, Speculation, Streaming
from specproof.properties.engine.completions import CompletionsResult
from specproof.properties.engine.metrics import MetricsCheck
from specproof.properties.engine.signoff import signoff
from specproof.properties.tokens.power import tv_text
from specproof.properties.verdicts import CheckStatus, Verdict

if TYPE_CHECKING:
    from specproof.properties.engine.acceptance import Acceptance
    from specproof.properties.engine.audit import EngineAuditConfig
    from specproof.properties.engine.axis_acceptance import AxisAcceptance
    from specproof.properties.engine.load import LoadResult


@dataclass
class EngineAuditResult:
    engine: str
    group: str
    doc: str
    config: EngineAuditConfig
    tokens: int
    vocab: int
    expected: str | None = None
    verdict: Verdict = Verdict.PASS
    violation: dict[str, Any] | None = None
    cases: list[EngineCaseResult] = field(default_factory=list)
    seconds: float = 0.0
    #: seconds per law-test sample, over the samples drawn (None: none was drawn)
    per_sample_seconds: float | None = None
    plan_text: str = ""
    #: the engine's own counters over every case (:mod:`.checks`)
    speculation: Speculation = field(default_factory=Speculation)
    reports: Reports = field(default_factory=Reports)
    control: Control | None = None
    #: streamed answers against whole ones for the same seeds (:class:`Streaming`)
    streaming: Streaming = field(default_factory=Streaming)
    #: the acceptance oracle's test (:mod:`.acceptance`; None: the engine declares no rule)
    acceptance: Acceptance | None = None
    #: acceptance compared across a workload axis (:mod:`.axis_acceptance`; None: not run)
    axis_acceptance: AxisAcceptance | None = None
    #: the server's own speculation totals against its answers' counters (:mod:`.metrics`)
    metrics: MetricsCheck = field(default_factory=MetricsCheck)
    #: why sampling stopped before the plan when the engine stopped answering
    fault: str | None = None
    #: the audit's own side failed (a worker of another environment crashed or answered an error,
    #: :class:`~specproof.properties.servers.venvs.WorkerFault`), quoted: the verdict is ``error``,
    #: which never agrees with a declared one
    worker_fault: str | None = None
    #: what the engine says about how it was reached (a server's profile, recipe, identity)
    description: dict[str, Any] = field(default_factory=dict)
    #: what the audit could not check or had to assume, said before sampling (never silent)
    notes: list[str] = field(default_factory=list)
    #: the token test's reading (None where it did not run) and whether it found a deviation
    token_test: dict[str, Any] | None = None
    token_rejected: bool = False
    #: how the samples were drawn on workers, in a line (None: here); not part of the JSON, which
    #: is the same for any number of workers
    sharding: str | None = None
    #: the load axis's checks (:class:`~specproof.properties.engine.load.LoadResult`; None: no
    #: load asked) and the factor a deviation lives on ("lossy only with 8 in flight ...")
    load: LoadResult | None = None
    factor: str = ""
    #: the completions axis's independence tests (:mod:`.completions`; None: no such axis)
    completions: CompletionsResult | None = None
    #: what a plug-in without a field of its own reports, by its name: an object with ``line()``
    #: (its summary line), ``to_json()`` and, where it asks a sign-off question of its own, ``item()``
    #: (the question, answer and detail)
    plugins: dict[str, Any] = field(default_factory=dict)
    #: where the plan did not fit the budget, what would (said before sampling, and again where the
    #: audit ran short): a per-token TV, a budget
    fit: str = ""
    #: why the audit stopped before sampling, where it did (no drafts in the probe), with the cause
    early: str = ""

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def agrees(self) -> bool | None:
        """Whether the verdict is the declared one (None: none declared). An audit that ended on
        a fault of its own side (``error``: a worker crashed) never agrees, whatever was declared:
        a crash is no evidence for any verdict."""
        if self.verdict == Verdict.ERROR or self.worker_fault is not None:
            return False
        return None if self.expected is None else self.expected == self.verdict.value

    @property
    def samples(self) -> int:
        return sum(c.n for c in self.cases)

    def violation_text(self) -> str:
        """The contract violation in a line; after a deviation found first (the verdict stays
        ``lossy``), said as what happened next."""
        v = self.violation or {}
        where = f" in {v.get('case')}" + (f", {v['stage']} stage" if v.get("stage") else "")
        text = f"contract violation [{v.get('kind')}]{where}: {v.get('detail')}"
        if self.verdict == Verdict.LOSSY:
            return f"then, after the law was rejected, a {text} (the rejection stands)"
        return text

    def per_sample_text(self) -> str:
        """``12.3 ms per sample``, or why there is no such figure."""
        if self.per_sample_seconds is None:
            return "no law-test sample drawn, so no time per sample"
        return f"{1000 * self.per_sample_seconds:.1f} ms per sample"

    @property
    def short(self) -> list[EngineCaseResult]:
        """Cases that stopped before their plan (the budget or a fault), not rejected."""
        return [c for c in self.cases if c.budget_limited]

    @property
    def witness(self) -> EngineCaseResult | None:
        bad = [c for c in self.cases if c.rejected]
        if bad:
            return min(bad, key=lambda c: c.pvalue)
        found = [c for c in self.cases if c.token_finding]
        return found[0] if found else None

    def token_text(self, short: bool = False) -> str:
        """What the token test found, in a line (empty where it found nothing)."""
        if not self.token_rejected or self.token_test is None:
            return ""
        f = self.token_test.get("finding") or {}
        case = self.cases[f["case"]].case.name if "case" in f else "?"
        if f.get("statistic") == "impossible":
            d = f["detail"]
            return (
                f"token test, {case}: sample {d['sample']} emitted token {d['token']} at position "
                f"{d['position']}, of probability 0 under the law at its prefix "
                f"({d['sequence'][: d['position']]})"
            )
        e = math.exp(min(700.0, self.token_test["log_wealth"]))
        if f.get("pooled"):
            case = f"every case's tokens together (pooled; its own tokens deviate most in {case})"
        text = (
            f"token test, {case}: statistic {f['statistic']} ({f['what']}), e-value {e:.3g} >= 1/alpha = "
            f"{1 / self.token_test['alpha']:.3g} after {f['tokens']:,} tokens; its drift {f['drift']:+.3g}"
            + (f" ({f['direction']})" if f.get("direction") else "")
        )
        if not short:
            return text
        way = f", leaning {f['direction']}" if f.get("direction") else ""
        return text.split("; its drift")[0] + way

    def _background_witness(self) -> str:
        """The deviation found beside the cases' law tests: in the background requests (the token
        test), or between the completions of one request (their independence test)."""
        if self.completions is not None and self.completions.rejected:
            return f"independence {self.completions.rejected[0].line()}"
        if self.load is None or not self.load.background_lossy:
            return ""
        return f"background requests (with the cases' requests in flight): {self.load.background_text}"

    def witness_text(self) -> str:
        """One line: where the deviation is (the prefix and the next-token law that deviates)."""
        w = self.witness
        if self.violation and self.verdict == Verdict.CONTRACT_VIOLATION:
            return f"[{self.violation['kind']}] {self.violation['detail']}"
        if w is None:
            return self._background_witness()
        if w.hard_failure:
            return f"{w.case.name}: {w.hard_failure['detail']}"
        if not w.rejected and w.token_finding:
            return self.token_text()
        if w.test is None:
            return w.case.name
        text = f"{w.case.name}: {w.test.summary()}"
        if "deviates at" not in text and w.test.worst:
            cell = w.test.worst[0]
            text += (
                f"; most deviating cell (prefix of the M tokens) {cell['cell']}: "
                f"{cell['observed']} vs {cell['expected']:.1f}"
            )
        if w.rejected and w.test.size_text():
            text += f"; seen: {w.test.size_text()}"
        return text

    def short_witness(self) -> str:
        """The witness in one short line: the case, p, and where the law deviates (the prefix and
        the next-token counts observed vs expected), or the violation."""
        if self.worker_fault is not None:
            return f"[fault] {self.worker_fault.splitlines()[0]}"
        if self.violation and self.verdict == Verdict.CONTRACT_VIOLATION:
            return f"[{self.violation['kind']}] {self.violation['detail']}"
        w = self.witness
        if w is None:
            return self._background_witness()
        if w.hard_failure:
            return f"{w.case.name}: {w.hard_failure['detail']}"
        if not w.rejected and w.token_finding:
            return self.token_text(short=True)
        t = w.test
        if t is None:
            return w.case.name
        pos = t.conditional.witness() if t.conditional else None
        if pos is not None and pos.worst is not None and pos.pvalue <= t.p_joint:
            g = pos.worst
            cells = ", ".join(f"{lab}: {o} vs {e:.1f}" for lab, o, e in zip(g.labels, g.observed, g.expected))
            tv, floor = g.size()
            where = (
                f"next token at position {pos.position} after {g.label}: {cells} (plug-in TV {tv:.3f}; "
                f"an exact engine shows about {floor:.3f} at {g.n} samples)"
            )
        elif t.worst:
            cell = t.worst[0]
            where = f"cell {cell['cell']}: {cell['observed']} vs {cell['expected']:.1f}"
            if t.seen is not None and t.floor is not None:
                where += f" (plug-in TV {t.seen.estimate:.3f} on the cells; exact about {t.floor:.3f})"
        else:
            where = ""
        return f"{w.case.name}, {w.n} samples, p = {w.pvalue:.2g}; {where}"

    def summary(self) -> str:
        """The verdict, what ran short, the witness (observed against expected), the power, then
        the checks beside the law and what was run."""
        head = f"engine {self.engine}: {self.verdict.value.upper()}"
        if self.expected is not None:
            head += f" (expected {self.expected})"
        lines = [head]
        if self.early:
            lines.append(f"  {self.early}")
        if self.worker_fault is not None:
            lines.append("  the audit's own side failed (no verdict on the engine; never the declared one):")
            lines += [f"    {line}" for line in self.worker_fault.splitlines()]
            return "\n".join(lines)
        if self.violation and self.verdict == Verdict.CONTRACT_VIOLATION:
            lines.append(f"  {self.violation_text()}")
            if self.violation.get("stage") != "checks":  # found before the law was tested
                return "\n".join(lines)
        if self.factor:
            lines.append(f"  {self.factor}")
        lines += self._short_lines()
        lines += [f"  note: {n}" for n in self.notes]
        if self.witness is not None or self._background_witness():
            lines.append(f"  witness: {self.witness_text()}")
        if self.violation and self.verdict != Verdict.CONTRACT_VIOLATION:
            lines.append(f"  {self.violation_text()}")
        lines += self._power_lines()
        lines.append(f"  {self.speculation.line()}")
        idle = [f"{r.case.name} ({r.speculation.idle})" for r in self.cases if r.speculation.idle]
        if idle:
            lines.append(f"    speculation not tested in: {', '.join(idle)}")
        said = lambda c: c.status != CheckStatus.NOT_OFFERED or bool(c.why)  # noqa: E731
        checks = (
            self.reports if self.reports.status != CheckStatus.NOT_OFFERED else None,
            self.control,
            self.streaming if said(self.streaming) else None,
            self.acceptance,
            self.axis_acceptance,
            self.metrics if said(self.metrics) else None,
        )
        lines += [f"  {check.line()}" for check in checks if check is not None]
        for axis in (self.load, self.completions):
            lines += [f"  {line}" for line in (axis.lines() if axis is not None else [])]
        lines += [f"  {rep.line()}" for rep in self.plugins.values()]
        c = self.config
        lines.append(
            f"  {len(self.cases)} case{'' if len(self.cases) == 1 else 's'} (M = {self.tokens}, V = "
            f"{self.vocab}), {self.samples} samples, "
            f"{self.seconds:.1f} s ({self.per_sample_text()}); "
            f"family-wise alpha {c.alpha:g} (Holm), {c.looks} looks"
        )
        return "\n".join(lines)

    def _short_lines(self) -> list[str]:
        if self.verdict == Verdict.INTERRUPTED:
            return ["  interrupted (Ctrl-C): what follows is what ran before"]
        out = []
        if self.fault:
            out.append(f"  sampling stopped early: {self.fault}")
        for r in self.short:
            tokens = f", {r.observed_tokens:,} tokens scored" if r.token_detects else ""
            cap = " (samples kept ending early: it hit the cap on more samples)" if r.short_of_tokens else ""
            out.append(f"  ran short: {r.case.name}: {r.n}/{r.planned} samples{tokens}{cap}")
        if self.short and self.fit:
            out.append(f"  the plan did not fit the budget (said before sampling): {self.fit}")
        for r in self.cases:
            if r.collapsed:
                out.append(
                    f"  not tested: {r.case.name}: its {r.n} samples left one cell of the joint law (not a "
                    "pass: give more samples, or a larger --tv)"
                )
        return out

    def _statistics_line(self) -> str:
        """Which of the token test's statistics ran in every case, and which did not and why."""
        from specproof.properties.tokens.family import NOT_FED, WEIGHTS

        cases = (self.token_test or {}).get("cases") or {}
        ran = [{b["statistic"] for b in c.get("bets", ())} for c in cases.values()]
        everywhere = set.intersection(*ran) if ran else set()
        missing = [f"{s} ({NOT_FED.get(s, 'not fed')})" for s in WEIGHTS if s not in everywhere]
        text = f"    statistics run: {', '.join(s for s in WEIGHTS if s in everywhere)}"
        return text + (f"; not run in every case: {', '.join(missing)}" if missing else "")

    def _power_lines(self) -> list[str]:
        c = self.config
        if self.verdict == Verdict.LOSSY or not self.cases:
            return []
        tested = "per-token TV" if self.token_test is not None else "TV on the cells"
        if self.token_test is not None:
            tested = f"a per-token TV of {c.tv:g} toward sharpening, flattening or the argmax"
        else:
            tested = f"TV on the cells {c.tv:g}"
        if c.samples:
            lines = [f"  no deviation detected at the fixed size of {c.samples} samples per case"]
        else:
            word = "every case ran its plan" if not self.short else "some cases ran short"
            lines = [f"  no deviation detected; {word} (power {c.power:g} against {tested})"]
        if self.token_test is not None:
            e = math.exp(min(700.0, self.token_test["log_wealth"]))
            lines.append(
                f"    token test: e-value {e:.3g} (1/alpha = {1 / self.token_test['alpha']:.3g}; "
                "anytime-valid)"
            )
            lines.append(self._statistics_line())
            forced = self.token_test.get("teacher_forcing_checked")
            if forced:  # which law the token test read, and how it was checked
                lines.append(
                    "    laws read along each path in one call (teacher forcing), checked against the law "
                    f"at the prefix alone in {forced['checked']} samples: largest TV "
                    f"{forced['largest_tv']:.2g} (tolerance {forced['tolerance']:g})"
                )
            lines.append(
                "    not covered at any size: mass moved among tokens of about the same probability that "
                "favours different ids at different positions (the transform's law unchanged; where the "
                "same ids gain at every position, the ids statistic learns them, in tokens that grow with "
                "how many ids gain: docs/token-audit.md), and dependence between samples beyond the seed "
                "checks"
            )
            pooled = self.token_test.get("pooled")
            if pooled and pooled.get("detects_per_token_tv"):
                d = pooled["detects_per_token_tv"]
                lines.append(
                    f"    every case together (pooled): {pooled['tokens']:,} tokens: detects a per-token "
                    "TV of "
                    f"{tv_text(d['mean'])} (sharpening), {tv_text(d['greedy'])} (to the argmax), "
                    f"{tv_text(d['uniform'])} "
                    f"(any, on the transform's cells) shared by every case, at power {c.power:g}; each case "
                    "alone, below"
                )
        for r in self.cases:
            mark = " (short)" if r.budget_limited else ""
            if r.collapsed:
                mark = " (its test collapsed to one cell: the joint law was not tested)"
            parts = [f"{r.n}/{r.planned} samples"]
            if r.extended:
                parts[0] += f" ({r.extended} past the plan: samples ended early, the plan is in tokens)"
            if r.token_detects:
                d = r.token_detects
                parts.append(
                    f"{r.observed_tokens:,} tokens: detects a per-token TV of {tv_text(d['mean'])} "
                    f"(sharpening), {tv_text(d['greedy'])} (to the argmax), {tv_text(d['uniform'])} (any, on "
                    "the transform's cells)"
                )
            if r.test is not None or r.point_mass:
                parts.append(f"joint TV {r.detectable_tv:.3g}")
            lines.append(f"    {r.case.name}: {'; '.join(parts)} at power {c.power:g}{mark}")
        return lines

    def to_json(self) -> dict[str, Any]:
        c = self.config
        w = self.witness
        out: dict[str, Any] = {
            "verdict": self.verdict.value,
            "engine": self.engine,
            "group": self.group,
            "doc": self.doc,
            "expected": self.expected,
            "agrees": self.agrees,
            "alpha": c.alpha,
            "tv": c.tv,
            #: what tv measures: the token test's plan is per token, the cells test's (alone) joint
            "tv_unit": "per token" if self.token_test is not None else "joint",
            "power": c.power,
            "seed": c.seed,
            "looks": c.looks,
            "max_cells": c.max_cells,
            "budget_seconds": c.budget_seconds,
            "tokens": self.tokens,
            "vocab": self.vocab,
            "samples": self.samples,
            "seconds": self.seconds,
            "per_sample_seconds": self.per_sample_seconds,
            "plan": self.plan_text,
            "violation": self.violation,
            "fault": self.fault,
            "worker_fault": self.worker_fault,
            "speculation": self.speculation.to_json(),
            "reports": self.reports.to_json(),
            "control": None if self.control is None else self.control.to_json(),
            "streaming": self.streaming.to_json(),
            "acceptance": None if self.acceptance is None else self.acceptance.to_json(),
            "axis_acceptance": None if self.axis_acceptance is None else self.axis_acceptance.to_json(),
            "metrics": self.metrics.to_json(),
            "description": self.description,
            "witness": None if w is None else w.to_json(),
            "witness_text": self.witness_text(),
            "short_witness": self.short_witness(),
            "cases": [r.to_json() for r in self.cases],
        }
        if self.notes:
            out["notes"] = list(self.notes)
        if self.fit:
            out["fit"] = self.fit
        if self.early:
            out["early"] = self.early
        if self.load is not None:
            out["load"] = self.load.to_json()
        if self.factor or self.load is not None or self.completions is not None:
            out["factor"] = self.factor
        if self.completions is not None:
            out["completions"] = self.completions.to_json()
        if self.plugins:
            out["plugins"] = {name: rep.to_json() for name, rep in self.plugins.items()}

        out["config"] = dataclasses.asdict(self.config)  # the whole plan, as a replay needs it
        out["signoff"] = [item.to_json() for item in signoff(self)]
        if self.token_test is not None:
            out["token_test"] = self.token_test
        return out
