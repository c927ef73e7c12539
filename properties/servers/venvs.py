"""What the engines kept in environments of their own share: where each lives (under the cache,
outside the clone, or where an environment variable says), its Python, the version of a
distribution installed there, and pip run in it with a log."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path


def cache_root(folder: str) -> Path:
    """``$XDG_CACHE_HOME/specproof/FOLDER`` (``~/.cache`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specproof" / folder


def venv_dir(variable: str, folder: str) -> Path:
    """The environment: ``$VARIABLE``, else ``venv`` under :func:`cache_root`."""
    return Path(os.environ.get(variable) or cache_root(folder) / "venv")


def python(venv: Path) -> Path:
    return venv / "bin" / "python"


def dist_version(py: Path, dist: str) -> tuple[str | None, str]:
    """The version of ``dist`` in the environment of ``py`` (None when absent), and what the
    probe printed."""
    probe = f"import importlib.metadata as m; print(m.version({dist!r}))"
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, timeout=120)
    text = (out.stdout or out.stderr).strip()
    return (text if out.returncode == 0 else None), text[-200:]


def pip(py: Path, args: Sequence[str], log: Path, error: type[Exception]) -> None:
    """``pip ARGS`` in the environment of ``py``, its output appended to ``log``; ``error``
    raised with the log's tail when it fails."""
    with open(log, "a") as f:
        f.write(f"$ pip {' '.join(args)}\n")
        f.flush()
        done = subprocess.run([str(py), "-m", "pip", *args], stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-25:])
        raise error(f"pip {' '.join(args[:3])} ... failed; {log}:\n{tail}")
