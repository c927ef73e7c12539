"""The verifier audit's report: its blocks in the one report model (:mod:`..report_model`), written
as Markdown (text bar plots), HTML (inline SVG plots) or JSON by the file's ending.

A report holds the verdict of every audited backend, and for each flagged one: the witness
case, its most deviating cells observed against expected, and the emitted-length histogram.
"""

from __future__ import annotations

import datetime
from typing import Any

from specproof.properties.audit.results import AuditResult, CaseResult
from specproof.properties.report_model import Bars, Block, write_blocks
from specproof.properties.verdicts import Verdict


def _steps(r: Any) -> str:
    """Steps drawn against the plan's; a case the plan gives no steps says so (never "4/0")."""
    if r.planned:
        return f"{r.n}/{r.planned}"
    return f"{r.n} (smoke stage only: no steps planned)" if r.n else "none planned"


def _case_table(result: AuditResult, skip_after_finding: bool = False) -> Block:
    rows = []
    for r in result.cases:
        if skip_after_finding and r.status == "after_finding":
            continue
        tv = "" if r.tv is None else f"{r.tv.estimate:.4f} [{r.tv.low:.4f}, {r.tv.high:.4f}]"
        ran = r.status in ("ran", "short")
        rows.append(
            [
                r.case.name,
                r.status.replace("_", " ") + (f" ({r.reason})" if r.reason else ""),
                _steps(r),
                f"{r.tv_planned:g}",
                str(r.cells) if ran else "",
                f"{r.unresolved:.3f}" if ran else "",
                f"{r.uncovered:.3f}" if ran else "",
                ("0 (hard failure)" if r.hard_failure else f"{r.pvalue:.3g}") if ran else "",
                f"{r.power:.3f}" if ran else "0",
                f"{r.detectable_tv:.4f}" if ran else "1",
                tv,
                "**rejected**" if r.rejected else "",
            ]
        )
    return (
        "table",
        (
            [
                "case",
                "status",
                "steps / planned",
                "planned TV",
                "cells",
                "unresolved",
                "uncovered (positions)",
                "p",
                "power at planned TV",
                f"TV detected at power {result.config.power:g}",
                "TV on cells (95%)",
                "rejected",
            ],
            rows,
        ),
    )


def _witness_blocks(w: CaseResult) -> list[Block]:
    blocks: list[Block] = [("p", f"Witness: {w.case.describe()}.")]
    if w.hard_failure:
        blocks.append(("p", w.hard_failure["detail"]))
    else:
        blocks.append(
            (
                "p",
                f"p = {w.pvalue:.3g} (chi-square {w.p_chi2:.3g}, exact cells {w.p_cells:.3g}, per position "
                f"{w.p_positions:.3g}) on {w.n} steps over {w.cells} cells.",
            )
        )
        top = w.worst[:8]
        blocks.append(
            (
                "bars",
                Bars(
                    "Observed vs expected, most deviating cells (prefix of the completed output)",
                    [c["cell"] for c in top],
                    [c["observed"] for c in top],
                    [c["expected"] for c in top],
                ),
            )
        )
        pw = w.positions.witness() if w.positions else None
        if pw is not None and pw.worst is not None and pw.pvalue < 0.5:
            g = pw.worst
            blocks.append(
                (
                    "bars",
                    Bars(
                        f"Next token at position {pw.position} ({g.label}): observed vs expected "
                        f"(position p = {pw.pvalue:.3g})",
                        g.labels,
                        g.observed,
                        g.expected,
                    ),
                )
            )
    L = w.lengths
    if L and w.reference_lengths:
        scale = sum(L[1:]) / max(1, sum(w.reference_lengths[1:]))
        ref = [scale * x for x in w.reference_lengths[1:]]
        title = f"Emitted tokens per step: observed vs {w.reference} on the same inputs (scaled)"
        blocks.append(("bars", Bars(title, [str(i) for i in range(1, len(L))], L[1:], ref)))
    elif L:
        blocks.append(("bars", Bars("Emitted tokens per step", [str(i) for i in range(1, len(L))], L[1:])))
    blocks.append(("p", "To turn this witness into a failing unit test: `specproof replay AUDIT.json`."))
    return blocks


def _verdict_line(r: AuditResult) -> str:
    c = r.config
    if r.verdict == Verdict.PASS:
        tvs = sorted({x.tv_planned for x in r.cases if x.status != "smoke_only"})
        return (
            f"PASS: every case ran its plan; power >= {c.power:g} against TV >= "
            + " / ".join(f"{t:g}" for t in tvs)
            + " on its cells."
        )
    if r.verdict == Verdict.UNDERPOWERED:
        return (
            f"UNDERPOWERED: no deviation found, but {len(r.short)} case(s) ran short of the plan; "
            f"the run vouches for TV >= {r.vouched_tv():.3g} only."
        )
    if r.verdict == Verdict.LOSSY:
        return "LOSSY: a deviation from the preserved law (witness below)."
    if r.verdict == Verdict.CONTRACT_VIOLATION:
        v = r.violation or {}
        return f"CONTRACT VIOLATION [{v.get('kind')}] in {v.get('case')}: {v.get('detail')}"
    return f"{r.verdict.value.upper()}: the run stopped before its plan ended."


def blocks_for(
    results: list[AuditResult],
    title: str,
    overall: str | None = None,
    robustness: list[Any] | None = None,
) -> list[Block]:
    """The first screen: the verdict, what ran short, the witness (observed against expected),
    the power; then the details of every backend that did not simply pass."""
    out: list[Block] = [("h1", title)]
    out += _verdict_blocks(results, overall)
    out += _short_blocks(results)
    out += _witness_summary(results)
    out += _power_blocks(results)
    for r in results:
        if r.verdict == Verdict.PASS and len(results) > 1:
            continue
        out += _details(r)
    for rb in robustness or []:
        out.extend(rb.blocks())
    return out


