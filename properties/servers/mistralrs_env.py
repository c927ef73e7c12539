"""mistral.rs (``mistralrs`` 0.6.0, the last release with draft-model speculation on a CPU) in
an environment of its own, driven through a worker process (:mod:`.mistralrs_worker`).

``specproof mistralrs install`` builds the environment (the one wheel, about 80 MB, under a
minute here; cached outside the clone). It is not a pip extra of this project: its wheel is a
native build for recent x86 CPUs, and where the CPU lacks an instruction it was built with (GFNI)
importing it kills the process with SIGILL; :func:`usable` says so instead of crashing a test run.

:func:`models_dir` holds the project's tiny pair (seed 0) as HF folders the way mistral.rs 0.6.0
reads them: heads unpadded (it derives the head width from the hidden size and ignores
``head_dim``) and the tokenizer's decoder ``ByteLevel`` (it refuses the ``Fuse`` decoder; every
tiny token is printable ASCII, which ByteLevel maps to itself). :class:`Worker` runs one runner
(draft model or plain) and answers generation requests over JSON lines.
"""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from specproof.properties.servers import gguf_models as gm
from specproof.properties.servers import tiny_hf, venvs

VERSION = "0.6.0"
WORKER = Path(__file__).with_name("mistralrs_worker.py")
MODES = ("draft", "plain")
#: tokens drafted per step (``speculative_gamma``)
DRAFT_TOKENS = 3


class MistralRSError(venvs.WorkerFault):
    """mistral.rs's environment cannot be built, or its worker failed."""


class Environment(venvs.PinnedVenv):
    """The environment: ``SPECPROOF_MISTRALRS_VENV``, else under the cache; one wheel."""

    dist, version, variable, folder = "mistralrs", VERSION, "SPECPROOF_MISTRALRS_VENV", f"mistralrs-{VERSION}"
    label, command, about = "mistral.rs", "specproof env install mistralrs", "one wheel"
    error = MistralRSError

    def steps(self, py: Path, log: Path, progress: Callable[[str], None]) -> None:
        self.pip(py, ["install", "-q", f"mistralrs=={VERSION}"], log)


ENV = Environment()
# the module's functions, as its callers name them
cache_root, venv_dir, python = ENV.cache_root, ENV.venv_dir, ENV.python
installed, install = ENV.installed, ENV.install


#: the exit codes of an import killed by SIGILL (a signal, or a shell's 128 + 4)
SIGILL_CODES = (-4, 132)


@functools.lru_cache(maxsize=1)
def _import_check() -> tuple[int, str]:
    """The exit code of ``import mistralrs`` in the environment, and its stderr's tail."""
    done = subprocess.run(
        [str(python()), "-c", "import mistralrs"], capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stderr[-300:]


def cpu_cannot_run() -> bool:
    """Whether the installed wheel dies by SIGILL on import here: this CPU lacks an instruction
    it was built with (GFNI on the machines seen). A limit of the platform, not a broken install:
    the tier may skip here, saying so, where a missing or broken environment must fail it."""
    return installed()[0] and _import_check()[0] in SIGILL_CODES


@functools.lru_cache(maxsize=1)
def usable() -> tuple[bool, str]:
    """Whether the installed wheel runs on this CPU: installed, and its import survives (SIGILL
    where the CPU lacks an instruction the wheel was built with)."""
    ok, why = installed()
    if not ok:
        return ok, why
    code, err = _import_check()
    if code != 0:
        sig = " (SIGILL: this CPU lacks an instruction the wheel needs, GFNI on the machines seen)"
        return False, f"importing mistralrs failed with code {code}" + (
            sig if code in SIGILL_CODES else f": {err}"
        )
    return True, VERSION


def models_dir() -> Path:
    """The tiny pair as mistral.rs reads it (module docstring), written once under the cache."""
    folder = cache_root() / "tiny-seed0"
    if (folder / "draft" / "tokenizer.json").exists() and (folder / "target" / "tokenizer.json").exists():
        return folder
    tw = gm.target_weights(0)
    for name, weights in (("target", tw), ("draft", gm.draft_weights(tw, 0))):
        out = tiny_hf.write_hf(folder / name, weights, f"specproof-tiny-{name}-0", head_dim=gm.SPEC.head_dim)
        tok = json.loads((out / "tokenizer.json").read_text())
        tok["decoder"] = {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        }
        (out / "tokenizer.json").write_text(json.dumps(tok))
    return folder


class Worker(venvs.JsonLinesWorker):
    """One runner in a worker process (:mod:`.mistralrs_worker`); ``request`` sends one JSON
    request and reads its answer; ``prefix_cache`` is the runner's ``prefix_cache_n`` (its default
    16: as a user runs it). Use as a context manager, or :meth:`close`."""

    def __init__(self, mode: str, draft_tokens: int = DRAFT_TOKENS, prefix_cache: int = 16) -> None:
        if mode not in MODES:
            raise MistralRSError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
        ok, why = usable()
        if not ok:
            raise MistralRSError(why)
        cmd = [str(python()), str(WORKER), "serve", "--hf", str(models_dir()), "--mode", mode]
        cmd += ["--gamma", str(draft_tokens), "--prefix-cache", str(prefix_cache)]
        self.mode, self.draft_tokens = mode, draft_tokens
        # mistral.rs logs to stdout and stderr alike: the JSON lines are read and the rest skipped
        # (its last lines kept); stderr goes to the log, whose tail a crash quotes
        log = venvs.worker_log(cache_root() / "logs", mode)
        super().__init__(cmd, MistralRSError, f"mistral.rs ({mode})", log=log)
