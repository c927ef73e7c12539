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

import subprocess
from collections.abc import Callable
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


class Environment(venvs.PinnedVenv):
    """The environment: ``SPECPROOF_OPENVINO_VENV``, else under the cache (module docstring)."""

    dist, version, version_prefix = "openvino-genai", VERSION, True
    variable, folder = "SPECPROOF_OPENVINO_VENV", f"openvino-genai-{VERSION}"
    label, command, error = "OpenVINO GenAI", "specproof env install openvino", OpenVINOError
    about = f"optimum-intel {OPTIMUM_INTEL}, about 1.6 GB"

    def steps(self, py: Path, log: Path, progress: Callable[[str], None]) -> None:
        pins = log.parent / "pins.txt"
        pins.write_text(TORCH + "\n")
        self.pip(py, ["install", "-q", TORCH], log)
        wanted = [f"openvino-genai=={VERSION}", f"optimum-intel[openvino]=={OPTIMUM_INTEL}"]
        self.pip(py, ["install", "-q", "-c", str(pins), *wanted], log)


ENV = Environment()
# the module's functions, as its callers name them
cache_root, venv_dir, python = ENV.cache_root, ENV.venv_dir, ENV.python
installed, install = ENV.installed, ENV.install


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
