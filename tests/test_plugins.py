"""The engine audit's plug-ins (properties/engine/plugins.py): the audit names none of them, each
shows what it checks (a docs section, a planted bug of the stand-in server, a sign-off item, a
calibration), the engine package has no import circle and no long module or function, and a new
axis and check join the audit through the table alone (docs/adding-an-axis-or-check.md, whose
worked example is docs/examples/width_axis.py)."""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import re
import sys

import pytest

from specproof.properties.endpoint.standin_bugs import BUGS
from specproof.properties.engine import plugins
from specproof.properties.engine.audit import audit_engine
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.contract import T1, EngineSpec
from specproof.properties.engine.signoff import signoff
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENGINE = ROOT / "properties" / "engine"
PLUGINS = [*plugins.AXES, *plugins.checks()]


def _words(path: pathlib.Path) -> set[str]:
    """Every identifier ``path`` uses and every word of its string constants, docstrings aside."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.alias):
            out.update(node.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.update(node.module.split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out.update(re.findall(r"[A-Za-z_]+", node.value))
    return out


def test_the_audit_names_no_axis_or_check():
    words = _words(ENGINE / "audit.py")
    for p in PLUGINS:
        names = {type(p).__name__, type(p).__module__.rsplit(".", 1)[-1], p.name}
        assert not names & words, (type(p).__name__, names & words)
    assert {"AXES", "checks"} <= words  # it reads the table


def _runtime_imports(path: pathlib.Path, package: str) -> set[str]:
    """The modules of ``package`` that ``path`` imports when it runs (TYPE_CHECKING blocks aside)."""
    tree = ast.parse(path.read_text())
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and id(node) not in skip:
            if node.module.startswith(package + "."):
                out.add(node.module[len(package) + 1 :].split(".")[0])
            elif node.module == package:
                out.update(a.name for a in node.names)
    return out


def test_no_import_circle_inside_the_engine_package():
    graph = {p.stem: _runtime_imports(p, "specproof.properties.engine") for p in ENGINE.glob("*.py")}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if d not in graph:
                continue
            assert state.get(d) != 1, " -> ".join([*path, m, d])
            if d not in state:
                visit(d, [*path, m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def _long_functions(path: pathlib.Path, limit: int) -> list[str]:
    tree = ast.parse(path.read_text())
    return [
        f"{path.name}:{n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit
    ]


def test_the_audit_and_its_plugins_are_short():
    """No module of the audit or its plug-ins over 700 lines, no function over 80."""
    mods = {"audit", "plugin", "plugins", "axes", "case", "planning", "probe", "reporting", "cache"}
    mods |= {type(p).__module__.rsplit(".", 1)[-1] for p in PLUGINS}
    for m in sorted(mods):
        path = ENGINE / f"{m}.py"
        assert len(path.read_text().splitlines()) <= 700, m
        assert not _long_functions(path, 80), _long_functions(path, 80)


def _anchor(text: str) -> set[str]:
    """The anchors of a Markdown page's headings, as GitHub makes them."""
    out = set()
    for line in text.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


@pytest.mark.parametrize("p", PLUGINS, ids=lambda p: type(p).__name__)
def test_every_plugin_names_its_docs_bug_signoff_and_calibration(p):
    page, _, anchor = p.docs.partition("#")
    assert page and anchor and anchor in _anchor((ROOT / page).read_text()), p.docs
    assert p.bug in BUGS and BUGS[p.bug].expect is not Verdict.ERROR, p.bug
    assert p.signoff, type(p).__name__
    if p.calibration.startswith("exact:"):
        assert len(p.calibration) > len("exact: ") + 10  # says why there is nothing to calibrate
    else:
        assert (ROOT / p.calibration).is_file(), p.calibration
        assert p.calibration.startswith("docs/measurements/")


