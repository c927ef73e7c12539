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
    """Blocks for :mod:`.report`'s Markdown and HTML writers."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out: list[Any] = [("h1", title), ("p", f"Generated {now}.")]
    if results:
        cfg = results[0].config
        out.append(
            (
                "p",
                f"Family-wise alpha {cfg.alpha:g} per engine (Holm over its cases, Bonferroni over "
                f"{cfg.looks} looks); planned for TV {cfg.tv:g} at power {cfg.power:g} on up to "
                f"{cfg.max_cells} cells; seed {cfg.seed}; budget {cfg.budget_seconds:g} s per engine.",
            )
        )
    rows = []
    for r in results:
        agrees = "" if r.agrees is None else ("yes" if r.agrees else "**NO**")
        det = [c.detectable_tv for c in r.cases if c.n]
        rows.append(
            [
                r.engine,
                r.expected or "",
                r.verdict.value,
                agrees,
                str(r.samples),
                f"{max(det):.3f}" if det and r.verdict != Verdict.CONTRACT_VIOLATION else "",
                f"{1000 * r.per_sample_seconds:.1f}",
                f"{r.seconds:.1f}",
                r.short_witness(),
            ]
        )
    head = [
        "engine",
        "expected",
        "verdict",
        "agrees",
        "samples",
        "TV detected (worst case)",
        "ms/sample",
        "s",
    ]
    out.append(("table", ([*head, "witness"], rows)))
    for r in results:
        if r.verdict == Verdict.PASS and len(results) > 1:
            continue
        out.append(("h2", f"{r.engine}: {r.verdict.value}"))
        out.append(("p", r.doc))
        if r.cases:
            planned = sum(c.planned for c in r.cases)
            out.append(
                (
                    "p",
                    f"Plan: {planned:,} samples over {len(r.cases)} cases (M = {r.tokens}, V = {r.vocab}); "
                    f"drawn: {r.samples:,} at {1000 * r.per_sample_seconds:.1f} ms per sample.",
                )
            )
        if r.violation:
            v = r.violation
            out.append(("p", f"Contract violation [{v['kind']}] in {v['case']}: {v['detail']}"))
            continue
        w = r.witness or (min(r.cases, key=lambda c: c.pvalue) if r.cases else None)
        if w is not None:
            label = "Witness" if r.witness else "No case rejected; the closest"
            out.append(
                ("p", f"{label}: {w.case.name}." + (f" {w.hard_failure['detail']}" if w.hard_failure else ""))
            )
            t = w.test
            if t is not None and not w.hard_failure:
                out.append(("p", t.summary()))
                pos = t.conditional.witness() if t.conditional else None
                if pos is not None and pos.worst is not None:
                    g = pos.worst
                    out.append(
                        (
                            "bars",
                            Bars(
                                f"Next token at position {pos.position} after {g.label}: "
                                "observed vs expected",
                                list(g.labels),
                                list(g.observed),
                                list(g.expected),
                            ),
                        )
                    )
        rows = []
        for c in r.cases:
            rows.append(
                [
                    c.case.name,
                    str(c.planned),
                    str(c.n),
                    "0 (hard failure)" if c.hard_failure else f"{c.pvalue:.3g}",
                    f"{c.detectable_tv:.3f}",
                    "" if c.test is None else f"{c.test.unresolved:.3f}",
                    "" if c.test is None else f"{c.test.uncovered:.3f}",
                    _forwards(c.forwards),
                    "**rejected**" if c.rejected else "",
                    "budget" if c.budget_limited else "",
                ]
            )
        out.append(
            (
                "table",
                (
                    [
                        "case",
                        "planned",
                        "samples",
                        "p",
                        f"TV detected at power {r.config.power:g}",
                        "unresolved",
                        "uncovered",
                        "target forwards per call",
                        "",
                        "limited",
                    ],
                    rows,
                ),
            )
        )
    return out


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
