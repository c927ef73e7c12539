"""llama-cpp-python's OpenAI-compatible server with its prompt-lookup draft model, pinned and installed fast.

``llama-cpp-python`` (:data:`VERSION`, the release whose sdist vendors the llama.cpp tree that
:mod:`.llamacpp` builds, commit 0c1e57098) is installed **without compiling llama.cpp inside
pip**: its ``CMakeLists.txt`` has ``option(LLAMA_BUILD ...)``, and with
``CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"`` the wheel holds only the Python package.
The native library is built once from the same sdist (the same cached, checksummed file as the
binaries: :func:`.llamacpp.fetch_sdist`) as shared libraries (``libllama.so`` and the
``libggml*.so`` it links, RPATH ``$ORIGIN``), with the binaries' CPU flags, into
``${SPECPROOF_CACHE:-~/.cache/specproof}/llama.cpp/python-<VERSION>-<flags hash>/``, under the same
lock and rename-into-place scheme as :func:`.llamacpp.ensure_built`. llama-cpp-python loads
``libllama`` from ``$LLAMA_CPP_LIB_PATH`` when that is set (``llama_cpp/llama_cpp.py``), which
:func:`start_server` sets for the server process.

:func:`ensure_installed` (idempotent) builds the library if needed and pip-installs
:data:`REQUIREMENTS` into the current environment (the package, from the cached sdist, and its
server extra with every dependency pinned). Measured on 2 cores shared with other jobs (load
average 20): the library, cold, 12 min wall for 4 min of CPU (78 ninja steps, the ``llama``
target only: ggml, ggml-cpu and llama's sources; the sdist is already cached by the binaries'
build); the pip step 18 s (a 143 KB pure-Python wheel: scikit-build-core runs an empty cmake
project); warm, 0.5 s (nothing to do).

:func:`start_server` runs ``python -m llama_cpp.server`` on 127.0.0.1 with the tiny target GGUF
and ``--draft_model prompt-lookup-decoding`` (:class:`llama_cpp.llama_speculative.
LlamaPromptLookupDecoding`, ``max_ngram_size`` 2, ``num_pred_tokens`` from the argument), waits
for ``/v1/models`` and stops it on exit. The API facts an audit needs, as read from the package
(``llama_cpp/server/types.py``, ``llama_cpp/llama.py``): a prompt is text (``str | list[str]``;
a list of token ids is refused), so ids go in and come back as their texts; ``logprobs`` = V
returns each emitted token's whole **raw** law (log-softmax of the logits, temperature 1, before
every sampler), the end of sequence keyed by the empty text; the request defaults are not neutral
(temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.1); there is no
``ignore_eos`` (a logit bias bans it); the same seed gives the same tokens; and with the draft
model every emitted token is sampled from the target at its position and compared with the
draft (sample-and-compare), so the seed's draws are the same with and without it. Its answers
carry no draft or acceptance counts. ``tests/test_llamacpp_engines.py`` and
``tests/test_endpoint_llamacpp.py`` start the server and check these facts; the profile that
audits it is ``llamacpp-python`` (:mod:`specproof.properties.endpoint.families.llamacpp_python`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from specproof.properties.servers import llamacpp as lc
from specproof.reference.errors import SpecproofError

VERSION = lc.VERSION  # llama-cpp-python 0.3.36: the sdist that vendors llama.cpp 0c1e57098
#: what pip installs: the package (from the cached sdist, no native build) and its ``server``
#: extra, every dependency pinned (the versions pip resolved for Python 3.11 on 2026-12-01)
REQUIREMENTS = (
    # the package's own dependencies
    "diskcache==5.6.3",
    "jinja2==3.1.6",
    "numpy==2.4.6",
    "typing-extensions==4.16.0",
    # its [server] extra
    "uvicorn==0.54.0",
    "fastapi==0.165.0",
    "pydantic-settings==2.16.3",
    "sse-starlette==3.7.0",
    "starlette-context==0.3.6",
    "PyYAML==6.0.4",
    # what those pull in (anyio, h11, httpx's stack are the test environment's already)
    "starlette==1.10.0",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "python-dotenv==1.2.4",
    "click==8.5.1",
    "annotated-doc==0.0.7",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "opentelemetry-api==1.45.2",
)
LIB_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",  # the binaries' portable x86-64-v3 build
    "-DBUILD_SHARED_LIBS=ON",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",  # each .so finds its siblings in its own folder
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_COMMON=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    f"-DLLAMA_BUILD_COMMIT={lc.LLAMA_CPP_COMMIT}",
    "-DLLAMA_BUILD_NUMBER=0",
)
LIB_TARGETS = ("llama",)
LIBS = ("libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so")
PIP_CMAKE_ARGS = "-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"
DRAFT = "prompt-lookup-decoding"  # any value turns the server's prompt-lookup draft on


class LlamaCppPythonError(SpecproofError, RuntimeError):
    """llama-cpp-python could not be installed, or its server did not start; with the log's tail."""


