"""The one report model: every audit's report is a list of blocks, written alike as Markdown, HTML
or JSON.

A block is ``(kind, value)``: ``h1``, ``h2``, ``p`` and ``pre`` carry text; ``table`` a header and
rows; ``bars``, ``lines`` and ``scatter`` a figure (:class:`Bars`, :class:`Lines`,
:class:`Scatter`). The verifier, engine, endpoint and traffic audits each build their blocks from
their result (their ``report`` modules) and nothing else: what a reader sees in the HTML, the
Markdown and the JSON is the same list, and every figure of it is a number of the audit's own JSON
(tests/test_report_model.py renders each kind and checks them against it).

Figures are drawn as inline SVG in HTML and as text in Markdown: the bars as rows of ``#``, a line
plot as a table of its points (at most :data:`TEXT_POINTS`), a scatter as the points furthest
from its diagonal. The format follows the file's ending (:func:`.outputs.report_format`).
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specproof.properties.outputs import atomic_write, report_format

Block = tuple[str, Any]

#: rows of a line plot's or scatter's text form in Markdown
TEXT_POINTS = 10
#: the most a line plot's y axis spans below its top (a statistic's part far below the others is
#: drawn at the floor: the plot is about the curves that rise)
LINES_SPAN = 10.0
#: the series colours of the SVG plots, in order
COLOURS = ("#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477", "#66aa00", "#b82e2e")


@dataclass
class Bars:
    """Counts (or rates) per label, optionally beside what was expected."""

    title: str
    labels: list[str]
    observed: Sequence[float]
    expected: Sequence[float] | None = None


@dataclass
class Lines:
    """Series over a common x (the token test's wealth over tokens, one series per statistic),
    with an optional horizontal threshold (the test's ``log10(1/alpha)``)."""

    title: str
    x_label: str
    y_label: str
    x: list[float]
    series: dict[str, list[float]]
    threshold: float | None = None
    threshold_label: str = ""


@dataclass
class Scatter:
    """Points ``(x, y)`` against the diagonal ``y = x`` (reported probabilities against the law's),
    with an optional band of half-width ``tolerance`` around it."""

    title: str
    x_label: str
    y_label: str
    points: list[tuple[float, float]] = field(default_factory=list)
    tolerance: float | None = None


FIGURES = {"bars": Bars, "lines": Lines, "scatter": Scatter}


# --------------------------------------------------------------------------- Markdown


def _inert(text: str) -> str:
    """``text`` with ``](`` escaped: a grammar such as ``[a-c]([d-f][a-c])*`` in a case's name
    would otherwise render as a link."""
    return text.replace("](", "]\\(")


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


def _thin(n: int, keep: int) -> list[int]:
    """``keep`` indices of ``range(n)`` spread evenly, the first and last among them."""
    if n <= keep:
        return list(range(n))
    return sorted({round(i * (n - 1) / (keep - 1)) for i in range(keep)})


def _lines_text(p: Lines) -> str:
    names = list(p.series)
    head = [p.x_label, *names]
    rows = [
        [f"{p.x[i]:,.0f}", *(f"{p.series[s][i]:.3g}" for s in names)] for i in _thin(len(p.x), TEXT_POINTS)
    ]
    note = f" ({p.threshold_label}: {p.threshold:.3g})" if p.threshold is not None else ""
    return "\n".join([f"**{p.title}**: {p.y_label}{note}", "", _table_text(head, rows)])


def _scatter_text(s: Scatter) -> str:
    far = sorted(s.points, key=lambda xy: -abs(xy[1] - xy[0]))[:TEXT_POINTS]
    head = [s.x_label, s.y_label, "difference"]
    rows = [[f"{x:.6g}", f"{y:.6g}", f"{y - x:+.3g}"] for x, y in far]
    band = "" if s.tolerance is None else f", tolerance {s.tolerance:.3g}"
    intro = f"**{s.title}**: {len(s.points)} points; the {len(far)} furthest from equal{band}:"
    return "\n".join([intro, "", _table_text(head, rows)])


def _table_text(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_inert(str(c)).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


#: each figure's text form (Markdown)
_TEXT: dict[str, Any] = {"bars": _bar_text, "lines": _lines_text, "scatter": _scatter_text}


def tidy(blocks: list[Block]) -> list[Block]:
    """The blocks as every format writes them: a table's columns that are empty in every row are
    left out (a report has no column that says nothing)."""
    out: list[Block] = []
    for kind, x in blocks:
        if kind == "table":
            head, rows = x
            keep = (
                [j for j in range(len(head)) if any(str(r[j]).strip() for r in rows)]
                if rows
                else list(range(len(head)))
            )
            x = ([head[j] for j in keep], [[r[j] for j in keep] for r in rows])
        out.append((kind, x))
    return out


def to_markdown(blocks: list[Block]) -> str:
    parts = []
    for kind, x in tidy(blocks):
        if kind == "h1":
            parts.append(f"# {x}")
        elif kind == "h2":
            parts.append(f"## {x}")
        elif kind == "p":
            parts.append(_inert(str(x)))
        elif kind == "pre":
            parts.append("```\n" + str(x).rstrip() + "\n```")
        elif kind == "table":
            parts.append(_table_text(*x))
        elif kind in FIGURES:
            parts.append(_TEXT[kind](x))
    return "\n\n".join(parts) + "\n"


# --------------------------------------------------------------------------- HTML


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


class _Frame:
    """A plot's axes: data coordinates to SVG pixels, with ticks written at the ends."""

    left, top, width, height = 70, 10, 520, 260

    def __init__(self, x0: float, x1: float, y0: float, y1: float) -> None:
        self.x0, self.x1 = x0, x1 if x1 > x0 else x0 + 1
        self.y0, self.y1 = y0, y1 if y1 > y0 else y0 + 1

    def px(self, x: float) -> float:
        return self.left + self.width * (x - self.x0) / (self.x1 - self.x0)

    def py(self, y: float) -> float:
        return self.top + self.height * (1 - (y - self.y0) / (self.y1 - self.y0))

    def axes(self, x_label: str, y_label: str) -> list[str]:
        l, t, w, h = self.left, self.top, self.width, self.height
        e = html.escape
        return [
            f'<rect x="{l}" y="{t}" width="{w}" height="{h}" fill="none" stroke="#888"/>',
            f'<text x="{l}" y="{t + h + 16}" font-size="11">{self.x0:.3g}</text>',
            f'<text x="{l + w}" y="{t + h + 16}" font-size="11" text-anchor="end">{self.x1:.3g}</text>',
            f'<text x="{l + w / 2}" y="{t + h + 30}" font-size="12" text-anchor="middle">{e(x_label)}</text>',
            f'<text x="{l - 4}" y="{t + h}" font-size="11" text-anchor="end">{self.y0:.3g}</text>',
            f'<text x="{l - 4}" y="{t + 10}" font-size="11" text-anchor="end">{self.y1:.3g}</text>',
            f'<text x="12" y="{t + h / 2}" font-size="12" text-anchor="middle" '
            f'transform="rotate(-90 12 {t + h / 2})">{e(y_label)}</text>',
        ]


def _svg(body: list[str], extra_width: int = 0) -> str:
    width = _Frame.left + _Frame.width + 20 + extra_width
    height = _Frame.top + _Frame.height + 40
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">'
        + "".join(body)
        + "</svg>"
    )


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _lines_svg(p: Lines) -> str:
    ys = [v for s in p.series.values() for v in _finite(s)]
    if p.threshold is not None:
        ys.append(p.threshold)
    top = max(ys, default=1.0)
    floor = max(min(ys, default=0.0), top - LINES_SPAN)  # a curve far below is drawn at the floor
    f = _Frame(min(p.x, default=0.0), max(p.x, default=1.0), floor, top)
    body = f.axes(p.x_label, p.y_label)
    if p.threshold is not None:
        y = f.py(p.threshold)
        body.append(
            f'<line x1="{f.left}" x2="{f.left + f.width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#000" '
            'stroke-dasharray="5,4"/>'
        )
        body.append(
            f'<text x="{f.left + 4}" y="{y + 13:.1f}" font-size="11">{html.escape(p.threshold_label)}</text>'
        )
    for k, (name, values) in enumerate(p.series.items()):
        colour = COLOURS[k % len(COLOURS)]
        pts = " ".join(
            f"{f.px(x):.1f},{f.py(max(y, floor)):.1f}" for x, y in zip(p.x, values) if not math.isnan(y)
        )
        body.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.6"/>')
        ly = f.top + 14 * (k + 1)
        lx, name = f.left + f.width + 8, html.escape(name)
        body.append(f'<text x="{lx}" y="{ly}" font-size="11" fill="{colour}">{name}</text>')
    return f"<h3>{html.escape(p.title)}</h3>" + _svg(body, extra_width=150)


def _scatter_svg(s: Scatter) -> str:
    f = _Frame(0.0, 1.0, 0.0, 1.0)
    body = f.axes(s.x_label, s.y_label)
    body.append(f'<line x1="{f.px(0)}" y1="{f.py(0)}" x2="{f.px(1)}" y2="{f.py(1)}" stroke="#888"/>')
    if s.tolerance is not None and s.tolerance > 0:
        t = s.tolerance
        corners = ((0, t), (1 - t, 1), (1, 1), (1, 1 - t), (t, 0), (0, 0))
        band = " ".join(f"{f.px(x):.1f},{f.py(y):.1f}" for x, y in corners)
        body.append(f'<polygon points="{band}" fill="#cccccc" fill-opacity="0.5"/>')
    for x, y in s.points:
        colour = "#dc3912" if s.tolerance is not None and abs(y - x) > s.tolerance else "#3366cc"
        body.append(f'<circle cx="{f.px(x):.1f}" cy="{f.py(y):.1f}" r="2.5" fill="{colour}"/>')
    legend = " (grey: the tolerance around equal; red: outside it)" if s.tolerance is not None else ""
    return f"<h3>{html.escape(s.title)}{legend}</h3>" + _svg(body)


#: each figure's drawing (inline SVG)
_SVG: dict[str, Any] = {"bars": _bar_svg, "lines": _lines_svg, "scatter": _scatter_svg}


def to_html(blocks: list[Block]) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>specproof audit</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px}</style></head><body>",
    ]
    for kind, x in tidy(blocks):
        if kind in ("h1", "h2"):
            parts.append(f"<{kind}>{html.escape(str(x))}</{kind}>")
        elif kind == "p":
            text = html.escape(str(x))
            if text.startswith("**") and text.endswith("**"):
                text = f"<strong>{text[2:-2]}</strong>"
            parts.append(f"<p>{text}</p>")
        elif kind == "pre":
            parts.append(f"<pre>{html.escape(str(x))}</pre>")
        elif kind == "table":
            head, rows = x
            parts.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>")
            for row in rows:
                cells = "".join(f"<td>{html.escape(str(c).replace('**', ''))}</td>" for c in row)
                parts.append(f"<tr>{cells}</tr>")
            parts.append("</table>")
        elif kind in FIGURES:
            parts.append(_SVG[kind](x))
    parts.append("</body></html>")
    return "\n".join(parts)


