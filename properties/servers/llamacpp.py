"""llama.cpp built from source, pinned and cached, and a loopback ``llama-server`` for the endpoint audit.

The source is the ``llama-cpp-python`` sdist of :data:`VERSION` (it vendors the whole llama.cpp
tree, at commit :data:`LLAMA_CPP_COMMIT`), fetched once with ``pip download`` and checked
against :data:`SDIST_SHA256`. :func:`ensure_built` builds the binaries of :data:`TARGETS` with
cmake and ninja (CPU only, ``GGML_NATIVE=OFF``, static, no TLS, no web UI, Release, ``-j2``)
after one small edit of the vendored tree (:data:`PATCHES`: a unified KV cache for
``llama-speculative``, whose multi-draft mode aborts without it at this commit) into
``${SPECPROOF_CACHE:-~/.cache/specproof}/llama.cpp/<VERSION>-<flags hash>/``: the build runs
in a temporary folder next to it and is renamed into place when complete, under an exclusive
``fcntl.flock`` so that concurrent test workers build once. A marker file
(:data:`MARKER`) records the version, commit, flags and build time.

:func:`start_server` runs ``llama-server`` on 127.0.0.1 only, waits for ``/health`` and stops it
on exit. Command line: ``specproof llamacpp build`` (build if needed, print the folder) and
``specproof llamacpp info`` (version, commit, cached or not).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specproof.reference.errors import SpecproofError

VERSION = "0.3.36"  # llama-cpp-python release whose sdist vendors llama.cpp
LLAMA_CPP_COMMIT = "0c1e57098"  # vendored llama.cpp commit (the sdist's CHANGELOG for 0.3.36)
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
TARGETS = ("llama-server", "llama-speculative", "llama-speculative-simple", "llama-tokenize")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",  # portable: x86-64 baseline with AVX2/FMA/F16C/BMI2, no AVX-512
    "-DBUILD_SHARED_LIBS=OFF",  # self-contained binaries that survive the rename into the cache
    "-DLLAMA_OPENSSL=OFF",  # no TLS: the server only ever listens on loopback (curl is gone here)
    "-DLLAMA_BUILD_UI=OFF",  # no npm
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # no download of the web UI at build time
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_EXAMPLES=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    f"-DLLAMA_BUILD_COMMIT={LLAMA_CPP_COMMIT}",
    "-DLLAMA_BUILD_NUMBER=0",
)
# Build-time edits of the vendored tree, none in sampling or verification. (file, anchor
# statement, statement inserted before it)
# * llama-speculative with ``-np`` > 1 (several draft branches) puts tokens shared by branches in one
#   batch, which this llama.cpp accepts only with a unified KV cache, and the example offers no
#   ``-kvu`` flag (without it: "sequential split is not supported ..." and an abort). The edit
#   turns the unified cache on.
# * Both examples print through common's logger, whose queue a thread writes out and which is
#   never stopped at exit (the singleton is leaked on purpose), so what is still queued when main
#   returns is lost: on 2 cores beside two busy processes, 23 of 30 runs of llama-speculative and
#   26 of 30 of llama-speculative-simple lost their text, against 0 of 60 each with the edit,
#   which drains the queue (common_log_flush) before main returns
#   (scripts/llamacpp_output_loss.py).
_DRAIN = "common_log_flush(common_log_main());  // specproof: print what the logger still holds"
PATCHES = (
    (
        "examples/speculative/speculative.cpp",
        "const int n_seq_dft = params.n_parallel;",
        "params.kv_unified = true;  // specproof: draft branches share target tokens",
    ),
    ("examples/speculative/speculative.cpp", "return 0;\n}", _DRAIN),
    ("examples/speculative-simple/speculative-simple.cpp", "return 0;\n}", _DRAIN),
)
JOBS = 2
MARKER = "specproof-build.json"
LOCK = ".build.lock"
HOST = "127.0.0.1"


class LlamaCppBuildError(SpecproofError, RuntimeError):
    """The pinned llama.cpp could not be fetched or built; the message ends with the log's tail."""


class LlamaServerError(SpecproofError, RuntimeError):
    """``llama-server`` did not become healthy (or died); the message ends with its stderr's tail."""


class LlamaRunError(SpecproofError, RuntimeError):
    """A llama.cpp command-line program failed or kept losing its output; the message has stderr's tail."""


def flags_hash() -> str:
    """Short hash of what changes the binaries: version, commit, flags, targets, patches, machine."""
    key = json.dumps([VERSION, LLAMA_CPP_COMMIT, CMAKE_FLAGS, TARGETS, PATCHES, platform.machine()])
    return hashlib.sha256(key.encode()).hexdigest()[:10]


