"""ONNX Runtime GenAI (``onnxruntime-genai`` 0.18.0) in an environment of its own, driven through a
worker process (:mod:`.ort_worker`).

``specproof env install ort`` builds the environment (onnxruntime-genai with onnxruntime, and the
``onnx`` package that writes the graphs; about 150 MB, under a minute here; cached outside the
clone). It is not a pip extra of this project: the engine is a native library with pins of its own
(onnxruntime, protobuf), and the project's environment needs none of it. A failed install raises
:class:`ORTGenAIError` with the tail of pip's log (the command exits 4 saying so), never an
environment that the tier's tests would skip in silence.

The models are the project's tiny pair (:mod:`.gguf_models`, seed 0: V = 16, end of sequence 0) and
a one-layer MTP head for its target (:func:`mtp_weights`), written by the project: this module
saves their float32 weights, and the worker, in that environment, writes them as ONNX graphs of
standard operators with the ``onnx`` package (:func:`build`, about a second; nothing is
downloaded). The law the audit holds them to is :func:`target_law`: the project's float64 numpy
forward of the same weights (:func:`.gguf_models.logits`), never a path the engine runs. The MTP
generator on a CPU reads no float32 logits (it casts them to float32 and the CPU cast refuses a
cast to the same type), so its main model exists twice: as is (``mtp/main``) and with its logits
cast to float16 (``mtp/main16``), whose law is the numpy logits rounded to float16.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from specproof.properties.servers import gguf_models as gm
from specproof.properties.servers import venvs
from specproof.reference.errors import SpecproofInputError

VERSION = "0.18.0"
#: installed beside it, pinned: the runtime it was built against, the graph writer and numpy
PINS = ("onnxruntime==1.32.0", "onnx==1.23.2", "numpy==2.4.6")
WORKER = Path(__file__).with_name("ort_worker.py")
#: the worker's modes: plain decoding of the target, the draft model, n-gram lookup, MTP on the
#: float32 main model, and plain decoding and MTP on the main model with float16 logits
MODES = ("plain", "draft", "ngram", "mtp", "plain16", "mtp16")
#: tokens drafted per step (``speculative.max_draft_tokens``) by every speculative mode
DRAFT_TOKENS = 3
#: the n-gram length the lookup matches (``speculative.ngram_size``)
NGRAM_SIZE = 2
#: the modes whose model has float16 logits
HALF = frozenset({"plain16", "mtp16"})


class ORTGenAIError(venvs.WorkerFault):
    """ONNX Runtime GenAI's environment cannot be built, or its worker failed."""


class Environment(venvs.PinnedVenv):
    """The environment: ``SPECPROOF_ORT_VENV``, else under the cache; onnxruntime-genai at
    :data:`VERSION` with :data:`PINS` (``onnx`` must be there: the worker writes the graphs)."""

    dist, version, also = "onnxruntime-genai", VERSION, ("onnx",)
    variable, folder = "SPECPROOF_ORT_VENV", f"onnxruntime-genai-{VERSION}"
    label, command, error = "ONNX Runtime GenAI", "specproof env install ort", ORTGenAIError
    about = ", ".join(PINS)

    def steps(self, py: Path, log: Path, progress: Callable[[str], None]) -> None:
        self.pip(py, ["install", "-q", f"onnxruntime-genai=={VERSION}", *PINS], log)


ENV = Environment()
# the module's functions, as its callers name them
cache_root, venv_dir, python = ENV.cache_root, ENV.venv_dir, ENV.python
installed, install = ENV.installed, ENV.install


# --------------------------------------------------------------------------- the models


def mtp_weights(
    target: dict[str, np.ndarray], draft: dict[str, np.ndarray], seed: int = 0
) -> dict[str, np.ndarray]:
    """A one-layer MTP head for ``target`` (the worker's ``mtp_head``): the target's embedding,
    final norm and output matrix, norms of ones on the embedded token and on the main model's
    hidden state, a random ``fc`` joining them (``[D, 2D]``, a function of ``seed``), and the
    draft's second layer as its decoder layer. An untrained head: its drafts are accepted often
    enough to test the rule, which is all the audit needs of it."""
    rng = np.random.default_rng([seed, 3])
    d = gm.SPEC.n_embd
    w = {
        "embed": target["token_embd.weight"],
        "output": target["output.weight"],
        "output_norm": target["output_norm.weight"],
        "norm_embed": np.ones(d, dtype=np.float32),
        "norm_hidden": np.ones(d, dtype=np.float32),
        "fc": (rng.standard_normal((d, 2 * d)) / np.sqrt(2 * d)).astype(np.float32),
    }
    last = f"blk.{gm.SPEC.n_layer - 1}."
    w.update({"blk.0." + k[len(last) :]: v for k, v in draft.items() if k.startswith(last)})
    return w


