"""OpenVINO GenAI's ``LLMPipeline`` as an engine: speculative decoding as a user runs it.

The pipelines run in OpenVINO GenAI's own environment, in a worker process each
(properties/servers/openvino_env.py, ``specproof openvino install``), on the project's tiny
llama pair exported to fp32 IR (V = 16, EOS 0, ``ignore_eos``): ``openvino.draft`` (the tiny
draft model, ``num_assistant_tokens`` 3), ``openvino.lookup`` (prompt lookup, 2-grams, 3
tokens) and ``openvino.plain`` (no speculation: the control, and every engine's twin). Per
sample, ``GenerationConfig(do_sample=True, temperature=T, top_k=K, top_p=P, rng_seed=seed,
max_new_tokens=M, ignore_eos=True)``: the pipeline draws everything. ``target_law`` is the
exact law of the same weights in numpy (properties/servers/gguf_models.py) under
:meth:`Sampling.law`; the control (``plain``) passing is what says that this is the law the
pipeline samples from.

What it reads as the engine's own counters: ``extended_perf_metrics`` (accepted and draft tokens,
the main model's iterations), as they are. On 2026.4.1 the draft counter reads 0 on calls that
accepted drafts, which the audit states as counters that contradict themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from specproof.properties.engine.adapters.tier import TierEngine
from specproof.properties.engine.contract import T07, T1, EngineSpec, Generation, Sampling
from specproof.properties.engine.knobs import KNOBS
from specproof.properties.servers import gguf_models as gm
from specproof.properties.servers import openvino_env, venvs

VOCAB = len(gm.VOCAB)
PROMPTS = ((1, 2, 3, 4),)
#: M: the first token is the target's own, so drafts are verified from the second on; at M = 2
#: the pipeline never verifies a draft (it drafts only what fits before max_new_tokens)
TOKENS = 6
#: one worker per pipeline (about a second to build), kept until each audit's end (close_workers)
_WORKERS = venvs.WorkerPool(openvino_env.Worker)
_worker = _WORKERS.get
close_workers = _WORKERS.close


def available() -> tuple[bool, str]:
    return openvino_env.installed()


class OpenVINOEngine(TierEngine):
    """One sampling setting of one pipeline (module docstring)."""

    capabilities = frozenset(
        {"generate_many", "batch", "counters", "steps", "twin", "describe", "draft_tokens"}
    )
    vocab = VOCAB
    batch = 64

    def __init__(self, mode: str, sampling: Sampling, twin: OpenVINOEngine | None = None) -> None:
        self.mode, self.sampling, self.twin = mode, sampling, twin
        self.knobs = KNOBS["openvino_genai"].of(sampling)  # refuses what GenerationConfig cannot say
        self.draft_tokens = openvino_env.DRAFT_TOKENS if mode != "plain" else None
        self.last_counters: dict[str, int] = {}
        #: the main model's iterations of the last generate (None: the plain pipeline reports none)
        self.last_forwards: int | None = 0 if mode != "plain" else None
        self.calls = 0

    def _sampling(self) -> dict[str, Any]:
        k = dict(self.knobs)
        k.pop("min_p", None)
        return k

    def generate_many(
        self, prompt_ids: list[int], max_new_tokens: int, seeds: Sequence[int], report: bool = False
    ) -> list[Generation]:
        answer = _worker(self.mode).request(self.ask(prompt_ids, max_new_tokens, seeds, self._sampling()))
        self.calls += len(seeds)
        out = []
        for s in answer["samples"]:
            out.append(Generation(tuple(s["tokens"]), s["drafted"], s["accepted"], s["forwards"]))
        return out

    def note(self, g: Generation) -> None:
        self.last_counters = {} if g.drafted is None else {"drafted": g.drafted, "accepted": g.accepted or 0}
        if self.mode != "plain":
            self.last_forwards = g.forwards or 0

    def describe(self) -> dict[str, Any]:
        return {
            "pipeline": self.mode,
            "openvino_genai": _WORKERS.identity(self.mode, "openvino_genai"),
            "num_assistant_tokens": self.draft_tokens,
            "precision": "f32 (INFERENCE_PRECISION_HINT)",
            "prefix_caching": False,
            "generation_config": self._sampling(),
            "samples_drawn": self.calls,
        }


class PlainEngine(OpenVINOEngine):
    """The pipeline without speculation: no draft length, no twin."""

    capabilities = OpenVINOEngine.capabilities - {"twin", "draft_tokens", "steps"}


def build(mode: str, sampling: Sampling) -> OpenVINOEngine:
    if mode == "plain":
        return PlainEngine("plain", sampling)
    return OpenVINOEngine(mode, sampling, PlainEngine("plain", sampling))


DOCS = {
    "draft": (
        "lossy",
        "OpenVINO GenAI LLMPipeline with the tiny draft model, num_assistant_tokens 3 (validate_candidate: "
        "ratio q(x)/p(y) against the target's own sample, r on 101 values, the rejected token replaced from "
        "the next row)",
    ),
    "lookup": (
        "pass",
        "OpenVINO GenAI LLMPipeline with prompt lookup (2-grams, 3 tokens): sample and compare",
    ),
    "plain": ("pass", "OpenVINO GenAI LLMPipeline without speculation: the control"),
}


def engines() -> list[EngineSpec]:
    out = []
    for mode, (expect, doc) in DOCS.items():
        out.append(
            EngineSpec(
                f"openvino.{mode}",
                "openvino",
                doc,
                functools.partial(build, mode),
                VOCAB,
                PROMPTS if mode != "lookup" else ((4, 13, 6, 4, 13),),
                (T1, T07),
                expect=expect,
                tokens=TOKENS,
                available=available,
                notes="its own environment: specproof openvino install (about 1.6 GB, two minutes)",
                close=close_workers,  # its workers stopped when its audit ends
            )
        )
    return out
