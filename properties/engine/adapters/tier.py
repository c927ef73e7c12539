"""What the engines of the pinned tiers share (mistral.rs, OpenVINO GenAI, ONNX Runtime GenAI,
vLLM's CPU build): each runs in a worker process of its tier's own environment, on the project's
tiny llama pair, and is audited against the exact law of the same weights in numpy.

:class:`TierEngine` gives such an engine ``generate`` (one sample of its ``generate_many``, its
counters kept by :meth:`TierEngine.note`) and ``target_law`` (``gguf_models.last_logits`` under
the setting's :meth:`~specproof.properties.engine.contract.Sampling.law`). Its workers are a
:class:`~specproof.properties.servers.venvs.WorkerPool` of the adapter's module, which its spec's
``close`` empties when the audit ends. Adding a tier: docs/adding-an-engine-tier.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specproof.properties.engine.contract import Generation, Sampling
from specproof.properties.servers import gguf_models as gm


class TierEngine:
    """One sampling setting of one mode (a runner, a pipeline) of a pinned tier."""

    sampling: Sampling
    #: the seeds the engine takes lie below this (each sample's seed is sent modulo it)
    seed_modulus = 2**32

    def ask(
        self, prompt_ids: Sequence[int], max_new_tokens: int, seeds: Sequence[int], sampling: Any
    ) -> dict:
        """The worker's ``generate`` request: one sample per seed, each of ``max_new_tokens``
        tokens after ``prompt_ids``, under the engine's own ``sampling`` parameters."""
        return {
            "op": "generate",
            "prompt": [int(x) for x in prompt_ids],
            "tokens": int(max_new_tokens),
            "seeds": [int(s) % self.seed_modulus for s in seeds],
            "sampling": sampling,
        }

    def generate_many(
        self, prompt_ids: list[int], max_new_tokens: int, seeds: Sequence[int], report: bool = False
    ) -> list[Generation]:
        raise NotImplementedError

    def note(self, g: Generation) -> None:
        """Keep what the last single sample says of itself (its counters), where the engine
        declares them; nothing by default."""

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        (g,) = self.generate_many(prompt_ids, max_new_tokens, [seed])
        self.note(g)
        return list(g.tokens)

    def target_law(self, context: Sequence[int]) -> list[float]:
        return list(self.sampling.law(list(gm.last_logits(list(context)))))
