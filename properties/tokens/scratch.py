"""Arrays the token test writes its large temporaries into, kept from call to call.

A fresh array of a few hundred kilobytes or more is mapped anew by the allocator and its pages
are touched for the first time on every call: for the mean bettors' ``[bets, tokens]`` factors
and a block of laws' logarithms that cost several times the arithmetic. One array a name and a
thread is kept, up to :data:`KEPT` entries; a larger one is made fresh.
"""

from __future__ import annotations

import threading

import numpy as np

#: the most entries (8 MB of float64) kept for one name
KEPT = 1 << 20

_LOCAL = threading.local()


def scratch(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised float64 array of ``shape`` to write into, C-contiguous: the one kept for
    ``name`` in this thread where it is large enough."""
    n = int(np.prod(shape))
    kept: dict[str, np.ndarray] = _LOCAL.__dict__.setdefault("kept", {})
    flat = kept.get(name)
    if flat is None or len(flat) < n:
        flat = np.empty(n)
        if n <= KEPT:
            kept[name] = flat
    return flat[:n].reshape(shape)