def lib_hash() -> str:
    key = json.dumps([VERSION, lc.LLAMA_CPP_COMMIT, LIB_FLAGS, LIB_TARGETS, platform.machine()])
    return hashlib.sha256(key.encode()).hexdigest()[:10]


def lib_dir() -> Path:
    """The folder that holds (or will hold) ``libllama.so`` and the ggml libraries."""
    return lc.cache_root() / f"python-{VERSION}-{lib_hash()}"


def lib_built(folder: Path | None = None) -> bool:
    folder = lib_dir() if folder is None else folder
    return (folder / lc.MARKER).is_file() and all((folder / name).is_file() for name in LIBS)


def _build_lib_into(final: Path, progress: Callable[[str], None]) -> None:
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        log = work / "build.log"
        start = time.monotonic()
        src = lc.extract_llama_cpp(lc.fetch_sdist(log, progress), work / "src")
        cmake = shutil.which("cmake")
        if cmake is None:
            raise LlamaCppPythonError("building libllama needs cmake >= 3.14 on PATH")
        ninja = lc._ninja()
        build = work / "build"
        progress(f"building libllama {lc.LLAMA_CPP_COMMIT} (shared) with -j{lc.JOBS}; log: {log}")
        gen = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
        lc._run_logged([cmake, "-S", str(src), "-B", str(build), *gen, *LIB_FLAGS], log)
        lc._run_logged([ninja, "-C", str(build), f"-j{lc.JOBS}", *LIB_TARGETS], log, progress=progress)
        out = work / "out"
        out.mkdir()
        found = {p.name: p for p in build.rglob("*.so*") if p.is_file() or p.is_symlink()}
        for name, path in found.items():
            shutil.copy2(path, out / name, follow_symlinks=True)
        missing = [n for n in LIBS if not (out / n).is_file()]
        if missing:
            raise LlamaCppPythonError(f"the build produced no {missing}; tail of {log}:\n{lc._tail(log)}")
        shutil.copy2(log, out / "build.log")
        seconds = round(time.monotonic() - start, 1)
        info = {
            "llama_cpp_python": VERSION,
            "llama_cpp_commit": lc.LLAMA_CPP_COMMIT,
            "sdist_sha256": lc.SDIST_SHA256,
            "cmake_flags": list(LIB_FLAGS),
            "targets": list(LIB_TARGETS),
            "libraries": sorted(found),
            "machine": platform.machine(),
            "build_seconds": seconds,
            "jobs": lc.JOBS,
        }
        (out / lc.MARKER).write_text(json.dumps(info, indent=2) + "\n")
        os.rename(out, final)
        progress(f"built in {seconds} s: {final}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ensure_lib(progress: Callable[[str], None] = print) -> Path:
    """The folder holding ``libllama.so`` and its ggml libraries: built once, then cached."""
    final = lib_dir()
    if lib_built(final):
        return final
    root = lc.cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / lc.LOCK).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if lib_built(final):
                return final
            if final.exists():
                shutil.rmtree(final)
            _build_lib_into(final, progress)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return final


def installed_version() -> str | None:
    """The installed llama-cpp-python version, or None."""
    try:
        return importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        return None


def _server_deps_installed() -> bool:
    for req in REQUIREMENTS:
        name, _, version = req.partition("==")
        try:
            if importlib.metadata.version(name) != version:
                return False
        except importlib.metadata.PackageNotFoundError:
            return False
    return True


def is_installed() -> bool:
    """The pinned package and server dependencies are installed and the library is built."""
    return installed_version() == VERSION and _server_deps_installed() and lib_built()


