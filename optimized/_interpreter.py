"""Make Triton's CPU interpreter cheaper on this package's device functions, while they run.

Under ``TRITON_INTERPRET=1`` every call of a ``@triton.jit`` device function re-patches the
``triton.language`` modules its globals name (an ``inspect.getmembers`` scan of each), about
1.7 ms per call: half of a tree kernel's time. Those patches outlive the call (only a launch's
own patches of ``triton.language`` are undone, and each launch redoes them), so after a
module's first device call the re-patch changes nothing. :func:`enable` skips it from the second
call on, for functions defined in ``specproof.*`` and in ``triton.language`` itself (``tl.zeros``,
``tl.sum``, ``tl.cumsum`` are device functions there), and returns the function that undoes it:
:func:`specproof._triton.own_kernels` enables it only while specproof's kernels run, so a
third-party or user kernel interpreted in the same process runs under Triton's own code.
"""

from __future__ import annotations

from collections.abc import Callable

OURS = ("specproof.", "triton.language")
_patched_once: set[str] = set()


def _interpreted_language(interpreter: object) -> Callable[[], None]:
    """``triton.language``'s own device functions (``tl.sum``, ``tl.cumsum``, ``tl.cdiv``, ...)
    are decorated when Triton is imported: compiled-mode functions if it was imported without
    ``TRITON_INTERPRET`` (``torch._dynamo`` imports it early), which an interpreted kernel cannot
    call. Swap each for its interpreted twin; return the undo."""
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    interpreted = interpreter.InterpretedFunction  # type: ignore[attr-defined]
    swapped: list[tuple[object, str, object]] = []
    for module in (tl, tl.standard, tl.core, tl.math, tl.random):
        for name, value in list(vars(module).items()):
            if isinstance(value, JITFunction):
                swapped.append((module, name, value))
                setattr(module, name, interpreted(value.fn))

    def undo() -> None:
        for module, name, value in reversed(swapped):
            setattr(module, name, value)

    return undo


def enable() -> Callable[[], None] | None:
    """Install the shortcut (and interpreted ``triton.language`` device functions where Triton
    was imported in compiled mode); returns the undo, or None (changing nothing) if the
    interpreter's layout is not the one this was written against or the shortcut is already on."""
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover
        return None
    cls = getattr(interpreter, "InterpretedFunction", None)
    if cls is None or not hasattr(interpreter, "_patch_lang") or getattr(cls, "_specproof_fast", False):
        return None
    language_undo = _interpreted_language(interpreter)
    original = cls.__call__

    def call(self, *args, **kwargs):
        module = getattr(self.fn, "__module__", "") or ""
        if module in _patched_once:
            fn = self.rewrite()
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                raise interpreter.InterpreterError(repr(e)) from e
        if module.startswith(OURS):
            _patched_once.add(module)
        return original(self, *args, **kwargs)

    cls.__call__ = call
    cls._specproof_fast = True

    def undo() -> None:
        cls.__call__ = original
        cls._specproof_fast = False
        language_undo()

    return undo


def install() -> bool:
    """The shortcut for the rest of the process (benchmarks of the interpreter only)."""
    return enable() is not None
