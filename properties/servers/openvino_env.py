"""OpenVINO GenAI (``openvino-genai`` 2026.4.1) in an environment of its own, driven through a
worker process (:mod:`.openvino_worker`).

``specproof openvino install`` builds the environment (about 1.6 GB, two minutes here; once,
cached outside the clone): the CPU torch 2.13.0 first (``optimum-intel`` needs a torch, and a bare
one would pull a CUDA build of several GB), then ``openvino-genai`` and ``optimum-intel`` with
that torch pinned. It is not a pip extra of this project because ``optimum-intel`` declares
``torchvision``, whose registry build breaks ``transformers``' import beside the CPU torch (the
worker hides it); the project's own environment stays without it.

:func:`export` writes the project's tiny HF pair (:mod:`.tiny_hf`: V = 16, EOS 0) as fp32
OpenVINO IR with its tokenizer (about 40 s); :class:`Worker` runs one pipeline (draft model,
prompt lookup or plain) and answers generation requests over JSON lines.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from specproof.properties.servers import tiny_hf, venvs

VERSION = "2026.4.1"
OPTIMUM_INTEL = "2.2.0"
TORCH = "torch==2.13.0"
WORKER = Path(__file__).with_name("openvino_worker.py")
MODES = ("draft", "lookup", "plain")
#: tokens drafted per step (``num_assistant_tokens``) by the draft and lookup pipelines
DRAFT_TOKENS = 3


class OpenVINOError(venvs.WorkerFault):
    """OpenVINO GenAI's environment cannot be built, or its worker failed."""


def cache_root() -> Path:
    return venvs.cache_root(f"openvino-genai-{VERSION}")


def venv_dir() -> Path:
    """The environment: ``SPECPROOF_OPENVINO_VENV``, else under the cache (:func:`cache_root`)."""
    return venvs.venv_dir("SPECPROOF_OPENVINO_VENV", f"openvino-genai-{VERSION}")


def python(venv: Path | None = None) -> Path:
    return venvs.python(venv or venv_dir())


def installed(venv: Path | None = None) -> tuple[bool, str]:
    """Whether the environment holds ``openvino-genai`` at :data:`VERSION` (and why not)."""
    py = python(venv)
    if not py.exists():
        return False, f"no OpenVINO GenAI environment at {py.parent.parent} (specproof openvino install)"
    version, said = venvs.dist_version(py, "openvino-genai")
    if version is None or not version.startswith(VERSION):
        return False, f"{py} has no openvino-genai {VERSION} ({said})"
    return True, version


def _pip(py: Path, args: Sequence[str], log: Path) -> None:
    venvs.pip(py, args, log, OpenVINOError)


def install(venv: Path | None = None, progress: Callable[[str], None] = print) -> Path:
    """Build the environment (module docstring) unless it is there; return its Python."""
    venv = venv or venv_dir()
    if installed(venv)[0]:
        progress(f"openvino-genai {VERSION} is installed in {venv}")
        return python(venv)
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log = venv.parent / "install.log"
    log.write_text("")
    t0 = time.monotonic()
    progress(f"creating {venv} (openvino-genai {VERSION}, optimum-intel {OPTIMUM_INTEL}; log {log})")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = python(venv)
    pins = venv.parent / "pins.txt"
    pins.write_text(TORCH + "\n")
    _pip(py, ["install", "-q", TORCH], log)
    _pip(
        py,
        [
            "install",
            "-q",
            "-c",
            str(pins),
            f"openvino-genai=={VERSION}",
            f"optimum-intel[openvino]=={OPTIMUM_INTEL}",
        ],
        log,
    )
    ok, why = installed(venv)
    if not ok:
        raise OpenVINOError(f"the environment was built but does not import: {why}")
    progress(f"openvino-genai {VERSION} installed in {venv} in {time.monotonic() - t0:.0f} s")
    return py


def models_dir() -> Path:
    """Where the exported tiny pair is kept (under the cache: an export takes about 40 s)."""
    return cache_root() / "tiny-seed0"


def export(folder: Path | None = None, progress: Callable[[str], None] = print) -> Path:
    """The tiny pair (seed 0) as HF folders and as fp32 IR under ``folder``; the IR folder."""
    folder = folder or models_dir()
    ir = folder / "ir"
    if (ir / "target" / "openvino_detokenizer.xml").exists() and (
        ir / "draft" / "openvino_detokenizer.xml"
    ).exists():
        return ir
    tiny_hf.write_models_hf(folder / "hf", seed=0)
    progress(f"exporting the tiny pair to OpenVINO IR in {ir}")
    done = subprocess.run(
        [str(python()), str(WORKER), "export", "--hf", str(folder / "hf"), "--ir", str(ir)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise OpenVINOError(f"exporting to OpenVINO IR failed:\n{done.stderr[-2000:]}")
    return ir


class Worker(venvs.JsonLinesWorker):
    """One pipeline in a worker process (:mod:`.openvino_worker`); ``request`` sends one JSON
    request and reads its answer. Use as a context manager, or :meth:`close`."""

    def __init__(self, mode: str, ir: Path | None = None, draft_tokens: int = DRAFT_TOKENS) -> None:
        if mode not in MODES:
            raise OpenVINOError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
        ok, why = installed()
        if not ok:
            raise OpenVINOError(why)
        ir = ir or export()
        cmd = [str(python()), str(WORKER), "serve", "--ir", str(ir), "--mode", mode]
        cmd += ["--assistant", str(draft_tokens)]
        self.mode, self.draft_tokens = mode, draft_tokens
        log = venvs.worker_log(cache_root() / "logs", mode)
        super().__init__(cmd, OpenVINOError, f"OpenVINO GenAI ({mode})", log=log)