def test_every_plugin_signoff_question_is_asked():
    """Each plug-in's question is an item of every audit's sign-off (asked or not)."""
    spec = EngineSpec("direct", "user", "", _width_engine(None), 8, ((0, 6),), (T1,), tokens=2)
    res = audit_engine(spec, EngineAuditConfig(alpha=1e-3, samples=40, seed=0))
    asked = {i.question for i in signoff(res)}
    missing = [type(p).__name__ for p in PLUGINS if p.signoff not in asked]
    assert not missing, missing


# --------------------------------------------------------------------------- the worked example


def _example():
    """docs/examples/width_axis.py, loaded once as the module ``width_axis``."""
    if "width_axis" in sys.modules:
        return sys.modules["width_axis"]
    spec = importlib.util.spec_from_file_location("width_axis", ROOT / "docs" / "examples" / "width_axis.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["width_axis"] = mod
    spec.loader.exec_module(mod)
    return mod


def _width_engine(bug: str | None):
    mod = _example()
    return lambda sampling: mod.WidthEngine(sampling, bug)


@pytest.fixture
def extended(monkeypatch):
    """The table with the example's two lines added, as the adding page shows."""
    mod = _example()
    monkeypatch.setattr(plugins, "AXES", (*plugins.AXES, mod.WidthAxis()))
    base = plugins.checks
    monkeypatch.setattr(plugins, "checks", lambda: [*base(), mod.StepsCheck()])
    return mod


def _audit_width(bug: str | None):
    spec = EngineSpec(
        "width", "user", "", _width_engine(bug), 8, ((0, 6),), (T1,), tokens=3, axes=(("width", (1, 2)),)
    )
    return audit_engine(spec, EngineAuditConfig(alpha=1e-3, samples=120, seed=0, report_samples=4))


def test_a_new_axis_and_check_join_through_the_table(extended):
    r = _audit_width(None)
    assert r.verdict == Verdict.PASS, r.summary()
    assert [c.case.name for c in r.cases] == ["T=1 after [0 6] at width 1", "T=1 after [0 6] at width 2"]
    assert "steps: 240 samples, their steps add up to their tokens" in r.summary()
    assert r.to_json()["plugins"]["steps"] == {"read": 240, "wrong": []}
    items = {i.question: i.answer for i in signoff(r)}
    assert items["the tokens per step add up to the tokens returned"] == "yes"


def test_the_new_axis_locates_a_deviation_at_one_width(extended):
    r = _audit_width("lossy_at_2")
    assert r.verdict == Verdict.LOSSY, r.summary()
    assert r.factor == "lossy only at width 2 (the same prompt and setting held at width 1)", r.factor


def test_the_new_check_finds_what_it_checks(extended):
    r = _audit_width("steps")
    assert r.verdict == Verdict.MISREPORTED, r.summary()
    assert "steps: MISREPORTED in 240 of 240 samples" in r.summary()
    items = {i.question: i.answer for i in signoff(r)}
    assert items["the tokens per step add up to the tokens returned"] == "no"


def test_without_the_table_line_the_axis_is_refused_by_name():
    """The audit reads only the table: an axis asked that no plug-in is, a usage error naming it."""
    spec = EngineSpec(
        "width", "user", "", _width_engine(None), 8, ((0, 6),), (T1,), tokens=3, axes=(("width", (1, 2)),)
    )
    with pytest.raises(
        UsageError, match="no workload axis is named 'width' \\(known: load, cache, completions\\)"
    ):
        audit_engine(spec, EngineAuditConfig(alpha=1e-3, samples=20, seed=0))


def _layout_sections() -> dict[str, str]:
    """docs/layout.md's block under ``properties/``, one text per entry (``  engine/  ...`` and
    its continuation lines), keyed by the entry's first word."""
    text = (ROOT / "docs" / "layout.md").read_text()
    block = text.split("properties/    specproof.properties", 1)[1].split("\nbenchmarks/", 1)[0]
    sections: dict[str, str] = {}
    key = ""
    for line in block.splitlines():
        if re.match(r"^  \S", line):
            key = line.split()[0].rstrip("/,")
            sections[key] = ""
        if key:
            sections[key] += line + "\n"
    return sections


def test_the_layout_page_names_every_module_of_every_package_where_it_lives():
    """docs/layout.md against the tree: every module of every package under properties/ (its
    sub-folders too: engine/adapters/, endpoint/families/, conformance/backends/thirdparty/) is
    named in that package's entry, every top-level module of properties/ in the block, and an
    entry names no module (a snake_case name) that its package does not have: the page once
    named a deleted ``endpoint/profiles`` and, after a move, ``calibration`` modules gone from
    audit/, engine/ and endpoint/."""
    sections = _layout_sections()
    block = "".join(sections.values())
    props = ROOT / "properties"
    word = lambda name, text: re.search(rf"(?<![\w.-]){re.escape(name)}\b", text)  # noqa: E731
    missing, gone = [], []
    for pkg in sorted(p for p in props.iterdir() if (p / "__init__.py").exists()):
        text = sections.get(pkg.name)
        if text is None:
            missing.append(f"{pkg.name}/ (no entry)")
            continue
        modules = [p for p in sorted(pkg.rglob("*.py")) if p.stem not in ("__init__", "__main__")]
        missing += [str(p.relative_to(props)) for p in modules if not word(p.stem, text)]
        have = {p.stem for p in pkg.rglob("*.py")} | {p.name for p in pkg.rglob("*") if p.is_dir()}
        snake = set(re.findall(r"(?<![\w.-])([a-z][a-z0-9]*_[a-z0-9_]+)\b", text))
        gone += [f"{pkg.name}/{w}" for w in sorted(snake - have)]
    missing += [
        p.name for p in sorted(props.glob("*.py")) if p.stem != "__init__" and not word(p.stem, block)
    ]
    assert not missing, missing
    assert not gone, gone
    # the check reads what it should: a module dropped from an entry is missed
    engine = sections["engine"].replace("token_stage", "")
    assert not word("token_stage", engine)


def test_the_checks_speak_one_status_vocabulary():
    """Every side check's status is a :class:`CheckStatus`: no status is set, compared or typed
    as a bare string anywhere in the audit's and the endpoint's code, and each word is written
    to JSON as the plain string it always was."""
    import json

    from specproof.properties.verdicts import CheckStatus

    bare = re.compile(r'status(?:, [\w.]+)? = "|status [!=]= "|status (?:not )?in \("|status: str\b')
    found = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for folder in (ENGINE, ROOT / "properties" / "endpoint")
        for p in sorted(folder.rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if bare.search(line)
    ]
    assert not found, found
    for member in CheckStatus:
        assert json.dumps({"status": member}) == json.dumps({"status": member.name.lower()})
        assert f"{member}" == member.value == member.name.lower()


def test_no_module_of_the_project_is_over_700_lines():
    """Every Python module of the package (reference, optimized, properties, the commands) fits
    in 700 lines: a longer one is two ideas, to be split where they part."""
    root = ENGINE.parents[1]
    long = []
    for pkg in ("reference", "optimized", "properties", "specproof"):
        for path in sorted((root / pkg).rglob("*.py")):
            n = len(path.read_text().splitlines())
            if n > 700:
                long.append(f"{path.relative_to(root)} ({n} lines)")
    assert not long, long


#: functions allowed past 80 lines, each with why: Triton kernels (one program, kept whole so
#: its loads and stores read in order)
LONG_ALLOWED = {
    "optimized/kernels/multi_draft.py:multi_draft_level_kernel": "a Triton kernel",
    "optimized/kernels/paged_attention.py:paged_attention_kernel": "a Triton kernel",
}


def test_no_function_of_the_project_is_over_80_lines_but_kernels():
    root = ENGINE.parents[1]
    long = []
    for pkg in ("reference", "optimized", "properties", "specproof"):
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root)
            for item in _long_functions(path, 80):
                name = item.split(" (")[0].split(":", 1)[1]
                if f"{rel}:{name}" not in LONG_ALLOWED:
                    long.append(f"{rel}:{item}")
    assert not long, long
