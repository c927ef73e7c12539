"""Importing what a user names on the command line: ``path/to/file.py`` or a dotted module.

One helper for the three places that resolve a user's ``WHERE:NAME`` (a verifier for
``specproof audit``, an engine for ``specproof audit engine``, a rule for ``specproof rule``);
each wraps the message in its own error, so the argument it names stays the caller's.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from types import ModuleType


def import_where(where: str, fail: Callable[[str], Exception], prefix: str) -> ModuleType:
    """The module at ``where``: a file (``*.py``, or any path with a separator), imported as
    ``prefix`` + its file name made an identifier, or else a dotted module name. Every failure
    (no such file, an import that raises) raises ``fail(message)``; a file whose import raised
    leaves nothing in ``sys.modules``.

    What the user's code imports resolves as it would under ``python``: a file's own folder is
    put first on ``sys.path`` (so a verifier split over two files, one importing its sibling,
    loads), and so is the working folder for a dotted module (the ``specproof`` command, unlike
    ``python -m``, does not have it there)."""
    if where.endswith(".py") or os.sep in where:
        if not os.path.isfile(where):
            raise fail(f"no file {where!r}")
        _on_path(os.path.dirname(os.path.abspath(where)))
        stem = re.sub(r"[^0-9a-zA-Z]+", "_", os.path.splitext(os.path.basename(where))[0]).strip("_")
        name = prefix + (stem.lower() or "module")
        spec = importlib.util.spec_from_file_location(name, where)
        if spec is None or spec.loader is None:
            raise fail(f"cannot import {where!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[name]
            raise fail(f"importing {where!r} raised {type(e).__name__}: {e}") from e
        return module
    _on_path(os.getcwd())
    try:
        return importlib.import_module(where)
    except Exception as e:
        raise fail(f"cannot import module {where!r}: {type(e).__name__}: {e}") from e


def _on_path(folder: str) -> None:
    if folder not in sys.path:
        sys.path.insert(0, folder)
