"""Imports only run downward, and importing a module runs no probe of installed packages.

The layers, lowest first, are named once, in :data:`LAYERS`; docs/layout.md draws the same
picture. A module may import from its own layer (its own package) and from any layer below it;
an import of a layer above it, at module level or inside a function, fails this test with the
file and line. The test reads the source (ast), so an import hidden in a function that no test
calls is caught too.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: import-name prefix -> folder, as pyproject's package-dir maps them
FOLDERS = {
    "specproof.reference": "reference",
    "specproof.optimized": "optimized",
    "specproof.properties": "properties",
    "specproof": "specproof",
}
#: lowest first; a module belongs to the longest prefix that names it
LAYERS: list[tuple[str, ...]] = [
    ("specproof.reference",),
    ("specproof._triton", "specproof.optimized"),
    (
        "specproof.properties.verdicts",
        "specproof.properties.options",
        "specproof.properties._imports",
        "specproof.properties.plan",
        "specproof.properties.outputs",
        "specproof.properties.report_model",  # the one report model: blocks as Markdown, HTML, JSON
        # the table of third-party systems: data naming each part by module, resolved by name
        # where it is used, so the registry and the commands above it may read it
        "specproof.properties.integrations",
    ),
    ("specproof.properties.servers",),  # llama.cpp built from source, the tiny GGUF models
    ("specproof.properties.oracle",),
    ("specproof.properties.conformance",),
    ("specproof.properties.audit",),
    ("specproof.properties.tokens",),  # the token test: transforms, e-processes, the plan in tokens
    ("specproof.properties.engine",),
    ("specproof.properties.endpoint",),
    ("specproof.properties.e2e",),
    ("specproof.properties.shard",),
    ("specproof.properties.run",),  # the one way in: the audits run from the doors' values
    ("specproof.properties.bench",),
    ("specproof.properties.measure",),  # the findings in third-party engines, above every audit
    ("specproof.properties.cli", "specproof.properties.pytest_plugin"),
    ("specproof",),
]


def layer_of(module: str) -> int:
    best, length = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > length:
                best, length = i, len(p)
    return best


def modules() -> list[tuple[str, pathlib.Path]]:
    out = []
    for prefix, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out.append((".".join([prefix, *parts]), path))
    return out


def imports(path: pathlib.Path, module: str) -> list[tuple[str, int]]:
    """Every specproof module ``path`` imports, with the line (relative imports resolved)."""
    out = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{a.name}" for a in node.names]
            out += [(n if layer_of(n) >= 0 else target, node.lineno) for n in names]
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
    return [(t, line) for t, line in out if t == "specproof" or t.startswith("specproof.")]


def test_every_module_has_a_layer():
    missing = [name for name, _ in modules() if layer_of(name) < 0]
    assert not missing, f"modules outside every layer (add them to LAYERS): {missing}"


def test_imports_only_run_downward():
    upward = []
    for name, path in modules():
        own = layer_of(name)
        for target, line in imports(path, name):
            if layer_of(target) > own:
                upward.append(f"{path.relative_to(ROOT)}:{line}: {name} imports {target}")
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


def test_the_check_catches_an_upward_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from specproof.properties.cli import main\n")
    found = imports(probe, "specproof.properties.audit.probe")
    assert any(layer_of(t) > layer_of("specproof.properties.audit.probe") for t, _ in found)


THIRD_PARTY = ("transformers", "vllm", "sglang", "flashinfer", "medusa", "eagle", "ray")


@pytest.mark.parametrize(
    "module",
    [
        "specproof",
        "specproof.properties.audit.stats",
        "specproof.properties.conformance.backends",
        "specproof.properties.engine.registry",
        "specproof.properties.cli",
        "specproof.properties.pytest_plugin",
    ],
)
def test_importing_runs_no_probe_of_installed_packages(module):
    """No third-party package is looked up (find_spec or import) by importing ``module``: the
    registries fill lazily, on first use."""
    code = (
        "import importlib.util, sys\n"
        "seen = []\n"
        "real = importlib.util.find_spec\n"
        "def spy(name, *a, **k):\n"
        "    seen.append(name)\n"
        "    return real(name, *a, **k)\n"
        "importlib.util.find_spec = spy\n"
        f"import {module}\n"
        f"bad = [n for n in seen + list(sys.modules) if n.split('.')[0] in {THIRD_PARTY!r}]\n"
        "print(sorted(set(bad)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"importing {module} probed {out.stdout.strip()}"
