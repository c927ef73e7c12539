"""Writing results: output paths checked before a run, files written atomically.

An audit can run for many minutes; a path that cannot be written must be refused before the
first sample, not after the last. Every file specproof writes goes through :func:`atomic_write`
(a temporary file in the same folder, then a rename), so a reader never sees half a file and an
interrupted run leaves either the old file or the new one.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from specproof.reference.errors import UsageError

#: report formats by file ending; anything else is refused (a report is never silently
#: written in a format its name does not say)
REPORT_FORMATS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "markdown",
    ".html": "html",
    ".htm": "html",
    ".json": "json",
}


def check_output_path(path: str | None, option: str) -> None:
    """Fail before the run if ``path`` cannot be written: a missing folder, a folder that is
    not writable (checked by creating and removing a file in it, which also catches
    filesystems that refuse writes whatever their permission bits say), or a folder at
    ``path`` itself."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"{option}: the folder {folder!r} does not exist")
    if os.path.isdir(path):
        raise UsageError(f"{option}: {path!r} is a folder, not a file")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"{option}: {path!r} exists and is not writable")
    try:
        fd, probe = tempfile.mkstemp(prefix=".specproof-probe-", dir=folder)
    except OSError as e:
        raise UsageError(f"{option}: cannot write in the folder {folder!r} ({e.strerror or e})") from e
    os.close(fd)
    os.unlink(probe)


def report_format(path: str, option: str = "--report") -> str:
    """``"markdown"``, ``"html"`` or ``"json"`` by the file's ending; another ending is a usage
    error."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in REPORT_FORMATS:
        known = ", ".join(sorted(REPORT_FORMATS))
        raise UsageError(f"{option}: {path!r} has no report ending ({known})")
    return REPORT_FORMATS[ext]


def _plain_mode() -> int:
    """The mode ``open(path, "w")`` would give a new file: 0o666 less the process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename.

    The file gets the mode a plain ``open`` would give it (a temporary file is private by
    default, which would leave reports unreadable to the rest of a team)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".specproof-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, _plain_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: str, data: Any) -> None:
    """``data`` as indented JSON with a final newline, written atomically."""
    atomic_write(path, json.dumps(data, indent=2) + "\n")


def versions(
    packages: tuple[str, ...] = ("specproof", "torch"), missing: str | None = None
) -> dict[str, str]:
    """What a result was measured with: Python, the machine's architecture and each package's
    installed version (``missing`` for one that is not installed; left out when ``missing`` is
    None)."""
    import importlib.metadata
    import platform

    out = {"python": platform.python_version(), "machine": platform.machine()}
    for pkg in packages:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            if missing is not None:
                out[pkg] = missing
    return out
