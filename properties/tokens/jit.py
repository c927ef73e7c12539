"""The token test's loops compiled by numba, once a process.

numba is imported at the first use (about half a second) rather than when the package is: most
commands never score a token. Compiled code is kept in numba's cache (beside the module, or in
the user's cache where that is read-only), so a later process loads it instead of compiling.
"""

from __future__ import annotations

import sys
import threading
from types import SimpleNamespace
from typing import Any

_DONE: dict[str, SimpleNamespace] = {}
#: one compile at a time: two threads' first draws would rebind a module's helpers twice
_LOCK = threading.Lock()


def compiled(
    module: str, names: tuple[str, ...], helpers: tuple[str, ...] = (), **options: Any
) -> SimpleNamespace:
    """The functions ``names`` of ``module`` compiled (``options``: numba's, beside caching and
    releasing the GIL). The ``helpers`` they call are compiled first and rebound in the module, so
    that a compiled function calls them compiled (the plain functions then call them compiled too,
    with the same results)."""
    done = _DONE.get(module)
    if done is not None:
        return done
    with _LOCK:
        done = _DONE.get(module)
        if done is not None:
            return done
        import numba

        jit = numba.njit(cache=True, nogil=True, **options)
        space = sys.modules[module].__dict__
        for name in helpers:
            space[name] = jit(space[name])
        done = _DONE[module] = SimpleNamespace(
            **{name: space[name] if name in helpers else jit(space[name]) for name in names}
        )
    return done
