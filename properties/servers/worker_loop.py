"""The JSON-lines loop every tier's worker runs (the mistral.rs, OpenVINO GenAI and ONNX Runtime
GenAI workers). Standalone, the standard library alone: a worker runs in its tier's environment,
which has no specproof, and loads this file from beside it (:func:`load` there); the project's
side is :class:`.venvs.JsonLinesWorker`.

:func:`answer_requests` prints the worker's first line (``{"ready": true, ...}``), then answers one
JSON request a line until ``{"op": "quit"}`` or the end of its input: each answer is what the
worker's handler returns; an exception of one of the ``engine_errors`` (what the engine's own calls
raise while the worker stays sound) answers ``{"raised": "Type: message"}``, the engine's answer,
which the adapter reports as the engine's; any other exception answers ``{"error": "..."}``, the
worker's fault. Both tracebacks go to stderr (the worker's log, whose tail a failure quotes), and
the worker goes on to the next request."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any, TextIO


def answer_requests(
    ready: dict[str, Any],
    handle: Callable[[dict[str, Any]], dict[str, Any]],
    engine_errors: tuple[type[BaseException], ...] = (),
    lines: TextIO | None = None,
    out: TextIO | None = None,
) -> None:
    """The loop (module docstring) over ``lines`` (stdin), answers to ``out`` (stdout)."""
    lines, out = lines or sys.stdin, out or sys.stdout
    print(json.dumps({"ready": True, **ready}), file=out, flush=True)
    for line in lines:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if req.get("op") == "quit":
                break
            try:
                answer = handle(req)
            except engine_errors as e:
                traceback.print_exc(file=sys.stderr)
                answer = {"raised": f"{type(e).__name__}: {e}"}
        except Exception as e:  # said to the caller, who decides; the traceback to the log
            traceback.print_exc(file=sys.stderr)
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(answer), file=out, flush=True)
