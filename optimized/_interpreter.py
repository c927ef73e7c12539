"""Make Triton's CPU interpreter cheaper on this package's device functions.

Under ``TRITON_INTERPRET=1`` every call of a ``@triton.jit`` device function re-patches the
``triton.language`` modules its globals name (an ``inspect.getmembers`` scan of each), about
1.7 ms per call: half of a tree kernel's time. Those patches outlive the call (only a launch's
own patches of ``triton.language`` are undone, and each launch redoes them), so after a
module's first device call the re-patch changes nothing. This skips it from the second call on,
for functions defined in ``specproof.*`` and in ``triton.language`` itself (``tl.zeros``,
``tl.sum``, ``tl.cumsum`` are device functions there). Functions of any other package (a
third-party kernel audited in the same process) are left alone.
"""

from __future__ import annotations

OURS = ("specproof.", "triton.language")


def install() -> bool:
    """Install the shortcut; returns False (and changes nothing) if the interpreter's layout is
    not the one this was written against."""
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover
        return False
    cls = getattr(interpreter, "InterpretedFunction", None)
    if cls is None or not hasattr(interpreter, "_patch_lang") or getattr(cls, "_specproof_fast", False):
        return False
    original = cls.__call__
    patched_once: set[str] = set()

    def call(self, *args, **kwargs):
        module = getattr(self.fn, "__module__", "") or ""
        if module in patched_once:
            fn = self.rewrite()
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                raise interpreter.InterpreterError(repr(e)) from e
        if module.startswith(OURS):
            patched_once.add(module)
        return original(self, *args, **kwargs)

    cls.__call__ = call
    cls._specproof_fast = True
    return True