def cache_root() -> Path:
    """``${SPECPROOF_CACHE:-~/.cache/specproof}/llama.cpp`` (outside the repository)."""
    base = os.environ.get("SPECPROOF_CACHE") or str(Path.home() / ".cache" / "specproof")
    return Path(base).expanduser() / "llama.cpp"


def build_dir() -> Path:
    """The folder that holds (or will hold) the binaries of this pinned build."""
    return cache_root() / f"{VERSION}-{flags_hash()}"


def is_built(folder: Path | None = None) -> bool:
    """Whether ``folder`` (default :func:`build_dir`) holds a complete build: marker and every binary."""
    folder = build_dir() if folder is None else folder
    return (folder / MARKER).is_file() and all((folder / t).is_file() for t in TARGETS)


def marker(folder: Path | None = None) -> dict[str, Any] | None:
    """The build's marker (version, commit, flags, seconds), or ``None`` when not built."""
    path = (build_dir() if folder is None else folder) / MARKER
    return json.loads(path.read_text()) if path.is_file() else None


def _tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file ('' when absent)."""
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


#: seconds between two progress lines of a long build step (ninja's ``[done/total]`` counts)
PROGRESS_EVERY = 30.0
_STEP = re.compile(rb"^\[(\d+)/(\d+)\]")


def _run_logged(
    cmd: Sequence[str],
    log: Path,
    cwd: Path | None = None,
    progress: Callable[[str], None] | None = None,
    every: float = PROGRESS_EVERY,
) -> None:
    """Run ``cmd`` with stdout and stderr appended to ``log``; raise the build error on failure.
    With ``progress``, a line such as ninja's ``[120/431] Building ...`` is said as "120 of 431
    steps" at most once every ``every`` seconds (and the last one), so a build of many minutes
    is seen moving."""
    start = last = time.monotonic()
    seen: tuple[int, int] | None = None
    said: tuple[int, int] | None = None
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            step = _STEP.match(line)
            if step is None or progress is None:
                continue
            seen = (int(step.group(1)), int(step.group(2)))
            now = time.monotonic()
            if now - last >= every:
                last, said = now, seen
                progress(_steps(seen, now - start))
        rc = proc.wait()
    if progress is not None and seen is not None and seen != said and rc == 0:
        progress(_steps(seen, time.monotonic() - start))
    if rc != 0:
        raise LlamaCppBuildError(f"`{' '.join(cmd)}` exited with {rc}; tail of {log}:\n{_tail(log)}")


def _steps(seen: tuple[int, int], seconds: float) -> str:
    done, total = seen
    return f"  {done} of {total} steps ({100 * done // max(1, total)}%), {seconds / 60:.1f} min"


def _sha256(path: Path) -> str:
    """Hex SHA-256 of a file."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_sdist(log: Path, progress: Callable[[str], None] = print) -> Path:
    """The pinned sdist, downloaded once with ``pip download`` into the cache and checked by SHA-256."""
    dest = cache_root() / "sdist"
    path = dest / SDIST
    if path.is_file() and _sha256(path) == SDIST_SHA256:
        return path
    dest.mkdir(parents=True, exist_ok=True)
    progress(f"downloading {SDIST} with pip (once)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    _run_logged([*cmd, f"llama-cpp-python=={VERSION}", "-d", str(dest)], log)
    if not path.is_file():
        raise LlamaCppBuildError(f"pip download did not produce {path}; tail of {log}:\n{_tail(log)}")
    digest = _sha256(path)
    if digest != SDIST_SHA256:
        path.unlink()
        raise LlamaCppBuildError(f"{SDIST} has SHA-256 {digest}, expected {SDIST_SHA256}")
    return path


def extract_llama_cpp(sdist: Path, dest: Path) -> Path:
    """Extract only ``vendor/llama.cpp`` of the sdist into ``dest``; return the llama.cpp source root."""
    prefix = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        if not members:
            raise LlamaCppBuildError(f"{sdist} holds no {prefix}")
        tar.extractall(dest, members=members, filter="data")
    root = dest / prefix
    if not (root / "CMakeLists.txt").is_file():
        raise LlamaCppBuildError(f"{root} has no CMakeLists.txt")
    return root


def apply_patches(root: Path) -> None:
    """Apply :data:`PATCHES` to the llama.cpp tree at ``root``; each anchor must occur exactly once."""
    for rel, anchor, statement in PATCHES:
        path = root / rel
        text = path.read_text()
        if statement in text:
            continue
        if text.count(anchor) != 1:
            raise LlamaCppBuildError(f"{path}: expected one `{anchor}`, found {text.count(anchor)}")
        indent = text[: text.index(anchor)].rsplit("\n", 1)[-1]
        path.write_text(text.replace(anchor, f"{statement}\n{indent}{anchor}"))


def _ninja() -> str:
    """Path of a ninja executable: on PATH, else the ``ninja`` pip package's."""
    found = shutil.which("ninja")
    if found:
        return found
    try:
        ninja = importlib.import_module("ninja")
    except ImportError as exc:
        raise LlamaCppBuildError("building llama.cpp needs ninja: install it (pip install ninja)") from exc
    return str(Path(ninja.BIN_DIR) / "ninja")


def _compile(src: Path, build: Path, log: Path, progress: Callable[[str], None] | None = None) -> None:
    """Configure with cmake and build :data:`TARGETS` with ninja, ``-j`` :data:`JOBS` (its steps
    said to ``progress`` as they go)."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise LlamaCppBuildError("building llama.cpp needs cmake >= 3.14 on PATH")
    ninja = _ninja()
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    _run_logged([cmake, "-S", str(src), "-B", str(build), *generator, *CMAKE_FLAGS], log)
    _run_logged([ninja, "-C", str(build), f"-j{JOBS}", *TARGETS], log, progress=progress)


def _build_into(final: Path, progress: Callable[[str], None]) -> None:
    """Fetch, extract and compile in a temporary sibling of ``final``, then rename it into place."""
    root = final.parent
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
    try:
        log = work / "build.log"
        start = time.monotonic()
        src = extract_llama_cpp(fetch_sdist(log, progress), work / "src")
        apply_patches(src)
        progress(f"building llama.cpp {LLAMA_CPP_COMMIT} ({', '.join(TARGETS)}) with -j{JOBS}; log: {log}")
        _compile(src, work / "build", log, progress)
        out = work / "out"
        out.mkdir()
        for target in TARGETS:
            binary = work / "build" / "bin" / target
            if not binary.is_file():
                raise LlamaCppBuildError(f"the build did not produce {binary}; tail of {log}:\n{_tail(log)}")
            shutil.copy2(binary, out / target)
        shutil.copy2(log, out / "build.log")
        seconds = round(time.monotonic() - start, 1)
        info = {
            "llama_cpp_python": VERSION,
            "llama_cpp_commit": LLAMA_CPP_COMMIT,
            "sdist_sha256": SDIST_SHA256,
            "cmake_flags": list(CMAKE_FLAGS),
            "targets": list(TARGETS),
            "patches": [list(p) for p in PATCHES],
            "machine": platform.machine(),
            "build_seconds": seconds,
            "jobs": JOBS,
        }
        (out / MARKER).write_text(json.dumps(info, indent=2) + "\n")
        os.rename(out, final)
        progress(f"built in {seconds} s: {final}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ensure_built(progress: Callable[[str], None] = print) -> Path:
    """The folder holding ``llama-server``, ``llama-speculative`` and the rest of :data:`TARGETS`.

    Builds once (minutes on 2 cores) and returns the cached folder afterwards; a concurrent
    caller waits on the lock and then finds the finished build.
    """
    final = build_dir()
    if is_built(final):
        return final
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / LOCK).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if is_built(final):
                return final
            if final.exists():
                shutil.rmtree(final)  # an incomplete folder left by hand: never by this module
            _build_into(final, progress)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return final


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    """Whether ``GET url/health`` answers 200 (the model is loaded)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def server_command(
    binary_dir: Path, model: Path, port: int, draft: Path | None = None, extra_args: Sequence[str] = ()
) -> list[str]:
    """The ``llama-server`` command line: loopback, one slot, one thread, exact f32 attention,
    ``/metrics`` served (the audit checks its speculation totals against the answers' counters).

    With ``draft``, speculation is ``--spec-type draft-simple`` unless ``extra_args`` names a type.
    ``-fa off`` and an f32 KV cache keep the served law within float32 rounding of the exact law
    (flash attention on the CPU rounds through float16: errors near 1e-4 in the probabilities).
    ``extra_args`` come last, so they override these defaults.
    """
    cmd = [str(Path(binary_dir) / "llama-server"), "--host", HOST, "--port", str(port), "-m", str(model)]
    cmd += [
        "-c",
        "256",
        "-np",
        "1",
        "-t",
        "1",
        "-tb",
        "1",
        "-fa",
        "off",
        "-ctk",
        "f32",
        "-ctv",
        "f32",
        "--metrics",
    ]
    if draft is not None:
        cmd += ["-md", str(draft), "-ctkd", "f32", "-ctvd", "f32"]
        if "--spec-type" not in extra_args:  # without it the draft is loaded but never used
            cmd += ["--spec-type", "draft-simple"]
    return cmd + list(extra_args)


@contextlib.contextmanager
def start_server(
    binary_dir: Path,
    model: Path,
    draft: Path | None = None,
    port: int = 0,
    extra_args: Sequence[str] = (),
    timeout: float = 60.0,
) -> Iterator[str]:
    """Run ``llama-server`` on 127.0.0.1 (``port=0``: a free one), yield its base URL, stop it on exit.

    Waits for ``/health`` up to ``timeout`` seconds; if the server exits or never becomes healthy,
    raises :class:`LlamaServerError` with the tail of its stderr.
    """
    port = port or free_port()
    url = f"http://{HOST}:{port}"
    cmd = server_command(binary_dir, model, port, draft, extra_args)
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT)
        try:
            _wait_healthy(proc, url, timeout, err)
            yield url
        finally:
            _stop(proc)


