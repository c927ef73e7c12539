"""The ``specproof`` console command: :func:`specproof.properties.cli.main`, made safe to stop.

Ctrl-C at any moment, importing included, ends the command with exit status 4 and whatever the
command had written (an interrupted audit writes its JSON first). The process then ends without
running the interpreter's shutdown: a verifier call abandoned in a worker thread, or torch's own
thread pool, may still be inside native code, and tearing them down at exit aborts the process
("terminate called without an active exception", status 134) after the results were written.
"""

from __future__ import annotations

import os
import sys

INTERRUPTED = 4  # the documented status of an interrupted command (specproof.properties.verdicts)


def entry() -> None:
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
