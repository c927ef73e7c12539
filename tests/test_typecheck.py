"""mypy sees specproof as it is installed, so a cross-package import is never silently ``Any``.

setuptools maps ``reference/``, ``optimized/`` and ``properties/`` to ``specproof.*``; run on the
bare folders mypy cannot resolve ``from specproof.reference.rules import RULES`` and, under a
blanket ``ignore_missing_imports``, typed every such import as ``Any`` and reported success.
``scripts/typecheck.py`` checks the package laid out as installed (``tox -e type``). Here a probe
module imports one name from each layer and every sub-package and asks mypy, through that
script, what it sees (``reveal_type``):

* every revealed type is the real one (names the defining ``specproof.*`` module) and contains
  no ``Any``, and mypy reports no error anywhere in the package (slow: a cold mypy run over the
  package takes about a minute on 2 cores);
* the detector can fail: the same probe checked the old way (repository root, blanket
  ``ignore_missing_imports``) reveals ``Any`` for every line and is rejected; with the
  repository's configuration the old way is an import error, not a silent ``Any``.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (mypy depends on tomli there)
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "typecheck.py"

# (import line, expression revealed, substrings the revealed type must contain)
TYPED = [
    ("import specproof", "specproof.__version__", ["str"]),
    ("from specproof._triton import interpret_wanted", "interpret_wanted", ["def () -> bool"]),
    ("from specproof.reference.rules import RULES", "RULES", ["dict[str, specproof.reference.rules.Rule]"]),
    (
        "from specproof.reference.errors import BadParameterError",
        "BadParameterError",
        ["-> specproof.reference.errors.BadParameterError"],
    ),
    # optimized, typed by reference (optimized imports reference)
    (
        "from specproof.optimized.decode import verifying_target",
        "verifying_target",
        ["specproof.reference.proposers.Proposer", "-> specproof.reference.transformer.TinyTransformer"],
    ),
    ("from specproof.optimized.token import token", "token", ["draft_token_ids: torch._tensor.Tensor"]),
    # properties, typed by reference (properties imports reference and optimized)
    (
        "from specproof.properties.oracle.exact import check",
        "check",
        [
            "specproof.reference.rules.Rule",
            "specproof.reference.processes.Process",
            "-> specproof.properties.oracle.exact.OracleResult",
        ],
    ),
    (
        "from specproof.properties.engine.loops import reference_engine",
        "reference_engine",
        ["specproof.reference.proposers.Proposer", "-> specproof.properties.engine.loops.ReferenceEngine"],
    ),
    (
        "from specproof.properties.verdicts import Verdict",
        "Verdict.PASS",
        ["specproof.properties.verdicts.Verdict"],
    ),
    (
        "from specproof.properties.audit.stages import AuditConfig",
        "AuditConfig().cases",
        ["specproof.properties.audit.battery.Case"],
    ),
    (
        "from specproof.properties.conformance.backends import REGISTRY",
        "REGISTRY",
        ["specproof.properties.conformance.backends.Backend"],
    ),
]


def _packages() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]


def _probe(path: Path, typed: list[tuple[str, str, list[str]]] = TYPED) -> dict[int, tuple[str, list[str]]]:
    """Write the probe; return {line number: (expression, wanted substrings)} of its reveals."""
    # the path in the text: mypy's cache replays a module whose text it has seen with the path it
    # had then, so an identical probe from an earlier run would report another run's file
    lines = [f"# probe at {path}"] + [imp for imp, _, _ in typed]
    modules = [
        (f"import {pkg} as _m{i}", f"_m{i}", ["types.ModuleType"]) for i, pkg in enumerate(_packages())
    ]
    lines += [imp for imp, _, _ in modules]
    reveals = {}
    for _, expr, want in typed + modules:
        lines.append(f"reveal_type({expr})")
        reveals[len(lines)] = (expr, want)
    path.write_text("\n".join(lines) + "\n")
    return reveals


def _revealed(stdout: str, probe: Path) -> dict[int, str]:
    pat = re.compile(rf"^{re.escape(str(probe))}:(\d+): note: Revealed type is \"(.*)\"$")
    return {int(m[1]): m[2] for m in map(pat.match, stdout.splitlines()) if m}


def _wrong(reveals: dict[int, tuple[str, list[str]]], revealed: dict[int, str]) -> dict[str, str]:
    """{expression: what mypy revealed} of every reveal that is missing, Any (or has an Any
    inside), or lacks a wanted name."""
    bad = {}
    for line, (expr, want) in reveals.items():
        got = revealed.get(line)
        if got is None or re.search(r"\bAny\b", got) or not all(w in got for w in want):
            bad[expr] = f"{got!r}, wanted {want}"
    return bad


def _mypy_installed() -> None:
    assert importlib.util.find_spec("mypy") is not None, "mypy is missing: it is in the test extra"


@pytest.mark.slow
def test_mypy_resolves_every_cross_package_import_and_finds_no_error(tmp_path):
    _mypy_installed()
    probe = tmp_path / "probe.py"
    reveals = _probe(probe)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(probe)], cwd=ROOT, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert not _wrong(reveals, _revealed(proc.stdout, probe)), out
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert not errors, "\n".join(errors)
    assert proc.returncode == 0, out


def test_the_check_rejects_the_bare_folders_that_made_every_import_any(tmp_path):
    """The mutant: mypy run the old way, from the repository root on the bare folders."""
    _mypy_installed()
    probe = tmp_path / "probe.py"
    # without specproof._triton: it imports torch (in a function), whose stubs take half a minute
    # to analyse into a cold cache; specproof.__version__ shows the same (the bare specproof/)
    reveals = _probe(probe, [t for t in TYPED if "_triton" not in t[0]])
    blanket = tmp_path / "blanket.toml"
    blanket.write_text('[tool.mypy]\npython_version = "3.11"\nignore_missing_imports = true\n')

    def mypy(config: Path) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir", str(tmp_path / "c")]
        return subprocess.run([*cmd, str(probe)], cwd=ROOT, capture_output=True, text=True)

    old = mypy(blanket)
    revealed = _revealed(old.stdout, probe)
    assert len(revealed) == len(reveals), old.stdout
    # only what lives in the repository's own specproof/ folder resolves; everything mapped by
    # package-dir is Any, and the check flags each of them
    own = {"specproof.__version__", f"_m{_packages().index('specproof')}"}
    assert set(_wrong(reveals, revealed)) == {expr for expr, _ in reveals.values()} - own, old.stdout
    assert {revealed[line] for line, (expr, _) in reveals.items() if expr not in own} == {"Any"}
    assert old.returncode == 0, old.stdout  # ... and mypy called that a success
    # with the repository's configuration the same run is an error, not a silent Any
    now = mypy(ROOT / "pyproject.toml")
    assert now.returncode == 1, now.stdout
    # the error code of a module that cannot be found: mypy 1.7 to 1.x print [import-not-found];
    # mypy before 1.7, and the mypy constraints.txt pins (2.4.1), print [import]: either holds
    assert re.search(r'module named "specproof\.reference\.rules"\s+\[import(-not-found)?\]', now.stdout), (
        now.stdout
    )
