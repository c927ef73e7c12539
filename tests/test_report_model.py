"""The one report model (properties/report_model.py), rendered for every kind of audit.

For the verifier, engine, endpoint and traffic audits, one audit of each verdict the kind can
reach (pass, lossy, underpowered; misreported for the engine audit, on an engine that reports
the draft model's probability for its accepted drafts, and for the endpoint audit, whose stand-in
reports probabilities; the recipes are scripts/report_gallery.py's, whose screenshots
docs/reports.md shows) is run through the
command line with ``--json`` and ``--report x.json``, and the report's blocks are written in the
other two formats. Then:

* the three renderings are the same list: every table cell and figure title of the JSON report is
  in the Markdown and the HTML, and the HTML draws every figure as SVG;
* the report leads with the audit's verdict (the one its JSON gives), and what ran short comes
  before the power;
* each figure is a number of the audit's own JSON: the wealth over tokens is its
  ``token_test.trace``, the transform histogram is the pit of the case whose wealth is largest,
  the scatter is the reports check's pairs.

Where the kind cannot reach a verdict (a verifier reports no probabilities: no ``misreported``),
the table of recipes says so by leaving it out.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

import pytest

from specproof.properties import report_model
from specproof.properties.cli import main
from specproof.properties.endpoint.standin import StandIn
from specproof.properties.verdicts import USAGE_ERROR

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
#: the audits of scripts/report_gallery.py (its screenshots are docs/reports/): the command's
#: arguments by kind and verdict
from report_gallery import ENDPOINT, RECIPES, TRAFFIC, endpoint_args, traffic_file  # noqa: E402

VERIFIER = {k.split("-", 1)[1]: v for k, v in RECIPES.items() if k.startswith("verifier-")}
ENGINE = {k.split("-", 1)[1]: v for k, v in RECIPES.items() if k.startswith("engine-")}


def _run(tmp_path, name: str, argv: list[str]) -> tuple[dict, dict[str, str]]:
    """One run of the audit, its JSON and its report as JSON; the Markdown and HTML rendered from
    that report's blocks (:func:`.report_model.from_json`), as the command writes them from its
    own: the same run, so the same numbers, clock readings included."""
    audit_json, report = tmp_path / f"{name}.audit.json", tmp_path / f"{name}.report.json"
    code = main(["audit", *argv, "--progress", "off", "--json", str(audit_json), "--report", str(report)])
    assert code != USAGE_ERROR, argv
    doc, text = json.loads(audit_json.read_text()), report.read_text()
    blocks = report_model.from_json(json.loads(text))
    assert report_model.to_json(blocks) == json.loads(text)
    return doc, {"json": text, "md": report_model.to_markdown(blocks), "html": report_model.to_html(blocks)}


def _endpoint_run(tmp_path, name: str) -> tuple[dict, dict[str, str]]:
    bug, options = ENDPOINT[name]
    with StandIn(bug, loop="laws") as si:
        return _run(tmp_path, name, endpoint_args(si.url, options))


def _traffic_run(tmp_path, name: str) -> tuple[dict, dict[str, str]]:
    bug, n, tv = TRAFFIC[name]
    path = traffic_file(tmp_path, bug, n)
    with StandIn(speculative=False, loop="laws") as twin:
        return _run(tmp_path, name, ["traffic", path, "--twin", twin.url, "--tv", tv])


def _check_renderings(doc: dict, reports: dict[str, str]) -> list[dict]:
    """The three renderings carry the same blocks; the report leads with the audit's verdict."""
    blocks = json.loads(reports["json"])["blocks"]
    md, page = reports["md"], reports["html"]
    for b in blocks:
        if b["kind"] == "table":
            for cell in [*b["head"], *(c for row in b["rows"] for c in row)]:
                plain = cell.replace("**", "")
                assert plain in md.replace("\\|", "|").replace("]\\(", "]("), (cell, b["head"])
                assert html.escape(plain) in page, (cell, b["head"])
        elif b["kind"] in ("bars", "lines", "scatter"):
            assert b["title"] in md and html.escape(b["title"]) in page, b["title"]
        elif b["kind"] == "p":
            assert html.escape(b["text"].replace("**", "")) in page.replace("<strong>", "").replace(
                "</strong>", ""
            )
    figures = sum(b["kind"] in ("bars", "lines", "scatter") for b in blocks)
    assert page.count("<svg") == figures
    assert doc["verdict"].lower() in _lead(blocks).lower(), (doc["verdict"], _lead(blocks))
    return blocks


def _lead(blocks: list[dict]) -> str:
    """The first thing the report says after its title."""
    for b in blocks[1:]:
        if b["kind"] == "p":
            return b["text"]
        if b["kind"] == "table":
            return " ".join(c for row in b["rows"] for c in row)
    return ""


def _figure(blocks: list[dict], kind: str, title: str) -> dict | None:
    return next((b for b in blocks if b["kind"] == kind and b["title"].startswith(title)), None)


