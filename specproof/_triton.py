"""Triton settings for specproof's own kernels, applied only while they are defined or run.

specproof's kernels need two things from Triton: the CPU interpreter where no GPU compiles them
(``TRITON_INTERPRET=1``, read when a kernel is decorated), and no fused multiply-add when they
compile (``TRITON_DEFAULT_FP_FUSION=0``: they round every product and sum as the reference does).
Setting either for the whole process would change how a user's own Triton verifier is compiled
and run, so :func:`own_kernels` sets them for the duration of a block and restores the previous
values after (nested and thread-safe through a depth count). Importing specproof, listing
backends or auditing a user's verifier leaves Triton's environment as it was
(tests/test_audit_instrument.py checks this).

The interpreter decision: ``TRITON_INTERPRET`` as the user set it, if set; otherwise the
interpreter exactly when CUDA is absent.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator

_lock = threading.RLock()
_depth = 0
_saved: dict[str, str | None] = {}
_undo: list[Callable[[], None]] = []


def interpret_wanted() -> bool:
    """Should specproof's kernels run under Triton's interpreter here?"""
    value = os.environ.get("TRITON_INTERPRET")
    if value is not None and not (_depth and "TRITON_INTERPRET" in _saved):
        return value not in ("", "0")
    if _depth and _saved.get("TRITON_INTERPRET") is not None:
        return _saved["TRITON_INTERPRET"] not in ("", "0")
    import torch

    return not torch.cuda.is_available()


@contextlib.contextmanager
def own_kernels(interpret: bool | None = None, fp_fusion: bool = False) -> Iterator[None]:
    """Within the block: the interpreter as decided (:func:`interpret_wanted`), no FP fusion
    (unless ``fp_fusion``), and the interpreter's per-call shortcut for specproof's device
    functions (:mod:`specproof.optimized._interpreter`). Restored on exit."""
    global _depth
    with _lock:
        if _depth == 0:
            want: dict[str, str] = {}
            if interpret if interpret is not None else interpret_wanted():
                want["TRITON_INTERPRET"] = "1"
            if not fp_fusion:
                want["TRITON_DEFAULT_FP_FUSION"] = "0"
            _saved.clear()
            _saved.update({k: os.environ.get(k) for k in want})
            os.environ.update(want)
            if "TRITON_INTERPRET" in want:
                try:
                    from specproof.optimized._interpreter import enable

                    undo = enable()
                    if undo is not None:
                        _undo.append(undo)
                except ImportError:  # pragma: no cover - Triton absent
                    pass
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for key, value in _saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
                _saved.clear()
                while _undo:
                    _undo.pop()()