def _wait_healthy(proc: subprocess.Popen[Any], url: str, timeout: float, err: Any) -> None:
    """Poll ``/health`` until it answers, the process exits, or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LlamaServerError(f"llama-server exited with {proc.returncode}:\n{_read_tail(err)}")
        if _healthy(url):
            return
        time.sleep(0.1)
    raise LlamaServerError(f"llama-server not healthy at {url} after {timeout} s:\n{_read_tail(err)}")


def _read_tail(err: Any, lines: int = 30) -> str:
    """The last ``lines`` lines written so far to the server's log file."""
    err.flush()
    err.seek(0)
    return "\n".join(err.read().splitlines()[-lines:])


def _stop(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """Terminate ``proc``, then kill it if it has not exited after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def post_json(url: str, body: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    """POST ``body`` as JSON to ``url``; the decoded JSON answer (HTTP errors raise with the body)."""
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return dict(json.loads(r.read()))
    except urllib.error.HTTPError as exc:
        raise LlamaServerError(f"POST {url} -> {exc.code}: {exc.read().decode(errors='replace')}") from exc


@dataclass(frozen=True)
class SpeculativeRun:
    """One run of ``llama-speculative`` (or ``-simple``): printed text, acceptance counters, time."""

    text: str  # the prompt's pieces then the generated pieces, as printed (EOS as "</s>" or not at all)
    stats: dict[str, int]  # n_draft, n_predict, n_drafted, n_accept (from stderr)
    seconds: float


_STAT = re.compile(r"\b(n_draft|n_predict|n_drafted|n_accept)\s+=\s+(\d+)")


def run_speculative(
    binary_dir: Path,
    target: Path,
    draft: Path,
    prompt: str,
    args: Sequence[str] = (),
    program: str = "llama-speculative",
    attempts: int = 5,
    timeout: float = 60.0,
) -> SpeculativeRun:
    """Run ``program`` on ``prompt`` (text) with ``args`` after ``-c 256 -t 1 -fa off``; parse its output.

    These programs print through a logging thread, which the build's patch drains before main
    returns (:data:`PATCHES`; without it, most runs beside two busy processes on 2 cores lost
    their text: scripts/llamacpp_output_loss.py). A complete stdout is two newlines, the text,
    four newlines or more (the last ones are the last entries printed); an incomplete one is still
    repeated, up to ``attempts`` times (runs are seeded: the same result), and then raises
    :class:`LlamaRunError`. So is a run that outlives ``timeout`` seconds: about one in a thousand
    never exits, its logger's ring full when the drain pauses it (common/log.cpp's ``pause``
    pushes its end marker without waiting for room: proofs_notes/thirdparty.md).
    """
    cmd = [str(Path(binary_dir) / program), "-m", str(target), "-md", str(draft), "-p", prompt]
    cmd += ["-c", "256", "-t", "1", "-fa", "off"]
    if program == "llama-speculative-simple" and "--spec-type" not in args:
        cmd += ["--spec-type", "draft-simple"]
    cmd += list(args)
    hung, last = 0, ""
    for _ in range(max(1, attempts)):
        start = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:  # the run hung (see the docstring): run it again
            hung += 1
            continue
        seconds = time.monotonic() - start
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.splitlines()[-20:])
            raise LlamaRunError(f"{program} exited with {proc.returncode}:\n{tail}")
        out = last = proc.stdout
        if out.startswith("\n\n") and out.endswith("\n\n\n\n"):
            stats = {k: int(v) for k, v in _STAT.findall(proc.stderr)}
            # under load the logging thread may print further empty entries: the tiny
            # vocabulary has no newline, so every trailing newline is the logger's
            return SpeculativeRun(out[2:].rstrip("\n"), stats, seconds)
    raise LlamaRunError(
        f"{program}: output incomplete in {attempts} runs ({hung} hung past {timeout:g} s); last stdout "
        f"{last[-200:]!r}"
    )


def info() -> dict[str, Any]:
    """Pinned version, commit, cache folder and whether it is built (with the marker when it is)."""
    folder = build_dir()
    return {
        "llama_cpp_python": VERSION,
        "llama_cpp_commit": LLAMA_CPP_COMMIT,
        "flags_hash": flags_hash(),
        "folder": str(folder),
        "cached": is_built(folder),
        "marker": marker(folder),
    }
