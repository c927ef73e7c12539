"""What the engines kept in environments of their own share: where each lives (under the cache,
outside the clone, or where an environment variable says), its Python, the version of a
distribution installed there, and pip run in it with a log."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any


def cache_root(folder: str) -> Path:
    """``$XDG_CACHE_HOME/specproof/FOLDER`` (``~/.cache`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specproof" / folder


def venv_dir(variable: str, folder: str) -> Path:
    """The environment: ``$VARIABLE``, else ``venv`` under :func:`cache_root`."""
    return Path(os.environ.get(variable) or cache_root(folder) / "venv")


def python(venv: Path) -> Path:
    return venv / "bin" / "python"


def dist_version(py: Path, dist: str) -> tuple[str | None, str]:
    """The version of ``dist`` in the environment of ``py`` (None when absent), and what the
    probe printed."""
    probe = f"import importlib.metadata as m; print(m.version({dist!r}))"
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, timeout=120)
    text = (out.stdout or out.stderr).strip()
    return (text if out.returncode == 0 else None), text[-200:]


def pip(py: Path, args: Sequence[str], log: Path, error: type[Exception]) -> None:
    """``pip ARGS`` in the environment of ``py``, its output appended to ``log``; ``error``
    raised with the log's tail when it fails."""
    with open(log, "a") as f:
        f.write(f"$ pip {' '.join(args)}\n")
        f.flush()
        done = subprocess.run([str(py), "-m", "pip", *args], stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-25:])
        raise error(f"pip {' '.join(args[:3])} ... failed; {log}:\n{tail}")


class WorkerPool:
    """Workers of another environment kept for the process by key (a pipeline, a runner: each
    costs seconds to start), closed when the process exits or by :meth:`close`. Close them when
    done: an idle worker may still take a core (mistral.rs's runner spins while it waits)."""

    def __init__(self) -> None:
        self.workers: dict[Any, JsonLinesWorker] = {}
        atexit.register(self.close)

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        """The live worker of ``key``, started by ``make()`` where there is none (or it died)."""
        w = self.workers.get(key)
        if w is None or w.proc.poll() is not None:
            w = self.workers[key] = make()
        return w

    def close(self, keep: Callable[[Any], bool] = lambda key: False) -> None:
        """Close every worker whose key ``keep`` does not keep."""
        for key in [k for k in self.workers if not keep(k)]:
            self.workers.pop(key).close()


class JsonLinesWorker:
    """A worker process of another environment that answers one JSON object a line: ``cmd``
    started, its first JSON line (``{"ready": true, ...}``) kept as ``identity``; ``request``
    writes one request and reads its answer (lines that are not JSON objects, a native library's
    log, are skipped); an answer with ``error`` raises ``error`` (a project error class) named
    ``what``. ``tail_stderr``: read the worker's stderr into the message when it exits (else it is
    discarded); ``log``: a file its stderr is written to instead (a worker that logs a lot), whose
    tail the message quotes; ``env``: its environment (this process's by default). Use as a
    context manager, or :meth:`close` (``{"op": "quit"}``, then a kill)."""

    def __init__(
        self,
        cmd: Sequence[str],
        error: type[Exception],
        what: str,
        tail_stderr: bool = True,
        log: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.error, self.what, self.log = error, what, log
        err: Any = subprocess.PIPE if tail_stderr else subprocess.DEVNULL
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            err = open(log, "w")  # the child holds its own descriptor; ours is closed below
        try:
            self.proc = subprocess.Popen(
                list(cmd),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                bufsize=1,
                env=env,
            )
        finally:
            if log is not None:
                err.close()
        ready = self._read()
        if not ready.get("ready"):
            self.close()
            raise error(f"the {what} worker did not start: {ready}")
        self.identity = ready

    def _read(self) -> dict[str, Any]:
        out: IO[str] | None = self.proc.stdout
        assert out is not None
        while True:
            line = out.readline()
            if not line:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                if self.log is not None and self.log.exists():
                    err = self.log.read_text(errors="replace")
                raise self.error(
                    f"the {self.what} worker exited (code {self.proc.wait()}) {err[-2000:]}".rstrip()
                )
            if line.startswith("{"):
                answer: dict[str, Any] = json.loads(line)
                return answer

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        stdin = self.proc.stdin
        assert stdin is not None
        stdin.write(json.dumps(req) + "\n")
        stdin.flush()
        answer = self._read()
        if "error" in answer:
            raise self.error(f"{self.what}: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()

    def __enter__(self) -> JsonLinesWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