def ensure_installed(progress: Callable[[str], None] = print) -> Path:
    """Build the shared library if needed and pip-install :data:`REQUIREMENTS` (with the package
    from the cached sdist, ``CMAKE_ARGS`` :data:`PIP_CMAKE_ARGS`) into the running interpreter's
    environment if they are not there. Returns the library folder (for ``LLAMA_CPP_LIB_PATH``)."""
    folder = ensure_lib(progress)
    if installed_version() == VERSION and _server_deps_installed():
        return folder
    root = lc.cache_root()
    log = root / f"pip-llama-cpp-python-{VERSION}.log"
    sdist = lc.fetch_sdist(log, progress)
    env = dict(os.environ, CMAKE_ARGS=PIP_CMAKE_ARGS, FORCE_CMAKE="1")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-input",
        f"llama_cpp_python[server] @ {sdist.as_uri()}",
    ]
    cmd += list(REQUIREMENTS)
    progress(f"installing llama-cpp-python {VERSION} (no native build) and its server dependencies")
    with log.open("a") as out:
        out.write(f"\n$ CMAKE_ARGS='{PIP_CMAKE_ARGS}' {' '.join(cmd)}\n")
        out.flush()
        rc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    if rc != 0 or installed_version() != VERSION:
        raise LlamaCppPythonError(f"pip install exited with {rc}; tail of {log}:\n{lc._tail(log)}")
    return folder


def server_command(
    model: Path,
    port: int,
    draft: str | None = DRAFT,
    num_pred_tokens: int = 10,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``python -m llama_cpp.server`` on 127.0.0.1: one thread, f32 KV cache, flash attention off
    (the law stays within float32 rounding of the numpy law), a 256-token context, no
    verbosity. ``draft=None`` serves the same model without speculation."""
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", lc.HOST]
    cmd += ["--port", str(port), "--n_ctx", "256", "--n_threads", "1", "--n_threads_batch", "1"]
    cmd += ["--type_k", "0", "--type_v", "0", "--flash_attn", "false", "--verbose", "false"]
    if draft is not None:
        cmd += ["--draft_model", draft, "--draft_model_num_pred_tokens", str(num_pred_tokens)]
    return cmd + list(extra_args)


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


@contextlib.contextmanager
def start_server(
    model: Path,
    draft: str | None = DRAFT,
    num_pred_tokens: int = 10,
    port: int = 0,
    extra_args: Sequence[str] = (),
    timeout: float = 60.0,
    log: Path | None = None,
) -> Iterator[str]:
    """Run llama-cpp-python's server on 127.0.0.1 (``port=0``: a free one) with ``model`` and the
    prompt-lookup draft (``draft=None``: none), yield its base URL, stop it on exit.

    Needs :func:`ensure_installed` first (raises :class:`LlamaCppPythonError` otherwise); waits
    for ``GET /v1/models`` up to ``timeout`` seconds; if the process exits or never answers,
    raises with the tail of its output. ``log``: a file to keep the server's output in (with
    ``extra_args=["--verbose", "true"]`` it holds llama.cpp's per-request perf counters)."""
    if installed_version() != VERSION or not lib_built():
        raise LlamaCppPythonError(
            f"llama-cpp-python {VERSION} is not installed with its library: call ensure_installed() first"
        )
    port = port or lc.free_port()
    url = f"http://{lc.HOST}:{port}"
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=str(lib_dir()))
    cmd = server_command(model, port, draft, num_pred_tokens, extra_args)
    with open(log, "w+") if log is not None else tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + timeout
            while not _ready(url):
                if proc.poll() is not None:
                    raise LlamaCppPythonError(
                        f"the server exited with {proc.returncode}:\n{lc._read_tail(err)}"
                    )
                if time.monotonic() > deadline:
                    raise LlamaCppPythonError(
                        f"the server did not answer at {url} in {timeout} s:\n{lc._read_tail(err)}"
                    )
                time.sleep(0.1)
            yield url
        finally:
            lc._stop(proc)


def info() -> dict[str, Any]:
    return {
        "llama_cpp_python": VERSION,
        "installed": installed_version(),
        "server_dependencies": _server_deps_installed(),
        "library": str(lib_dir()),
        "library_built": lib_built(),
    }
