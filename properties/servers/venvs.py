"""What the engines kept in environments of their own share: where each lives (under the cache,
outside the clone, or where an environment variable says), its Python, the version of a
distribution installed there, pip run in it with a log (:class:`PinnedVenv`: one tier's environment,
declared once), and the workers that run there
(:class:`JsonLinesWorker`: every worker's stderr kept in a log file of its own, whose tail a
failure quotes; :class:`WorkerFault`: what a failed worker raises)."""

from __future__ import annotations

import atexit
import collections
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from specproof.reference.errors import ArgumentTypeError, SpecproofError

#: worker logs kept per folder (the newest; older ones are removed when a worker starts)
KEEP_LOGS = 64
#: lines of a worker's stderr (and of its stdout that was not JSON) quoted when it fails
TAIL_LINES = 25


class WorkerFault(SpecproofError, RuntimeError):
    """A tier's environment or worker failed: it could not be built or started, the worker
    exited, or it answered an error. Never an answer of the engine it drives: the engine audit
    ends ``error`` on it, with this message quoted, and that verdict never agrees with a declared
    expectation (a crashed worker once read as the ``contract_violation`` an engine was declared
    to have). Each tier's error class derives from it (``MistralRSError``, ``OpenVINOError``,
    ``VLLMError``)."""


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


def worker_log(folder: Path, tag: str) -> Path:
    """A new log file for one worker's stderr: ``FOLDER/TAG-PID-N.log`` (N counts this process's
    workers), the folder made; logs beyond the newest :data:`KEEP_LOGS` there are removed."""
    folder.mkdir(parents=True, exist_ok=True)
    old = sorted(folder.glob("*.log"), key=_mtime, reverse=True)
    for stale in old[KEEP_LOGS - 1 :]:
        stale.unlink(missing_ok=True)
    return folder / f"{tag}-{os.getpid()}-{next(_LOG_SEQ)}.log"


_LOG_SEQ = itertools.count(1)