def _check_token_figures(blocks: list[dict], token_test: dict, cases: dict[str, dict]) -> None:
    """The wealth plot is the JSON's trace; the histogram is the pit of the largest-wealth case."""
    tr = token_test["trace"]
    lines = _figure(blocks, "lines", "The token test's wealth over tokens")
    if len(tr["tokens"]) > 1:
        assert lines is not None
        assert lines["x"] == [float(t) for t in tr["tokens"]]
        assert lines["series"]["audit"] == tr["audit"] and lines["threshold"] == tr["threshold"]
        for name, values in tr["statistics"].items():
            assert lines["series"][name] == [str(v) if v == float("-inf") else v for v in values]
    with_pit = {k: c for k, c in cases.items() if sum(c.get("pit") or ())}
    bars = _figure(blocks, "bars", "Transforms of ")
    assert (bars is not None) == bool(with_pit)
    if with_pit:
        lead = max(with_pit.values(), key=lambda c: c["log_wealth"])
        assert bars["observed"] == lead["pit"]
        assert bars["expected"] == [sum(lead["pit"]) / len(lead["pit"])] * len(lead["pit"])


@pytest.mark.parametrize("verdict", list(VERIFIER))
def test_the_verifier_report(tmp_path, verdict):
    doc, reports = _run(tmp_path, f"verifier-{verdict}", VERIFIER[verdict])
    assert doc["verdict"] == verdict
    blocks = _check_renderings(doc, reports)
    if verdict == "lossy":
        assert any(b["kind"] == "bars" for b in blocks)  # the witness's cells, observed against expected


@pytest.mark.parametrize("verdict", list(ENGINE))
def test_the_engine_report(tmp_path, verdict):
    doc, reports = _run(tmp_path, f"engine-{verdict}", ENGINE[verdict])
    assert doc["verdict"] == verdict
    blocks = _check_renderings(doc, reports)
    if verdict == "underpowered":
        text = [b.get("text", "") for b in blocks]
        short = next(i for i, t in enumerate(text) if t == "Ran short of the plan")
        power = next(i for i, t in enumerate(text) if t.startswith("Power"))
        assert short < power  # what did not run is said first
    _check_token_figures(blocks, doc["token_test"], doc["token_test"]["cases"])
    if verdict == "misreported":  # as the endpoint's: the reports check's pairs, the finding drawn red
        _check_scatter(blocks, doc, reports, verdict)


@pytest.mark.parametrize("verdict", [k.split("-", 1)[1] for k in ENDPOINT])
def test_the_endpoint_report(tmp_path, verdict):
    doc, reports = _endpoint_run(tmp_path, f"endpoint-{verdict}")
    assert doc["verdict"] == verdict
    blocks = _check_renderings(doc, reports)
    _check_token_figures(blocks, doc["token_test"], doc["token_test"]["cases"])
    _check_scatter(blocks, doc, reports, verdict)


def _check_scatter(blocks: list[dict], doc: dict, reports: dict[str, str], verdict: str) -> None:
    """The scatter is the reports check's pairs, at its tolerance; for a misreported audit the
    points off the diagonal are the finding, drawn red."""
    scatter = _figure(blocks, "scatter", "Reported probability against the law's")
    pairs = doc["reports"]["pairs"]
    assert pairs, "the audited engine reports probabilities: the check compared some"
    assert scatter is not None and scatter["points"] == pairs
    assert scatter["tolerance"] == doc["reports"]["tolerance"]
    if verdict == "misreported":
        assert any(abs(y - x) > scatter["tolerance"] for x, y in scatter["points"])
        assert 'fill="#dc3912"' in reports["html"]


@pytest.mark.parametrize("verdict", [k.split("-", 1)[1] for k in TRAFFIC])
def test_the_traffic_report(tmp_path, verdict):
    doc, reports = _traffic_run(tmp_path, f"traffic-{verdict}")
    assert doc["verdict"] == verdict
    blocks = _check_renderings(doc, reports)
    cases = {s["setting"]: s for s in doc["settings"]}
    _check_token_figures(blocks, doc["token_test"], cases)
    table = next(b for b in blocks if b["kind"] == "table")
    assert [r[0] for r in table["rows"]] == [s["setting"] for s in doc["settings"]]
    assert [r[2] for r in table["rows"]] == [f"{s['tokens']:,}" for s in doc["settings"]]
    if verdict == "lossy":
        witness = blocks[[b.get("text") for b in blocks].index("Witness") + 1]["text"]
        assert witness.startswith(doc["finding"]["text"]) and doc["finding"]["direction"] in witness
    if verdict == "underpowered":
        assert re.search(r"of [\d,]+ tokens", reports["md"])


def test_the_acceptance_at_each_place_of_an_axis_is_drawn_from_the_json(tmp_path):
    """A load axis on the stand-in (it reports its counters, declares no rule): the bars are each
    pair's base share and share, as the JSON's ``axis_acceptance.pairs`` has them."""
    with StandIn(None, loop="laws") as si:
        argv = endpoint_args(si.url, ["--load", "1", "--load", "4", "--samples", "64"])
        doc, reports = _run(tmp_path, "endpoint-load", argv)
    blocks = _check_renderings(doc, reports)
    pairs = doc["axis_acceptance"]["pairs"]
    assert pairs, doc["axis_acceptance"]
    bars = _figure(blocks, "bars", "Accepted share of the drafts at each place of the axis")
    assert bars is not None
    assert bars["observed"] == [round(v, 4) for p in pairs for v in (p["base_share"], p["share"])]
    assert bars["labels"] == [f"{p[k]} ({p['case']})" for p in pairs for k in ("base", "where")]
