"""Every exception the project raises derives from SpecproofError (and bad input stays a
ValueError): checked on the source, so a new bare ``raise ValueError(...)`` fails here."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import specproof
from specproof.reference.errors import SpecproofError

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {name: f"specproof.{name}" for name in ("reference", "optimized", "properties")}
BUILTIN = {"ValueError", "TypeError", "RuntimeError", "KeyError", "LookupError", "IndexError", "Exception"}


def _sources():
    for folder in (*PACKAGES, "specproof"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_no_bare_builtin_exception_is_raised():
    bare = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                if isinstance(func, ast.Name) and func.id in BUILTIN:
                    bare.append(f"{path.relative_to(ROOT)}:{node.lineno}: raise {func.id}(...)")
    assert not bare, "\n".join(bare)


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] in PACKAGES:
        parts = ["specproof", *parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def test_every_exception_class_of_the_project_derives_from_specproof_error():
    defined = []
    for path in _sources():
        tree = ast.parse(path.read_text(), str(path))
        names = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        if not names:
            continue
        try:
            module = importlib.import_module(_module_name(path))
        except ImportError:  # an optional third-party adapter's module
            continue
        for name in names:
            cls = getattr(module, name, None)
            if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == module.__name__:
                defined.append(cls)
    assert len(defined) >= 20  # the errors module alone defines more; the walk must find them
    stray = [f"{c.__module__}.{c.__qualname__}" for c in defined if not issubclass(c, SpecproofError)]
    assert not stray, stray


def test_bad_option_is_a_specproof_error_and_a_value_error_naming_it():
    with pytest.raises(SpecproofError) as info:
        specproof.audit_chain("torch.token", alpha=2.0)
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith("alpha")
