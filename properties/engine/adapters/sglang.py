"""SGLang's offline engine (``sglang.Engine``) as an engine: speculative decoding as a user runs it.

``sglang.Engine(model_path=<target>, skip_tokenizer_init=True, speculative_algorithm=...,
...)`` and, per sample, ``engine.generate(input_ids=[prompt], sampling_params={"temperature": T,
"top_k": K, "top_p": P, "max_new_tokens": M, "min_new_tokens": M, "ignore_eos": True,
"sampling_seed": seed})``: SGLang draws everything, the per-request seed included. The models are
the HF adapter's tiny Llama target and 1-layer draft saved to disk
(:func:`.hf.checkpoints`); ``target_law`` runs the same weights through transformers.

SGLang's engine needs CUDA: without it the engines are listed as unavailable with the install
line, and their plumbing is tested against a stand-in of ``sglang.Engine``
(tests/test_engine_adapters.py). On a GPU machine::

    pip install "sglang[all]==0.5.23" && specproof audit engine --engine-group sglang

Algorithms audited: ``STANDALONE`` (an independent draft model, chain of 3, top-k 1) and
``NGRAM``, sampling and greedy.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable, Sequence
from typing import Any

from specproof.properties.engine.adapters.hf import (
    PROMPTS,
    TOP_K,
    VOCAB,
    checkpoint_law,
    checkpoints,
)
from specproof.properties.engine.contract import GREEDY, T07, T1, EngineSpec, Sampling
from specproof.properties.engine.knobs import KNOBS

INSTALL = 'pip install "sglang[all]==0.5.23", on a machine with an NVIDIA GPU (its engine runs on CUDA)'


def available() -> tuple[bool, str]:
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return False, f"sglang is not installed ({INSTALL})"
    import torch

    if not torch.cuda.is_available():
        return False, f"sglang {version} is installed but its engine needs CUDA, absent here"
    from specproof.properties.engine.adapters.hf import available as hf

    ok, why = hf()
    return (True, version) if ok else (False, f"the target law needs transformers: {why}")


class SGLangEngine:
    """``sglang.Engine`` under the engine contract. ``engine_cls``/``law`` replace SGLang's engine
    and the target law (a stand-in, for tests without CUDA)."""

    def __init__(
        self,
        sampling: Sampling,
        server_args: dict[str, Any],
        *,
        engine_cls: Any = None,
        law: Callable[[Sequence[int]], Sequence[float]] | None = None,
        vocab: int = VOCAB,
        paths: dict[str, str] | None = None,
    ) -> None:
        if engine_cls is None:
            import sglang

            engine_cls = sglang.Engine
        paths = paths or checkpoints()
        args = dict(server_args)
        if args.get("speculative_algorithm") == "STANDALONE":
            args.setdefault("speculative_draft_model_path", paths["draft"])
        self.sampling, self.vocab = sampling, vocab
        self._law = law or checkpoint_law(sampling)
        self.engine = engine_cls(
            model_path=paths["target"],
            skip_tokenizer_init=True,
            random_seed=0,
            dtype="float32",
            mem_fraction_static=0.3,
            disable_cuda_graph=True,
            **args,
        )

    def sampling_params(self, max_new_tokens: int, seed: int) -> dict[str, Any]:
        k = KNOBS["sglang"].of(self.sampling)
        return {
            "temperature": k["temperature"],
            "top_k": k["top_k"],
            "top_p": k["top_p"],
            "max_new_tokens": max_new_tokens,
            "min_new_tokens": max_new_tokens,
            "ignore_eos": True,
            "sampling_seed": seed,
        }

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        out = self.engine.generate(
            input_ids=[list(prompt_ids)], sampling_params=self.sampling_params(max_new_tokens, seed)
        )
        first = out[0] if isinstance(out, list) else out
        return [int(x) for x in first["output_ids"]]

    def target_law(self, context: Sequence[int]) -> Sequence[float]:
        return self._law(context)


def _spec(name: str, args: dict[str, Any], doc: str, samplings: Any = (T1, T07)) -> EngineSpec:
    return EngineSpec(
        name,
        "sglang",
        doc,
        functools.partial(SGLangEngine, server_args=args),
        VOCAB,
        PROMPTS,
        tuple(samplings),
        available=available,
        notes=INSTALL,
    )


STANDALONE = {
    "speculative_algorithm": "STANDALONE",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}


def engines() -> list[EngineSpec]:
    return [
        _spec("sglang.standalone", STANDALONE, "independent draft model, chain of 3", (T1, T07, TOP_K)),
        _spec("sglang.standalone.greedy", STANDALONE, "independent draft model, greedy", (GREEDY,)),
        _spec(
            "sglang.ngram",
            {"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 4},
            "n-gram drafts",
        ),
    ]