# --------------------------------------------------------------------------- JSON


def _plain(value: Any) -> Any:
    """A JSON value: infinities and NaN as strings (JSON has none), tuples as lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_json(blocks: list[Block]) -> dict[str, Any]:
    """The blocks as one JSON document: ``{"blocks": [{"kind": ..., ...}, ...]}``; a figure's
    fields as its dataclass names them, a table as ``head`` and ``rows``, text as ``text``."""
    out = []
    for kind, x in tidy(blocks):
        if kind == "table":
            head, rows = x
            out.append({"kind": kind, "head": list(head), "rows": [[str(c) for c in r] for r in rows]})
        elif kind in FIGURES:
            out.append({"kind": kind, **_plain(dataclasses.asdict(x))})
        else:
            out.append({"kind": kind, "text": str(x)})
    return {"blocks": out}


def _number(value: Any) -> Any:
    """A JSON value back to floats where :func:`_plain` wrote an infinity or NaN as a string."""
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    if isinstance(value, list):
        return [_number(v) for v in value]
    if isinstance(value, dict):
        return {k: _number(v) for k, v in value.items()}
    return value


def from_json(doc: dict[str, Any]) -> list[Block]:
    """The blocks of a report written as JSON (:func:`to_json`), to render it again in another
    format: ``to_json(from_json(doc)) == doc``."""
    out: list[Block] = []
    for b in doc["blocks"]:
        kind = b["kind"]
        if kind == "table":
            out.append((kind, (b["head"], b["rows"])))
        elif kind in FIGURES:
            fields = {k: _number(v) for k, v in b.items() if k != "kind"}
            if kind == "scatter":
                fields["points"] = [tuple(p) for p in fields["points"]]
            out.append((kind, FIGURES[kind](**fields)))
        else:
            out.append((kind, b["text"]))
    return out


def render(blocks: list[Block], fmt: str) -> str:
    """``blocks`` as ``"markdown"``, ``"html"`` or ``"json"``."""
    if fmt == "html":
        return to_html(blocks)
    if fmt == "json":
        return json.dumps(to_json(blocks), indent=2) + "\n"
    return to_markdown(blocks)


def write_blocks(path: str, blocks: list[Block]) -> None:
    """Render ``blocks`` in the format the file's ending names (:func:`.outputs.report_format`;
    another ending is a usage error) and write them atomically."""
    atomic_write(path, render(blocks, report_format(path)))
