"""The report pages as a real browser draws them: Debian's Chromium, headless.

scripts/report_gallery.py's audits (one of each kind at each verdict it can reach, the render
test's: tests/test_report_model.py) are written as HTML and opened in Chromium twice: its DOM
once parsed (``--dump-dom``) and a screenshot. In the browser's DOM every table cell of the
report's JSON is there, there is one ``<svg>`` per figure, and each figure's marks are the
JSON's numbers: one polyline per series of the wealth plot whose points map back to the tokens
and wealths of ``token_test.trace``, one blue bar per cell of a histogram whose width is its
count's share of the largest, one dot per compared probability of the scatter (red where the
JSON's tolerance says it is outside). In the screenshot the figures are drawn: the page has the
histogram's and the scatter's blue where the JSON has them.

It needs Debian's ``chromium`` (``.ci/run``'s browser tier installs it, then runs this file
apart with ``SPECPROOF_TIER_REQUIRED=1``: without the browser it fails there, and elsewhere it
skips, saying so).
"""

from __future__ import annotations

import json
import math
import shutil
import struct
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from tier_helpers import tier_marks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import report_gallery  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = tier_marks(
    __file__, CHROMIUM is not None, "Debian's chromium is not installed (apt-get install chromium)"
)
#: the kinds and the verdicts each reaches (a verifier reports no probabilities; traffic neither)
PAGES = [*report_gallery.RECIPES, *report_gallery.ENDPOINT, *report_gallery.TRAFFIC]
BLUE = (0x33, 0x66, 0xCC)


class _Dom(HTMLParser):
    """What the checks read of a dumped DOM: the text of every cell, and each svg's marks."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self.svgs: list[list[tuple[str, dict[str, str]]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "svg":
            self.svgs.append([])
        elif self.svgs and tag in ("polyline", "rect", "circle"):
            self.svgs[-1].append((tag, {k: v or "" for k, v in attrs}))
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _pixels(png: Path) -> tuple[int, int, int, bytes]:
    """A PNG screenshot's width, height, bytes per pixel and unfiltered rows (8-bit RGB or RGBA,
    not interlaced: what Chromium writes)."""
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, head = 8, b"", b""
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            head = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", head)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw, stride, out = zlib.decompress(idat), w * bpp, bytearray()
    prev = bytearray(stride)
    for y in range(h):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line
        prev = line
    return w, h, bpp, bytes(out)


def _count(png: Path, rgb: tuple[int, int, int]) -> int:
    w, h, bpp, px = _pixels(png)
    return sum(1 for k in range(0, len(px), bpp) if tuple(px[k : k + 3]) == rgb)


def _check_lines(fig: dict, marks: list[tuple[str, dict[str, str]]]) -> None:
    """Each series' polyline, its points mapped back through the plot's frame, is the JSON's."""
    lines = [a for tag, a in marks if tag == "polyline"]
    assert len(lines) == len(fig["series"]), (fig["title"], len(lines))
    xs = [float(x) for x in fig["x"]]
    values = {k: [float(v) for v in vs] for k, vs in fig["series"].items()}
    finite = [v for vs in values.values() for v in vs if math.isfinite(v)] + [float(fig["threshold"])]
    top = max(finite)
    floor = max(min(finite), top - report_gallery.report_model.LINES_SPAN)
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    f = report_gallery.report_model._Frame
    for line, vs in zip(lines, values.values()):
        pts = [tuple(map(float, p.split(","))) for p in line["points"].split()]
        kept = [(x, v) for x, v in zip(xs, vs) if not math.isnan(v)]
        assert len(pts) == len(kept), fig["title"]
        for (px, py), (x, v) in zip(pts, kept):
            assert abs(x0 + (px - f.left) / f.width * (x1 - x0) - x) <= 0.06 / f.width * (x1 - x0) + 1e-9
            y = max(v, floor)
            back = top - (py - f.top) / f.height * (top - floor)
            assert abs(back - y) <= 0.06 / f.height * (top - floor) + 1e-9, (fig["title"], back, y)


def _check_bars(fig: dict, marks: list[tuple[str, dict[str, str]]]) -> None:
    """One blue bar per cell, its width the count's share of the largest of 360 px."""
    blue = [a for tag, a in marks if tag == "rect" and a.get("fill") == "#3366cc"]
    grey = [a for tag, a in marks if tag == "rect" and a.get("fill") == "#bbbbbb"]
    observed, expected = fig["observed"], fig.get("expected")
    assert len(blue) == len(observed) and len(grey) == len(expected or ()), fig["title"]
    top = max([*observed, *(expected or [])], default=1) or 1
    for bar, count in zip(blue, observed):
        assert abs(float(bar["width"]) - 360 * count / top) <= 0.051, (fig["title"], bar, count)


def _check_scatter(fig: dict, marks: list[tuple[str, dict[str, str]]]) -> None:
    dots = [a for tag, a in marks if tag == "circle"]
    assert len(dots) == len(fig["points"]), fig["title"]
    tol = fig.get("tolerance")
    red = sum(1 for x, y in fig["points"] if tol is not None and abs(y - x) > tol)
    assert sum(1 for d in dots if d["fill"] == "#dc3912") == red, fig["title"]


CHECKS = {"lines": _check_lines, "bars": _check_bars, "scatter": _check_scatter}


@pytest.fixture(scope="module")
def gallery(tmp_path_factory):
    out = tmp_path_factory.mktemp("gallery")
    assert report_gallery.main_gallery([str(out), "--no-screenshots"]) == 0
    return out


@pytest.mark.parametrize("name", PAGES)
def test_the_page_chromium_draws_holds_the_reports_json(gallery, name):
    page, report = gallery / f"{name}.html", json.loads((gallery / f"{name}.json").read_text())
    dom = _Dom()
    dom.feed(report_gallery.dump_dom(page, CHROMIUM))
    blocks = report["blocks"]
    cells = {" ".join(c.replace("**", "").split()) for c in dom.cells}
    for b in blocks:
        if b["kind"] == "table":
            for cell in [*b["head"], *(c for row in b["rows"] for c in row)]:
                assert " ".join(cell.replace("**", "").split()) in cells, (name, cell)
    figures = [b for b in blocks if b["kind"] in CHECKS]
    assert len(dom.svgs) == len(figures), (name, len(dom.svgs), len(figures))
    for fig, marks in zip(figures, dom.svgs):
        CHECKS[fig["kind"]](fig, marks)
    png = gallery / f"{name}.png"
    report_gallery.screenshot(page, png, CHROMIUM)
    drawn = _count(png, BLUE)
    if any(b["kind"] in ("bars", "scatter") for b in figures):
        assert drawn > 200, (name, drawn)  # the bars' and dots' blue on the page
    w, h, _, _ = _pixels(png)
    assert (w, h) == (1200, 3000)
