"""The findings as pages a maintainer can act on, and their reproduction re-run here.

Each page under docs/findings/ starts with a part written from :data:`.findings.FINDINGS` and the
measurement JSON it names (the engine and version, the source lines, how to reproduce it, the
evidence table, the tests), between :data:`BEGIN` and :data:`END`; below it the page is prose
(what happens, the cause, the fix). :func:`write_pages` rewrites the written part of every page
and the index; :func:`stale_pages` says which pages differ from what it would write (a test
keeps them equal). :func:`reproduce` runs a finding's tests against the engine installed here
and says whether the finding still holds.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specproof.properties.measure.findings import CHECKED, FINDINGS, Finding, Where
from specproof.reference.errors import InternalError, NotFoundError, UsageError

#: the repository's root (the findings' tests and pages are paths below it)
ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "docs" / "findings"
MEASUREMENTS = ROOT / "docs" / "measurements"
BEGIN = (
    "<!-- written by `specproof findings pages` from properties/measure/findings.py and the JSON it names -->"
)
END = "<!-- end of the written part; what follows is prose -->"


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    for key in ("results", "audits", "rows"):
        if key in data:
            return list(data[key])
    raise UsageError(f"the measurement holds no audits (its keys: {sorted(data)})")


def _name(row: dict[str, Any]) -> str:
    return str(row.get("engine") or row.get("backend"))


def _witness(row: dict[str, Any]) -> str:
    for key in ("witness_text", "witness", "short_witness"):
        if row.get(key):
            return str(row[key])
    v = row.get("violation")
    if isinstance(v, dict):
        return f"[{v.get('kind')}] {v.get('detail')}"
    return ""


def _versions(data: dict[str, Any]) -> str:
    v = data.get("versions") or {}
    keep = {k: x for k, x in v.items() if x and x != "not installed" and k not in ("machine",)}
    parts = [f"{k} {x}" for k, x in keep.items()]
    if data.get("date"):
        parts.insert(0, f"run {data['date']}")
    return ", ".join(parts)


def evidence(finding: Finding) -> list[str]:
    """The evidence table of ``finding``: its rows of each measurement file, in the file's order."""
    out: list[str] = []
    for ev in finding.evidence:
        data = json.loads((MEASUREMENTS / ev.json).read_text())
        rows = [r for r in _rows(data) if _name(r) in ev.rows]
        missing = sorted(set(ev.rows) - {_name(r) for r in rows})
        if missing:
            raise NotFoundError(f"finding {finding.slug}: {ev.json} has no audit named {', '.join(missing)}")
        versions = _versions(data)
        out.append(
            f"From [{ev.json}](../measurements/{ev.json}) (its command: "
            f"[docs/measurements/README.md](../measurements/README.md)"
            + (f"; {versions}" if versions else "")
            + "):"
        )
        out += [
            "",
            "| audit | verdict | declared | samples | seconds | witness |",
            "|---|---|---|---:|---:|---|",
        ]
        for r in rows:
            seconds = r.get("seconds")
            out.append(
                f"| `{_cell(_name(r))}` | `{r.get('verdict')}` | {_cell(r.get('expected') or '')} "
                f"| {r.get('samples') if r.get('samples') is not None else ''} "
                f"| {'' if seconds is None else f'{float(seconds):.1f}'} | {_cell(_witness(r))} |"
            )
        out.append("")
    return out


def _where(finding: Finding) -> str:
    if not finding.where:
        return "read in the behaviour (see the cause below)"
    places = "; ".join(f"`{w.path}:{w.line}` ({w.symbol})" for w in finding.where)
    read_at = {w.read_at for w in finding.where if w.read_at}
    return places + "".join(f"; read at {r}" for r in sorted(read_at))


def written_part(finding: Finding) -> str:
    """The part of ``finding``'s page written from the table and the JSON."""
    newest = (
        f"{finding.newest} (the pinned release), looked up {CHECKED}"
        if finding.newest in finding.version
        else f"{finding.newest}, looked up {CHECKED}: {finding.on_newest}"
    )
    lines = [
        f"# {finding.title}",
        "",
        BEGIN,
        "",
        "| | |",
        "|---|---|",
        f"| engine | {finding.system}: `{finding.package}` {finding.version}"
        + (f", source at {finding.commit}" if finding.commit else "")
        + " |",
        f"| newest release on the registry | {newest} |",
        f"| what the audit says | {finding.verdict} |",
        f"| where | {_where(finding)} |",
        f"| upstream | {finding.upstream} |",
        f"| reproduce | `specproof findings reproduce {finding.slug}` (runs the tests below against the "
        f"installed engine; needs {finding.needs})"
        + "".join(f"; without specproof: [repro/{s}](repro/{s})" for s in finding.scripts)
        + " |",
    ]
    lines.append(f"| reproduced here | {_reproduced(finding)} |")
    if finding.command:
        lines.append(f"| the audit | `{finding.command}` |")
    if finding.patch:
        lines.append(f"| the project's fix | `{finding.patch}` |")
    lines.append(
        f"| the reasoning | [proofs_notes/thirdparty.md](../../proofs_notes/thirdparty.md#{finding.note}) |"
    )
    lines += ["", "## Evidence", ""]
    ev = evidence(finding)
    lines += (
        ev if ev else ["No measurement file keeps this one; its tests below measure it on every run.", ""]
    )
    lines += ["## Checked by", ""] + [f"- `{t}`" for t in finding.tests]
    lines += ["", END]
    return "\n".join(lines) + "\n"


