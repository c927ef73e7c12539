"""The top-level ``specproof`` package: its exports are exactly its public names, each resolves,
each is documented, and importing the package imports none of them (they load on first use)."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import specproof

INIT = pathlib.Path(specproof.__file__)


def _defined_at_top() -> set[str]:
    """Public functions, classes and constants the module defines itself (not imports)."""
    names = set()
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return {n for n in names if not n.startswith("_")}


def test_all_lists_every_public_name_and_nothing_else():
    exported = set(specproof.__all__)
    assert len(exported) == len(specproof.__all__), "a name is listed twice in __all__"
    public = set(specproof._LAZY) | _defined_at_top()
    assert exported == public, f"missing from __all__: {public - exported}; not public: {exported - public}"


def test_every_export_resolves_and_is_documented():
    for name in specproof.__all__:
        value = getattr(specproof, name)
        if callable(value) or isinstance(value, type(specproof)):
            assert (getattr(value, "__doc__", None) or "").strip(), f"specproof.{name} has no docstring"
    assert set(specproof.__all__) <= set(dir(specproof))


def test_star_import_gives_the_exports():
    namespace: dict[str, object] = {}
    exec("from specproof import *", namespace)
    assert set(specproof.__all__) <= set(namespace)


def test_unknown_names_raise_attribute_error():
    try:
        specproof.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("specproof.no_such_name resolved")


def test_import_specproof_loads_no_audit_module():
    code = (
        "import sys, specproof; print(sorted(m for m in sys.modules if m.startswith('specproof.properties')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