def _verdict_blocks(results: list[AuditResult], overall: str | None) -> list[Block]:
    if len(results) == 1 and overall is None:
        return [("p", "**Verdict: " + _verdict_line(results[0]) + "**")]
    bad = [r for r in results if r.expected is not None and r.verdict != r.expected]
    word = overall or ("agrees" if not bad else "disagrees")
    out: list[Block] = [
        (
            "p",
            f"**Verdict: {word.upper()}: {len(results) - len(bad)}/{len(results)} backends got their "
            "declared verdict.**",
        )
    ]
    out += [("p", f"- {r.backend} ({r.kind}): expected {r.expected}, got {r.verdict.value}.") for r in bad]
    return out


def _short_blocks(results: list[AuditResult]) -> list[Block]:
    """What ran short of its plan (the budget), one row a case; what a finding made unnecessary, one
    line for the whole report."""
    out: list[Block] = []
    short = [(r, c) for r in results for c in r.short]
    if short:
        rows = [
            [
                r.backend,
                c.case.name,
                c.status.replace("_", " ") + (f" ({c.reason})" if c.reason else ""),
                _steps(c),
                f"{c.detectable_tv:.3g}" if c.status in ("ran", "short") else "1 (not run)",
            ]
            for r, c in short
        ]
        head = ["backend", "case", "status", "steps / planned", "TV detected at the stated power"]
        out += [("h2", "Ran short of the plan"), ("table", (head, rows))]
    skipped = [r for r in results if r.after_finding]
    if skipped:
        n = sum(len(r.after_finding) for r in skipped)
        out.append(
            (
                "p",
                f"Not run because a finding came first: {n} cases of {len(skipped)} backend(s), each "
                "of which stopped at its first rejected case (stop early).",
            )
        )
    return out


def _witness_summary(results: list[AuditResult]) -> list[Block]:
    """One line per flagged backend: its witness case and where observed departs from expected."""
    rows = []
    for r in results:
        w = r.shrunk or r.witness
        if w is None and r.finding is None:
            continue
        if r.finding is not None and w is None:
            rows.append([r.backend, f"found in the {r.finding['during']}", "0", r.finding["detail"][:140]])
            continue
        assert w is not None
        if w.hard_failure:
            where = w.hard_failure["detail"][:140]
        elif w.worst:
            cell = w.worst[0]
            where = f"cell {cell['cell']!r}: observed {cell['observed']}, expected {cell['expected']:.1f}"
        else:
            where = ""
        rows.append([r.backend, w.case.name, "0" if w.hard_failure else f"{w.pvalue:.3g}", where])
    if not rows:
        return []
    return [("h2", "Witnesses"), ("table", (["backend", "witness case", "p", "observed vs expected"], rows))]


def _power_blocks(results: list[AuditResult]) -> list[Block]:
    """The plan and, per backend, the power its cases reached (over the cases that ran)."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out: list[Block] = [("h2", "Power")]
    if results:
        c = results[0].config
        out.append(
            (
                "p",
                f"Generated {now}. Family-wise alpha {c.alpha:g} per backend (Holm over its cases); each "
                f"case's sample size planned for power {c.power:g} against its planned TV; seed {c.seed}; "
                f"budget guard {c.budget_seconds:g} s per backend. 'min power' is over the cases that ran; "
                "a backend found lossy stops at its first rejection, so its power is not the point.",
            )
        )
    rows = []
    for r in results:
        agrees = "" if r.expected is None else ("yes" if r.expected == r.verdict else "**NO**")
        ran = [c for c in r.cases if c.status in ("ran", "short")]
        det = [c.detectable_tv for c in ran if not c.case.sparse]
        rows.append(
            [
                r.backend,
                r.kind,
                ", ".join(r.processes),
                r.expected or "",
                r.verdict.value,
                agrees,
                f"{min(c.power for c in ran):.3f}" if ran and r.verdict != Verdict.LOSSY else "",
                f"{max(det):.4f}" if det else "",
                str(sum(c.n for c in r.cases)),
                f"{r.seconds:.1f}",
            ]
        )
    head = ["backend", "kind", "processes", "expected", "verdict", "agrees", "min power", "max TV detected"]
    out.append(("table", ([*head, "steps", "s"], rows)))
    return out


def _details(r: AuditResult) -> list[Block]:
    out: list[Block] = [("h2", f"{r.backend} ({r.kind}): {r.verdict.value}"), ("p", _verdict_line(r))]
    if r.violation:
        v = r.violation
        if v.get("traceback"):
            out.append(("pre", v["traceback"]))
        return [*out, _case_table(r)]
    if r.finding:
        out.append(("p", f"Found in the {r.finding['during']}: {r.finding['detail']}"))
    w = r.witness
    if r.shrunk is not None:
        out.append(("p", "Shrunk witness (a smaller case, still rejected at alpha / cases / shrink):"))
        out.extend(_witness_blocks(r.shrunk))
        out.append(("p", "The case first rejected:"))
    if w is not None:
        out.extend(_witness_blocks(w))
    elif r.ran:
        closest = min(r.ran, key=lambda c: c.pvalue)
        out.append(("p", "No case rejected. The case closest to a rejection:"))
        out.extend(_witness_blocks(closest)[1:])
    out.append(_case_table(r, skip_after_finding=True))
    return out


def write_report(
    path: str,
    results: list[AuditResult],
    title: str = "specproof audit",
    overall: str | None = None,
    robustness: list[Any] | None = None,
) -> None:
    """Write the report (HTML for .html/.htm, Markdown for .md/.txt, JSON for .json), atomically."""
    write_blocks(path, blocks_for(results, title, overall, robustness))
