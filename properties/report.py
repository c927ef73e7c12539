"""Audit reports a person can act on: Markdown (text bar plots) or HTML (inline SVG plots).

A report holds the verdict of every audited backend, and for each flagged one: the witness
case, its most deviating cells observed against expected, and the emitted-length histogram.
The format follows the file name: ``.html``/``.htm`` for HTML, anything else Markdown.
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .audit import PASS, AuditResult, CaseResult

Block = tuple[str, Any]


@dataclass
class Bars:
    title: str
    labels: list[str]
    observed: Sequence[float]
    expected: Sequence[float] | None = None


def _case_table(result: AuditResult) -> Block:
    rows = []
    for r in result.cases:
        tv = "" if r.tv is None else f"{r.tv.estimate:.4f} [{r.tv.low:.4f}, {r.tv.high:.4f}]"
        rows.append(
            [
                r.case.name,
                str(r.n),
                str(r.cells),
                f"{r.unresolved:.3f}",
                "0 (hard failure)" if r.hard_failure else f"{r.pvalue:.3g}",
                f"{r.power:.3f}",
                f"{r.detectable_tv:.4f}",
                tv,
                "**rejected**" if r.rejected else "",
                "budget" if r.budget_limited else "",
            ]
        )
    return (
        "table",
        (
            [
                "case",
                "steps",
                "cells",
                "unresolved",
                "p",
                f"power at TV {result.config.tv:g}",
                f"TV detected at power {result.config.power:g}",
                "TV on cells (95%)",
                "",
                "limited",
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
                f"p = {w.pvalue:.3g} (chi-square {w.p_chi2:.3g}, exact cells {w.p_cells:.3g}) "
                f"on {w.n} steps over {w.cells} cells.",
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
    L = w.lengths
    blocks.append(("bars", Bars("Emitted tokens per step", [str(i) for i in range(1, len(L))], L[1:])))
    return blocks


def blocks_for(results: list[AuditResult], title: str) -> list[Block]:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out: list[Block] = [("h1", title), ("p", f"Generated {now}.")]
    if results:
        c = results[0].config
        out.append(
            (
                "p",
                f"Family-wise alpha {c.alpha:g} per backend (Holm over its cases); planned for TV "
                f"{c.tv:g} at power {c.power:g}; seed {c.seed}; budget {c.budget_seconds:g} s per backend.",
            )
        )
    rows = []
    for r in results:
        agrees = "" if r.expected is None else ("yes" if r.expected == r.verdict else "**NO**")
        powers = [c.power for c in r.cases]
        det = [c.detectable_tv for c in r.cases if not c.case.sparse]
        rows.append(
            [
                r.backend,
                r.kind,
                ", ".join(r.processes),
                r.expected or "",
                r.verdict,
                agrees,
                f"{min(powers):.3f}" if powers else "",
                f"{max(det):.4f}" if det else "",
                str(sum(c.n for c in r.cases)),
                f"{r.seconds:.1f}",
            ]
        )
    out.append(
        (
            "table",
            (
                [
                    "backend",
                    "kind",
                    "processes",
                    "expected",
                    "verdict",
                    "agrees",
                    "min power",
                    "max TV detected (dense V)",
                    "steps",
                    "s",
                ],
                rows,
            ),
        )
    )
    for r in results:
        if r.verdict == PASS and len(results) > 1:
            continue
        out.append(("h2", f"{r.backend} ({r.kind}): {r.verdict}"))
        if r.violation:
            v = r.violation
            out.append(
                (
                    "p",
                    f"Contract violation [{v['kind']}] in case {v['case']} during {v['during']}: "
                    f"{v['detail']}",
                )
            )
            continue
        w = r.witness
        if r.shrunk is not None:
            out.append(("p", "Shrunk witness (a smaller case, still rejected at alpha / cases / 64):"))
            out.extend(_witness_blocks(r.shrunk))
            out.append(("p", "The case first rejected:"))
        if w is not None:
            out.extend(_witness_blocks(w))
        elif r.cases:
            closest = min(r.cases, key=lambda c: c.pvalue)
            out.append(("p", "No case rejected. The case closest to a rejection:"))
            out.extend(_witness_blocks(closest)[1:])
        out.append(_case_table(r))
    return out


def _bar_text(b: Bars) -> str:
    top = max([*b.observed, *(b.expected or [])], default=1) or 1
    width = 40
    lines = [f"**{b.title}**", "", "```"]
    lab = max((len(x) for x in b.labels), default=1)
    for i, label in enumerate(b.labels):
        o = b.observed[i]
        lines.append(f"{label:>{lab}} obs {'#' * round(width * o / top):<{width}} {o:g}")
        if b.expected is not None:
            e = b.expected[i]
            lines.append(f"{'':>{lab}} exp {'.' * round(width * e / top):<{width}} {e:.1f}")
    lines.append("```")
    return "\n".join(lines)


def to_markdown(blocks: list[Block]) -> str:
    parts = []
    for kind, x in blocks:
        if kind == "h1":
            parts.append(f"# {x}")
        elif kind == "h2":
            parts.append(f"## {x}")
        elif kind == "p":
            parts.append(str(x))
        elif kind == "table":
            head, rows = x
            lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
            parts.append("\n".join(lines))
        elif kind == "bars":
            parts.append(_bar_text(x))
    return "\n\n".join(parts) + "\n"


def _bar_svg(b: Bars) -> str:
    top = max([*b.observed, *(b.expected or [])], default=1) or 1
    row_h, left, width = 22, 180, 360
    h = row_h * len(b.labels) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" height="{h}">']
    for i, label in enumerate(b.labels):
        y = 5 + i * row_h
        o = b.observed[i]
        out.append(
            f'<text x="{left - 6}" y="{y + 14}" text-anchor="end" font-size="12">{html.escape(label)}</text>'
        )
        out.append(f'<rect x="{left}" y="{y + 2}" width="{width * o / top:.1f}" height="9" fill="#3366cc"/>')
        if b.expected is not None:
            e = b.expected[i]
            out.append(
                f'<rect x="{left}" y="{y + 11}" width="{width * e / top:.1f}" height="9" fill="#bbbbbb"/>'
            )
        out.append(
            f'<text x="{left + width + 6}" y="{y + 14}" font-size="12">{o:g}'
            + ("" if b.expected is None else f" / {b.expected[i]:.1f}")
            + "</text>"
        )
    out.append("</svg>")
    legend = "" if b.expected is None else " (blue: observed; grey: expected)"
    return f"<h3>{html.escape(b.title)}{legend}</h3>" + "".join(out)


def to_html(blocks: list[Block]) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>specproof audit</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px}</style></head><body>",
    ]
    for kind, x in blocks:
        if kind in ("h1", "h2"):
            parts.append(f"<{kind}>{html.escape(str(x))}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{html.escape(str(x))}</p>")
        elif kind == "table":
            head, rows = x
            parts.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>")
            for row in rows:
                parts.append(
                    "<tr>"
                    + "".join(f"<td>{html.escape(str(c).replace('**', ''))}</td>" for c in row)
                    + "</tr>"
                )
            parts.append("</table>")
        elif kind == "bars":
            parts.append(_bar_svg(x))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(path: str, results: list[AuditResult], title: str = "specproof audit") -> None:
    blocks = blocks_for(results, title)
    text = to_html(blocks) if path.lower().endswith((".html", ".htm")) else to_markdown(blocks)
    with open(path, "w") as f:
        f.write(text)
