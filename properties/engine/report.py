"""The engine audit's report: a table of every engine's verdict, then per flagged engine its
witness case, the next-token counts observed against expected where the law deviates, and
every case's plan, samples, p-value and power. Markdown or HTML (:mod:`.audit.report`'s writers).
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Sequence
from typing import Any

from specproof.properties.audit.report import Bars, write_blocks
from specproof.properties.engine.results import EngineAuditResult
from specproof.properties.verdicts import Verdict


def report_blocks(results: Sequence[EngineAuditResult], title: str = "specproof engine audit") -> list[Any]:
    """Blocks for :mod:`.report`'s Markdown and HTML writers. The first screen: the verdict of each
    engine, what ran short, the witness (observed against expected), the power and the checks
    beside the law; then, per engine that did not simply pass, its cases."""
    out: list[Any] = [("h1", title)]
    out += _verdicts(results)
    short = [(r, c) for r in results for c in r.short]
    faults = [r for r in results if r.fault]
    if short or faults:
        out.append(("h2", "Ran short of the plan"))
        out += [("p", f"{r.engine}: sampling stopped: {r.fault}") for r in faults]
        out += [("p", f"{r.engine}: {c.case.name}: {c.n}/{c.planned} samples") for r, c in short]
    for r in results:
        if r.witness is not None and r.witness.test is not None and not r.witness.hard_failure:
            out += _witness_bars(r)
    out += _power(results)
    for r in results:
        if r.verdict == Verdict.PASS and len(results) > 1:
            continue
        out += _details(r)
    if len(results) == 1:  # one deployment: its sign-off, item by item
        out += _signoff(results[0])
    return out


def _signoff(r: EngineAuditResult) -> list[Any]:
    from specproof.properties.engine.signoff import signoff

    rows = [[str(i), it.question, it.answer, it.detail] for i, it in enumerate(signoff(r), 1)]
    return [
        ("h2", "Sign-off"),
        (
            "p",
            "Each question of a speculative deployment's checklist: yes, no with the witness, or not "
            "tested and why.",
        ),
        ("table", (["#", "question", "answer", "detail"], rows)),
    ]


def _verdicts(results: Sequence[EngineAuditResult]) -> list[Any]:
    rows = []
    for r in results:
        agrees = "" if r.agrees is None else ("yes" if r.agrees else "**NO**")
        rows.append([r.engine, r.expected or "", f"**{r.verdict.value}**", agrees, r.short_witness()])
    return [("table", (["engine", "expected", "verdict", "agrees", "witness"], rows))]


def _witness_bars(r: EngineAuditResult) -> list[Any]:
    w = r.witness
    assert w is not None and w.test is not None
    pos = w.test.conditional.witness() if w.test.conditional else None
    if pos is None or pos.worst is None:
        return [("p", f"{r.engine}: witness {w.case.name}: {w.test.summary()}")]
    g = pos.worst
    title = f"Next token at position {pos.position} after {g.label} ({r.engine}, {w.case.name})"
    title += ": observed vs expected"
    return [("bars", Bars(title, list(g.labels), list(g.observed), list(g.expected)))]


def _power(results: Sequence[EngineAuditResult]) -> list[Any]:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out: list[Any] = [("h2", "Power and the checks beside the law")]
    if results:
        cfg = results[0].config
        out.append(
            (
                "p",
                f"Generated {now}. Family-wise alpha {cfg.alpha:g} per engine (Holm over its cases, "
                f"Bonferroni over {cfg.looks} looks); planned for TV {cfg.tv:g} at power {cfg.power:g} on "
                f"up to {cfg.max_cells} cells; seed {cfg.seed}; budget {cfg.budget_seconds:g} s per engine.",
            )
        )
    rows = []
    for r in results:
        det = [c.detectable_tv for c in r.cases if c.n]
        rows.append(
            [
                r.engine,
                str(r.samples),
                f"{max(det):.3f}"
                if det and r.verdict not in (Verdict.CONTRACT_VIOLATION, Verdict.ERROR)
                else "",
                r.speculation.status,
                r.reports.status,
                "" if r.control is None or r.control.tolerance is None else f"{r.control.tolerance:.2g}",
                "" if r.per_sample_seconds is None else f"{1000 * r.per_sample_seconds:.1f}",
                f"{r.seconds:.1f}",
            ]
        )
    head = ["engine", "samples", "TV detected (worst case)", "speculation", "reported probabilities"]
    out.append(("table", ([*head, "tolerance (control)", "ms/sample", "s"], rows)))
    return out


def _details(r: EngineAuditResult) -> list[Any]:
    out: list[Any] = [("h2", f"{r.engine}: {r.verdict.value}"), ("p", r.doc)]
    if r.cases:
        planned = sum(c.planned for c in r.cases)
        out.append(
            (
                "p",
                f"Plan: {planned:,} samples over {len(r.cases)} cases (M = {r.tokens}, V = {r.vocab}); "
                f"drawn: {r.samples:,} ({r.per_sample_text()}).",
            )
        )
    if r.worker_fault is not None:  # the audit's own side failed: nothing below is a finding
        out.append(("p", f"The audit's own side failed (never the declared verdict): {r.worker_fault}"))
        return out
    if r.violation:
        out.append(("p", r.violation_text()))
        if r.verdict == Verdict.CONTRACT_VIOLATION:
            return out
    out += [("p", r.speculation.line()), ("p", r.reports.line())]
    if r.acceptance is not None:
        out.append(("p", r.acceptance.line()))
    if r.control is not None:
        out.append(("p", r.control.line()))
    w = r.witness or (min(r.cases, key=lambda c: c.pvalue) if r.cases else None)
    if w is not None:
        label = "Witness" if r.witness else "No case rejected; the closest"
        detail = f" {w.hard_failure['detail']}" if w.hard_failure else ""
        out.append(("p", f"{label}: {w.case.name}.{detail}"))
        if w.test is not None and not w.hard_failure:
            out.append(("p", w.test.summary()))
    return [*out, _case_table(r)]


def _case_table(r: EngineAuditResult) -> Any:
    rows = [
        [
            c.case.name,
            str(c.planned),
            str(c.n),
            "0 (hard failure)" if c.hard_failure else f"{c.pvalue:.3g}",
            f"{c.detectable_tv:.3f}",
            "" if c.test is None else f"{c.test.unresolved:.3f}",
            "" if c.test is None else f"{c.test.uncovered:.3f}",
            _forwards(c.forwards),
            c.speculation.status,
            "**rejected**" if c.rejected else "",
            "short" if c.budget_limited else "",
        ]
        for c in r.cases
    ]
    head = ["case", "planned", "samples", "p", f"TV detected at power {r.config.power:g}", "unresolved"]
    head += ["uncovered", "target forwards per call", "speculation", "", "limited"]
    return ("table", (head, rows))


def _forwards(hist: Counter[int]) -> str:
    if not hist:
        return ""
    n = sum(hist.values())
    mean = sum(k * v for k, v in hist.items()) / n
    return f"mean {mean:.2f} ({min(hist)}-{max(hist)})"


def write_report(
    path: str, results: Sequence[EngineAuditResult], title: str = "specproof engine audit"
) -> None:
    """Markdown or HTML by the file's ending, written atomically (:func:`.audit.report.write_blocks`)."""
    write_blocks(path, report_blocks(results, title))