#: where ``specproof findings reproduce SLUG --json`` outcomes are kept, one file a finding
REPRODUCED = MEASUREMENTS / "findings-reproduced"


def _reproduced(finding: Finding) -> str:
    """The stored outcome of the finding's reproduction (:data:`REPRODUCED`), in words: when, against
    which release, holds or not and how many tests; or how to store one."""
    path = REPRODUCED / f"{finding.slug}.json"
    if not path.exists():
        return (
            "no stored run; `specproof findings reproduce "
            f"{finding.slug} --json docs/measurements/findings-reproduced/{finding.slug}.json` stores one"
        )
    doc = json.loads(path.read_text())
    kinds = [t["outcome"] for t in doc["tests"]]
    counts = ", ".join(
        f"{kinds.count(k)} {k}" for k in ("passed", "failed", "error", "skipped") if k in kinds
    )
    words = {
        "holds": "**holds**",
        "changed": "**does not hold as written**",
        "not_run": "not run in full (a test skipped)",
    }
    return (
        f"{doc.get('date', '?')}, against {doc['installed']}: {words[doc['state']]} ({counts}; "
        f"[JSON](../measurements/findings-reproduced/{finding.slug}.json))"
    )


def index() -> str:
    """docs/findings/README.md: one line per finding."""
    lines = [
        "# Findings in third-party engines",
        "",
        "One page per defect, each with the engine and version, the source lines, the evidence from the",
        "measurement JSON, the tests that reproduce it and the fix. Re-run one against the engine",
        "installed here with `specproof findings reproduce SLUG` (it says whether the finding still",
        "holds); `specproof findings pages` writes these pages' tables again from the JSON. The",
        "reasoning behind each cause: [proofs_notes/thirdparty.md](../../proofs_notes/thirdparty.md).",
        "",
        "| finding | engine | what the audit says |",
        "|---|---|---|",
    ]
    for f in FINDINGS:
        lines.append(f"| [{_cell(f.title)}]({f.slug}.md) | {f.system} {f.version} | {_cell(f.verdict)} |")
    return "\n".join(lines) + "\n"


def _page(folder: Path, finding: Finding) -> tuple[Path, str]:
    path = folder / f"{finding.slug}.md"
    old = path.read_text() if path.exists() else ""
    prose = old.split(END + "\n", 1)[1] if END in old else "\n## What happens\n\n## The cause\n\n## The fix\n"
    return path, written_part(finding) + prose


def expected_pages(folder: Path = PAGES) -> dict[Path, str]:
    out = dict(_page(folder, f) for f in FINDINGS)
    out[folder / "README.md"] = index()
    return out


def stale_pages(folder: Path = PAGES) -> list[Path]:
    """The pages whose text differs from what :func:`write_pages` would write."""
    return [p for p, text in expected_pages(folder).items() if not p.exists() or p.read_text() != text]


def write_pages(folder: Path = PAGES) -> list[Path]:
    """Write every page's written part (the prose below it kept) and the index; the paths changed."""
    changed = []
    folder.mkdir(parents=True, exist_ok=True)
    for path, text in expected_pages(folder).items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed


def source_lines(where: Where) -> list[str] | None:
    """The lines of ``where``'s file as this machine has it (installed package, pinned environment
    or the llama-cpp-python source archive), or None where the source is not here."""
    kind, _, rest = where.root.partition(":")
    if kind == "py":
        spec = importlib.util.find_spec(rest)
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(list(spec.submodule_search_locations)[0]).parent / where.path
        return path.read_text().splitlines() if path.exists() else None
    if kind == "env":
        from specproof.properties import integrations

        name, _, package = rest.partition(":")
        venv = integrations.info(name).get("venv")
        found = sorted(Path(venv).glob(f"lib/python*/site-packages/{where.path}")) if venv else []
        return found[0].read_text().splitlines() if found else None
    if where.root == "sdist:llama.cpp":
        import tarfile

        from specproof.properties.servers import llamacpp

        archive = llamacpp.cache_root() / "sdist" / f"llama_cpp_python-{llamacpp.VERSION}.tar.gz"
        if not archive.exists():
            return None
        with tarfile.open(archive) as tar:
            member = tar.extractfile(f"llama_cpp_python-{llamacpp.VERSION}/vendor/llama.cpp/{where.path}")
            return member.read().decode().splitlines() if member else None
    return None