def _mtime(path: Path) -> float:
    """When ``path`` was last written (0 for one another process removed meanwhile)."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def tail(path: Path | None, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of the file at ``path`` ('' when absent), read from its end."""
    if path is None or not path.exists():
        return ""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 64 * 1024))
        text = f.read().decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def pip(py: Path, args: Sequence[str], log: Path, error: type[Exception]) -> None:
    """``pip ARGS`` in the environment of ``py``, its output appended to ``log``; ``error``
    raised with the log's tail when it fails."""
    with open(log, "a") as f:
        f.write(f"$ pip {' '.join(args)}\n")
        f.flush()
        done = subprocess.run([str(py), "-m", "pip", *args], stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise error(f"pip {' '.join(args[:3])} ... failed; {log}:\n{tail(log)}")


class PinnedVenv:
    """One engine tier's environment, declared once (after nox's ``ProcessEnv``): a class names
    the distribution that marks it (:attr:`dist` at :attr:`version`), the environment variable
    that points at another one, its folder under the cache, its error class, and the command
    that installs it; :meth:`steps` runs its pip installs. The rest is the same for every tier:
    where it lives, its Python, whether it holds what it must, and :meth:`install`, which builds
    it in a folder beside the final one and moves it there only once it holds what it must (a
    failed or interrupted build never looks installed)."""

    #: the distribution whose version says the environment is there, and that version
    dist = ""
    version = ""
    #: other distributions the environment must hold (any version)
    also: tuple[str, ...] = ()
    #: whether a version that starts with :attr:`version` is it (a build suffix allowed)
    version_prefix = False
    #: the environment variable naming an environment to use instead of the cache's
    variable = ""
    #: the folder under :func:`cache_root`
    folder = ""
    #: the tier's name in messages, and the command that installs it
    label = ""
    command = ""
    #: what :meth:`install` announces beside the version (its size, say)
    about = ""
    error: type[WorkerFault] = WorkerFault

    def cache_root(self) -> Path:
        return cache_root(self.folder)

    def venv_dir(self) -> Path:
        """The environment: ``$VARIABLE``, else ``venv`` under :meth:`cache_root`."""
        return venv_dir(self.variable, self.folder)

    def python(self, venv: Path | None = None) -> Path:
        return python(venv or self.venv_dir())

    def installed(self, venv: Path | None = None) -> tuple[bool, str]:
        """Whether the environment holds :attr:`dist` at :attr:`version` and each of :attr:`also`
        (its version when so; else why not, naming :attr:`command`)."""
        py = self.python(venv)
        if not py.exists():
            return False, f"no {self.label} environment at {py.parent.parent} ({self.command})"
        found, said = dist_version(py, self.dist)
        prefix = self.version_prefix and found is not None and found.startswith(self.version)
        if found != self.version and not prefix:
            return False, f"{py} has no {self.dist} {self.version} ({said}; {self.command})"
        for other in self.also:
            if dist_version(py, other)[0] is None:
                return False, f"{py} has no {other} package ({self.command})"
        return True, str(found)

    def pip(self, py: Path, args: Sequence[str], log: Path) -> None:
        """``pip ARGS`` in the environment of ``py`` (:func:`pip`, raising :attr:`error`)."""
        pip(py, args, log, self.error)

    def steps(self, py: Path, log: Path, progress: Callable[[str], None]) -> None:
        """The tier's installs into the new environment of ``py``, each logged to ``log``."""
        raise NotImplementedError(f"{type(self).__name__} names no install steps")

    def install(self, venv: Path | None = None, progress: Callable[[str], None] = print) -> Path:
        """Build the environment unless it is there; return its Python. Raises :attr:`error`
        (pip's log quoted) when it cannot be built or holds less than it must."""
        venv = venv or self.venv_dir()
        if self.installed(venv)[0]:
            progress(f"{self.dist} {self.version} is installed in {venv}")
            return self.python(venv)
        tmp = venv.with_name(venv.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        log = tmp.parent / "install.log"
        log.write_text("")
        t0 = time.monotonic()
        about = f": {self.about}" if self.about else ""
        progress(f"creating {venv} ({self.dist} {self.version}{about}; log {log})")
        made = subprocess.run(
            [sys.executable, "-m", "venv", "--prompt", venv.name, str(tmp)], capture_output=True, text=True
        )
        if made.returncode != 0:
            raise self.error(f"python -m venv {tmp} failed: {(made.stderr or made.stdout)[-1000:]}")
        self.steps(self.python(tmp), log, progress)
        shutil.rmtree(venv, ignore_errors=True)
        tmp.rename(venv)
        _repoint_scripts(venv, tmp)
        ok, why = self.installed(venv)
        if not ok:
            raise self.error(f"the environment was built but does not hold what it needs: {why}")
        progress(f"{self.dist} {self.version} installed in {venv} in {time.monotonic() - t0:.0f} s")
        return self.python(venv)


def _repoint_scripts(venv: Path, old: Path) -> None:
    """A venv's scripts name its folder: point those of ``venv``, built at ``old``, at ``venv``."""
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            try:
                text = script.read_text()
            except UnicodeDecodeError:
                continue
            if str(old) in text:
                script.write_text(text.replace(str(old), str(venv)))


class WorkerPool:
    """Workers of another environment kept by key (a pipeline, a runner: each costs seconds to
    start), closed by :meth:`close` or when the process exits. Close them when done: an idle
    worker may still take a core (mistral.rs's runner spins while it waits); an engine's spec
    closes its adapter's pool when its audit ends (``EngineSpec.close``)."""

    def __init__(self, start: Callable[[Any], Any]) -> None:
        self.workers: dict[Any, JsonLinesWorker] = {}
        self.start = start  # start(key): a new worker for key
        atexit.register(self.close)

    def get(self, key: Any) -> Any:
        """The live worker of ``key``, started by ``start(key)`` where there is none (or it died)."""
        w = self.workers.get(key)
        if w is None or w.proc.poll() is not None:
            w = self.workers[key] = self.start(key)
        return w

    def identity(self, key: Any, field: str) -> Any:
        """``field`` of the live worker of ``key``'s first line (its versions), None where there
        is none yet."""
        w = self.workers.get(key)
        return None if w is None else w.identity.get(field)

    def close(self, keep: Callable[[Any], bool] = lambda key: False) -> None:
        """Close every worker whose key ``keep`` does not keep."""
        for key in [k for k in self.workers if not keep(k)]:
            self.workers.pop(key).close()


class JsonLinesWorker:
    """A worker process of another environment that answers one JSON object a line: ``cmd``
    started, its first JSON line (``{"ready": true, ...}``) kept as ``identity``; ``request``
    writes one request and reads its answer (lines that are not JSON objects, a native library's
    log, are skipped; the last :data:`TAIL_LINES` are kept); ``env``: its environment (this
    process's by default). Use as a context manager, or :meth:`close` (``{"op": "quit"}``, then a
    kill).

    The worker's stderr goes to the file ``log`` (:func:`worker_log` makes one), kept after it
    ends. Every failure raises ``error`` (a :class:`WorkerFault` class), named ``what``: a worker
    that did not start or exited, with its exit code, the tail of its stderr's log and the last
    lines of its stdout that were not JSON; an answer with ``error``, quoted, with the same log's
    tail (the worker scripts print the traceback there)."""

    def __init__(
        self,
        cmd: Sequence[str],
        error: type[WorkerFault],
        what: str,
        log: Path,
        env: dict[str, str] | None = None,
    ) -> None:
        if not (isinstance(error, type) and issubclass(error, WorkerFault)):
            raise ArgumentTypeError(f"error: {error!r} is not a WorkerFault class (a tier's error class)")
        self.error, self.what, self.log = error, what, Path(log)
        self.stdout_tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "w") as err:  # the child holds its own descriptor
            self.proc = subprocess.Popen(
                list(cmd),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                bufsize=1,
                env=env,
            )
        try:
            ready = self._read()
        except WorkerFault as e:
            raise error(f"the {what} worker did not start: {e}") from e
        if not ready.get("ready"):
            self.close()
            raise error(f"the {what} worker did not start: {ready}{self._quoted()}")
        self.identity = ready

    def _quoted(self) -> str:
        """The tail of the worker's stderr log and its last stdout lines that were not JSON, as
        the end of an error message."""
        out = ""
        said = tail(self.log)
        if said:
            out += f"\n--- the tail of its stderr ({self.log}):\n{said}"
        else:
            out += f"\n--- its stderr ({self.log}) is empty"
        if self.stdout_tail:
            out += "\n--- its last stdout lines that were not JSON:\n" + "\n".join(self.stdout_tail)
        return out

    def _read(self) -> dict[str, Any]:
        out: IO[str] | None = self.proc.stdout
        assert out is not None
        while True:
            line = out.readline()
            if not line:
                try:
                    code: int | str = self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:  # stdout closed, the process still there
                    self.proc.kill()
                    code = f"none: it closed its stdout and was killed, {self.proc.wait()}"
                raise self.error(f"the {self.what} worker exited (code {code}){self._quoted()}")
            if line.startswith("{"):
                try:
                    answer: dict[str, Any] = json.loads(line)
                    return answer
                except json.JSONDecodeError:  # a log line that starts with a brace
                    pass
            self.stdout_tail.append(line.rstrip("\n"))

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(req) + "\n")
            stdin.flush()
        except (BrokenPipeError, OSError):  # it is gone: say how it ended
            pass
        answer = self._read()
        if "error" in answer:
            raise self.error(f"{self.what} answered an error: {answer['error']}{self._quoted()}")
        return answer

    def close(self) -> None:
        """Ask the worker to quit (10 s), else kill it; its pipes are closed, its log kept."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def __enter__(self) -> JsonLinesWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
