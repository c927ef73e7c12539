"""Type-check specproof under the module names it is installed with (``specproof.*``).

Usage (in the repository root; mypy is in the ``test`` and ``type`` extras):
    python scripts/typecheck.py [extra mypy arguments or files]

The repository's folders are not laid out as the package: setuptools' ``package-dir`` maps
``reference/`` to ``specproof.reference``, ``optimized/`` to ``specproof.optimized`` and
``properties/`` to ``specproof.properties``, and an editable install resolves them with an
import hook that mypy cannot follow. Run on the folders themselves, mypy names the modules
``reference.*``, ``optimized.*``, ``properties.*`` and cannot find a single
``from specproof.reference ... import ...``; with a blanket ``ignore_missing_imports`` every such
import silently became ``Any``.

So this script lays the package out as installed: a throw-away tree under
``build/typecheck/`` whose ``specproof/`` holds links to the files of ``specproof/`` and, for
every package that ``[tool.setuptools.package-dir]`` maps to a folder of its own, a link to that
folder (nothing is copied; the links are checked against ``[tool.setuptools] packages``). mypy
then runs from that tree on its ``specproof`` folder with the repository's ``pyproject.toml``, so every
module has its installed name, an import of a project module that does not resolve is an error
(``ignore_missing_imports`` is scoped to named third-party packages), and the cache stays in
``build/typecheck/.mypy_cache``. Paths in mypy's output are written back as the repository's
paths (``properties/cli.py``, not ``specproof/properties/cli.py``). Exit status: mypy's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: mypy itself depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"
PACKAGE = "specproof"


def package_dirs(pyproject: Path = ROOT / "pyproject.toml") -> tuple[dict[str, str], list[str]]:
    """``[tool.setuptools.package-dir]`` and ``[tool.setuptools] packages`` of ``pyproject``."""
    setuptools = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]
    return dict(setuptools["package-dir"]), list(setuptools["packages"])


def _link(link: Path, target: Path) -> None:
    """Point ``link`` at ``target`` (atomically: two runs at once never see a missing link)."""
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(target, target_is_directory=target.is_dir())
    os.replace(tmp, link)


def build_tree(tree: Path = TREE, root: Path = ROOT) -> dict[str, str]:
    """Lay out ``tree/specproof`` as the installed package; return {tree-relative prefix: repo
    prefix} for translating mypy's paths. Raises RuntimeError if a listed package is missing."""
    mapping, packages = package_dirs(root / "pyproject.toml")
    top = tree / PACKAGE
    top.mkdir(parents=True, exist_ok=True)
    # the files (and natural sub-folders) of the top-level package's own folder
    own = root / mapping.get(PACKAGE, PACKAGE)
    wanted = {p.name: p for p in own.iterdir() if p.name != "__pycache__" and not p.name.startswith(".")}
    # every package whose folder is not its parent's folder + its own name gets a link of its own
    translate = {f"{PACKAGE}/": f"{mapping.get(PACKAGE, PACKAGE)}/"}
    for name, folder in sorted(mapping.items()):
        if name == PACKAGE:
            continue
        parent, _, leaf = name.rpartition(".")
        natural = f"{mapping.get(parent, parent.replace('.', '/'))}/{leaf}"
        if parent != PACKAGE and folder == natural:
            continue  # reached through its parent's link
        if parent != PACKAGE:
            raise RuntimeError(f"package-dir: {name} -> {folder} is not under its parent's folder")
        wanted[leaf] = root / folder
        translate[f"{PACKAGE}/{leaf}/"] = f"{folder}/"
    for entry in top.iterdir():  # links to what no longer exists
        if entry.name not in wanted and entry.is_symlink():
            entry.unlink()
    for name, target in wanted.items():
        _link(top / name, target)
    missing = [p for p in packages if not (tree / p.replace(".", "/") / "__init__.py").is_file()]
    if missing:
        raise RuntimeError(f"build/typecheck: no __init__.py for {', '.join(missing)}")
    # the longest prefix first, so that a nested mapping wins over its parent's
    return dict(sorted(translate.items(), key=lambda kv: -len(kv[0])))


def to_repo_path(line: str, translate: dict[str, str]) -> str:
    for prefix, repo in translate.items():
        if line.startswith(prefix):
            return repo + line[len(prefix) :]
    return line


def run_mypy(args: list[str], tree: Path = TREE, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """mypy on the tree's ``specproof`` plus ``args`` (paths made absolute), from ``tree``; its output
    with the repository's paths."""
    translate = build_tree(tree, root)
    extra = [str(Path(a).resolve()) if not a.startswith("-") and Path(a).exists() else a for a in args]
    # the package as a folder of the tree (not `-p`, which cannot be combined with files)
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(root / "pyproject.toml"),
        "--explicit-package-bases",
    ]
    cmd += [PACKAGE, *extra]
    # cwd is the tree: mypy puts the working directory first on its search path, so `specproof`
    # is the tree's package, not the repository's bare specproof/ folder
    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    proc.stdout = "".join(to_repo_path(line, translate) for line in proc.stdout.splitlines(keepends=True))
    return proc


def main(argv: list[str] | None = None) -> int:
    proc = run_mypy(sys.argv[1:] if argv is None else argv)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