def place_state(where: Where) -> str:
    """``same`` (line ``where.line`` still says ``where.text``), ``moved to N`` (the text is at
    another line), ``changed`` (nowhere in the file), or ``not here`` (no source on this machine)."""
    lines = source_lines(where)
    if lines is None or not where.text:
        return "not here" if lines is None else "not checked (a place named for orientation)"
    if 0 < where.line <= len(lines) and where.text in lines[where.line - 1]:
        return "same"
    at = [i + 1 for i, line in enumerate(lines) if where.text in line]
    return f"moved to {at[0]}" if at else "changed"


@dataclass(frozen=True)
class Reproduction:
    """What ``specproof findings reproduce`` found: each test's outcome and the finding's state."""

    finding: str
    installed: str
    outcomes: tuple[tuple[str, str, str], ...]  # (test, passed|failed|skipped|error, message)
    places: tuple[tuple[str, str], ...] = ()  # (file:line, place_state) for each place in the source

    @property
    def state(self) -> str:
        """``changed`` if a test failed, ``not_run`` if any was skipped (the engine is not here, so
        only part of the reproduction ran), ``holds`` when every test ran and passed."""
        kinds = {o for _, o, _ in self.outcomes}
        if kinds & {"failed", "error"}:
            return "changed"
        if "skipped" in kinds or not kinds:
            return "not_run"
        return "holds"

    def summary(self) -> str:
        head = {
            "holds": "holds: every test that asserts it passed",
            "changed": "does not hold as written: a test that asserts it failed (fixed, or changed: read it)",
            "not_run": "not run here in full: a test skipped (the engine is not installed), so no verdict",
        }[self.state]
        lines = [f"{self.finding} ({self.installed}): {head}"]
        lines += [f"  {o:7s} {t}" + (f": {m}" if m else "") for t, o, m in self.outcomes]
        lines += [f"  source  {p}: {state}" for p, state in self.places]
        return "\n".join(lines)


def _installed(finding: Finding) -> str:
    """Which release of each of the finding's packages the reproduction meets (``package`` may name
    several, ``a / b``): this Python's, else the one in the pinned environment its ``needs`` names
    (``specproof env install NAME``) or of the package's own name, else none."""
    packages = [p.strip() for p in finding.package.split(" / ") if p.strip()]
    return "; ".join(_release(finding, package) for package in packages)


def _release(finding: Finding, package: str) -> str:
    try:
        return f"{package} {importlib.metadata.version(package)} installed here"
    except importlib.metadata.PackageNotFoundError:
        pass
    named = re.search(r"specproof env install ([\w.-]+)", finding.needs)
    for name in (named.group(1) if named else None, package):
        pinned = _pinned_release(package, name)
        if pinned:
            return pinned
    return f"{package}: not in this Python environment; its tests need {finding.needs}"


def _pinned_release(package: str, name: str | None) -> str:
    """``PACKAGE VERSION in its pinned environment (NAME)`` where ``NAME`` is a pinned environment
    that is installed and says its version, else ''."""
    from specproof.properties import integrations

    if not name:
        return ""
    try:
        info = integrations.info(name)
    except UsageError:  # no pinned environment of that name
        return ""
    if not info.get("installed") or not info.get("detail"):
        return ""
    return f"{package} {info['detail']} in its pinned environment ({name})"


def _outcomes(xml: Path) -> list[tuple[str, str, str]]:
    out = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        kind, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                kind = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = " ".join((child.get("message") or "").split())[:300]
        out.append((name, kind, message))
    return out


def reproduce(finding: Finding, echo: Callable[[str], None] = lambda s: None) -> Reproduction:
    """Run ``finding``'s tests here (one pytest process, no workers) and read their outcomes."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", *finding.tests, "-p", "no:xdist", "-q", f"--junitxml={xml}"]
        echo("running " + " ".join(cmd[1:4]) + f" ... ({len(finding.tests)} tests)")
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if not xml.exists():
            tail = proc.stdout[-2000:] + proc.stderr[-2000:]
            raise InternalError(f"pytest wrote no report (exit {proc.returncode}):\n{tail}")
        places = tuple((f"{w.path}:{w.line}", place_state(w)) for w in finding.where)
        return Reproduction(finding.slug, _installed(finding), tuple(_outcomes(xml)), places)