def _weights(seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    t = gm.target_weights(seed)
    d = gm.draft_weights(t, seed)
    return {"target": t, "draft": d, "mtp": mtp_weights(t, d, seed)}


def _spec() -> dict[str, object]:
    s = gm.SPEC
    return {
        "n_vocab": s.n_vocab,
        "n_embd": s.n_embd,
        "n_layer": s.n_layer,
        "n_head": s.n_head,
        "n_head_kv": s.n_head_kv,
        "n_ff": s.n_ff,
        "n_ctx": s.n_ctx,
        "rope_base": s.rope_base,
        "rms_eps": s.rms_eps,
        "eos": gm.EOS_ID,
    }


def fingerprint(seed: int = 0, draft_tokens: int = DRAFT_TOKENS) -> str:
    """A digest of everything the graphs are written from: the weights, the shapes, K and the
    worker's source (a change of any makes a new folder, never a stale model)."""
    h = hashlib.sha256(json.dumps([_spec(), draft_tokens, VERSION], sort_keys=True).encode())
    h.update(WORKER.read_bytes())
    for name, w in sorted(_weights(seed).items()):
        for key in sorted(w):
            h.update(f"{name}/{key}".encode())
            h.update(np.ascontiguousarray(w[key]).tobytes())
    return h.hexdigest()[:16]


def models_dir(seed: int = 0) -> Path:
    """Where the graphs of ``seed`` are written (under the cache, by :func:`fingerprint`)."""
    return cache_root() / f"tiny-seed{seed}-{fingerprint(seed)}"


def build(folder: Path | None = None, seed: int = 0, progress: Callable[[str], None] = print) -> Path:
    """The tiny models of ``seed`` as ONNX graphs with their genai configs under ``folder/models``
    (written once; about a second), their weights under ``folder/weights``; the models' folder."""
    if seed < 0:
        raise SpecproofInputError("seed", f"must be >= 0, got {seed}")
    folder = folder or models_dir(seed)
    out = folder / "models"
    done = out / "built.json"
    if done.exists():
        return out
    ok, why = installed()
    if not ok:
        raise ORTGenAIError(why)
    weights = folder / "weights"
    weights.mkdir(parents=True, exist_ok=True)
    for name, w in _weights(seed).items():
        np.savez(weights / f"{name}.npz", **w)  # type: ignore[arg-type]
    (weights / "spec.json").write_text(json.dumps(_spec()))
    progress(f"writing the tiny models as ONNX graphs in {out}")
    shutil.rmtree(out, ignore_errors=True)
    ran = subprocess.run(
        [str(python()), str(WORKER), "build", "--weights", str(weights), "--out", str(out)]
        + ["--draft-tokens", str(DRAFT_TOKENS)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if ran.returncode != 0:
        raise ORTGenAIError(f"writing the ONNX graphs failed:\n{ran.stderr[-2000:]}")
    done.write_text(json.dumps({"seed": seed, "fingerprint": folder.name, "draft_tokens": DRAFT_TOKENS}))
    return out


def target_law_logits(context: Sequence[int], half: bool = False, seed: int = 0) -> np.ndarray:
    """The target's float64 logits after ``context`` (numpy, :func:`.gguf_models.logits`), rounded
    to float16 for a model whose logits are (``half``)."""
    z = gm.last_logits(list(context), seed)
    return z.astype(np.float32).astype(np.float16).astype(np.float64) if half else z.astype(np.float64)


class Worker(venvs.JsonLinesWorker):
    """One mode's model(s) in a worker process (:mod:`.ort_worker`); ``request`` sends one JSON
    request and reads its answer. Use as a context manager, or :meth:`close`."""

    def __init__(self, mode: str, models: Path | None = None) -> None:
        if mode not in MODES:
            raise SpecproofInputError("mode", f"{mode!r} is not one of {', '.join(MODES)}")
        ok, why = installed()
        if not ok:
            raise ORTGenAIError(why)
        models = models or build()
        cmd = [str(python()), str(WORKER), "serve", "--models", str(models), "--mode", mode]
        cmd += ["--draft-tokens", str(DRAFT_TOKENS), "--ngram-size", str(NGRAM_SIZE)]
        self.mode = mode
        log = venvs.worker_log(cache_root() / "logs", mode)  # its stderr, whose tail a crash quotes
        super().__init__(cmd, ORTGenAIError, f"ONNX Runtime GenAI ({mode})", log=log)
