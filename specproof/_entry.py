"""The ``specproof`` console command: :func:`specproof.properties.cli.main`, made safe to stop.

Ctrl-C at any moment, importing included, ends the command with exit status 4 and whatever the
command had written (an interrupted audit writes its JSON first). The process then ends without
running the interpreter's shutdown: a verifier call abandoned in a worker thread, or torch's own
thread pool, may still be inside native code, and tearing them down at exit aborts the process
("terminate called without an active exception", status 134) after the results were written.

A Ctrl-C that lands while the interpreter runs a destructor or a weakref callback (garbage
collection during an import, say) raises its KeyboardInterrupt there, where Python prints it as
"Exception ignored" and drops it: the command would go on as if never interrupted.
:func:`redeliver_swallowed_interrupts` hands such an interrupt back to the main thread.
"""

from __future__ import annotations

import _thread
import os
import sys
from typing import Any

INTERRUPTED = 4  # the documented status of an interrupted command (specproof.properties.verdicts)


def redeliver_swallowed_interrupts() -> None:
    """Make a KeyboardInterrupt that a destructor swallowed interrupt the main thread again, once
    the destructor has returned; every other unraisable exception goes to the previous hook."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            # from another thread, so that it lands after this hook and the destructor returned
            # (one that lands inside again comes back here and is handed on again)
            _thread.start_new_thread(_thread.interrupt_main, ())
            return
        previous(unraisable)

    sys.unraisablehook = hook


def entry() -> None:
    redeliver_swallowed_interrupts()
    try:
        from specproof.properties.cli import main

        code = main()
    except KeyboardInterrupt:
        print("specproof: interrupted", file=sys.stderr)
        code = INTERRUPTED
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
