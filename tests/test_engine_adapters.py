"""The vLLM and SGLang engine adapters' plumbing, against stand-ins (their engines need CUDA).

The stand-ins take the adapters' calls exactly as vLLM's ``LLM``/``SamplingParams`` and SGLang's
``Engine`` would (same constructor keywords, same request fields) and decode with specproof's
reference loop (token-level verification, exact) or, for the option a package documents as not
lossless, with the mutant loop whose drafts are argmax but verified against the soft draft law.
What is checked: the request each adapter builds (per-request seed, M new tokens with EOS
ignored, sampling settings, the draft model's path) and that the engine audit through the adapter
passes the exact stand-in and flags the lossy one (fixed seeds and sample sizes, alpha 1e-3).
The real engines: ``specproof audit engine --engine-group vllm`` / ``sglang`` on a GPU machine.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from specproof.properties.engine.adapters import sglang as sglang_engine
from specproof.properties.engine.adapters import vllm as vllm_engine
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import T07, T1, EngineSpec, Sampling
from specproof.properties.engine.registry import ENGINES, ensure_registered
from specproof.properties.verdicts import Verdict

PATHS = {"target": "/models/target", "draft": "/models/draft"}


def _reference(lossy: bool, temperature: float) -> Any:
    ensure_registered()
    name = "mutant.greedy_draft_soft_law" if lossy else "reference.draft.token"
    return ENGINES[name].build(Sampling(temperature))


class FakeParams:
    last: dict[str, Any] = {}

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)
        FakeParams.last = kwargs


class FakeLLM:
    """vLLM's ``LLM`` as the adapter calls it, decoding with the reference loop."""

    made: list[dict[str, Any]] = []

    def __init__(self, model: str, speculative_config: dict[str, Any], **kwargs: Any) -> None:
        FakeLLM.made.append({"model": model, "speculative_config": speculative_config, **kwargs})
        self.lossy = speculative_config.get("rejection_sample_method") == "synthetic"
        self.engines: dict[float, Any] = {}

    def generate(self, prompts: list[dict[str, Any]], params: FakeParams, use_tqdm: bool) -> list[Any]:
        assert len(prompts) == 1 and set(prompts[0]) == {"prompt_token_ids"} and not use_tqdm
        # exactly max_tokens by ignore_eos; min_tokens would mask the end of sequence
        assert params.ignore_eos and not hasattr(params, "min_tokens") and params.n == 1
        e = self.engines.setdefault(params.temperature, _reference(self.lossy, params.temperature))
        tokens = e.generate(prompts[0]["prompt_token_ids"], params.max_tokens, params.seed)
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=tokens)])]


class FakeSGLang:
    """SGLang's ``Engine`` as the adapter calls it, decoding with the reference loop."""

    made: list[dict[str, Any]] = []

    def __init__(self, model_path: str, **kwargs: Any) -> None:
        FakeSGLang.made.append({"model_path": model_path, **kwargs})
        self.lossy = kwargs.get("speculative_algorithm") == "LOSSY-STAND-IN"
        self.engines: dict[float, Any] = {}

    def generate(self, input_ids: list[list[int]], sampling_params: dict[str, Any]) -> list[dict[str, Any]]:
        p = sampling_params
        assert p["ignore_eos"] and p["min_new_tokens"] == p["max_new_tokens"]
        e = self.engines.setdefault(p["temperature"], _reference(self.lossy, p["temperature"]))
        return [{"output_ids": e.generate(input_ids[0], p["max_new_tokens"], p["sampling_seed"])}]


def _law(temperature: float) -> Any:
    return _reference(False, temperature).target_law


def _vllm_spec(config: dict[str, Any]) -> EngineSpec:
    def build(s: Sampling) -> vllm_engine.VLLMEngine:
        return vllm_engine.VLLMEngine(
            s, config, llm_cls=FakeLLM, params_cls=FakeParams, law=_law(s.temperature), paths=PATHS
        )

    return EngineSpec("vllm.stand-in", "vllm", "", build, 8, ((0, 6),), (T1, T07))


def _sglang_spec(args: dict[str, Any]) -> EngineSpec:
    def build(s: Sampling) -> sglang_engine.SGLangEngine:
        return sglang_engine.SGLangEngine(
            s, args, engine_cls=FakeSGLang, law=_law(s.temperature), paths=PATHS
        )

    return EngineSpec("sglang.stand-in", "sglang", "", build, 8, ((0, 6),), (T1, T07))


CONFIG = EngineAuditConfig(alpha=1e-3, samples=100, seed=0)


def test_vllm_adapter_builds_the_users_request_and_the_audit_sees_through_it():
    res = audit_engine(_vllm_spec(vllm_engine.DRAFT), CONFIG)
    assert res.verdict == Verdict.PASS, res.summary()
    made = FakeLLM.made[-1]
    assert made["model"] == PATHS["target"] and made["skip_tokenizer_init"]
    assert made["speculative_config"] == {**vllm_engine.DRAFT, "model": PATHS["draft"]}
    p = FakeParams.last
    assert p["max_tokens"] == 4 and "min_tokens" not in p and p["ignore_eos"] and isinstance(p["seed"], int)
    assert p["top_k"] == 0 and p["top_p"] == 1.0 and not p["detokenize"]
    bad = audit_engine(_vllm_spec({**vllm_engine.DRAFT, "rejection_sample_method": "synthetic"}), CONFIG)
    assert bad.verdict == Verdict.LOSSY, bad.summary()
    e = vllm_engine.VLLMEngine(
        Sampling(0.7, top_k=3, top_p=0.9),
        {"method": "ngram"},
        llm_cls=FakeLLM,
        params_cls=FakeParams,
        law=_law(0.7),
        paths=PATHS,
    )
    params = e.params(5, 11)
    assert (params.temperature, params.top_k, params.top_p, params.seed) == (0.7, 3, 0.9, 11)
    assert "model" not in FakeLLM.made[-1]["speculative_config"]  # n-gram lookup needs no draft model


def test_sglang_adapter_builds_the_users_request_and_the_audit_sees_through_it():
    res = audit_engine(_sglang_spec(sglang_engine.STANDALONE), CONFIG)
    assert res.verdict == Verdict.PASS, res.summary()
    made = FakeSGLang.made[-1]
    assert made["model_path"] == PATHS["target"] and made["speculative_draft_model_path"] == PATHS["draft"]
    assert made["skip_tokenizer_init"] and made["speculative_algorithm"] == "STANDALONE"
    bad = audit_engine(_sglang_spec({"speculative_algorithm": "LOSSY-STAND-IN"}), CONFIG)
    assert bad.verdict == Verdict.LOSSY, bad.summary()
    e = sglang_engine.SGLangEngine(
        Sampling(1.0), {"speculative_algorithm": "NGRAM"}, engine_cls=FakeSGLang, law=_law(1.0), paths=PATHS
    )
    sp = e.sampling_params(4, 7)
    assert sp["top_k"] == -1 and sp["sampling_seed"] == 7 and sp["max_new_tokens"] == 4


def test_without_cuda_the_engines_are_listed_unavailable_with_the_install_line():
    import torch

    ensure_registered()
    for group, module in (("vllm", vllm_engine), ("sglang", sglang_engine)):
        specs = [s for s in ENGINES.values() if s.group == group]
        assert specs, group
        ok, why = specs[0].available()
        if not torch.cuda.is_available():
            assert not ok and ("CUDA" in why or module.INSTALL in why), why


def test_knobs_spell_off_and_greedy_as_each_engine_does():
    """Top-k off is 0, -1, None or 2**31 - 1 by engine; greedy is temperature 0 or do_sample
    False; a parameter an engine's knobs cannot say is refused, naming it, never dropped."""
    from specproof.properties.engine.knobs import KNOBS, OPENVINO_TOP_K_OFF
    from specproof.reference.errors import BadParameterError

    plain = Sampling(0.7)
    assert KNOBS["vllm"].of(plain) == {"temperature": 0.7, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    assert KNOBS["sglang"].of(plain)["top_k"] == -1
    assert KNOBS["hf"].of(plain) == {
        "temperature": 0.7,
        "top_k": None,
        "top_p": None,
        "min_p": None,
        "do_sample": True,
    }
    assert KNOBS["openvino_genai"].of(plain)["top_k"] == OPENVINO_TOP_K_OFF
    assert KNOBS["vllm"].of(Sampling(1.0, top_k=3, top_p=0.9))["top_k"] == 3
    greedy = KNOBS["hf"].of(Sampling(0.0))
    assert greedy["do_sample"] is False and greedy["temperature"] == 1.0
    assert KNOBS["vllm"].of(Sampling(0.0))["temperature"] == 0.0 and "do_sample" not in KNOBS["vllm"].of(
        plain
    )
    with pytest.raises(BadParameterError, match="min_p"):
        KNOBS["openvino_genai"].of(Sampling(1.0, min_p=0.1))
    with pytest.raises(BadParameterError, match="frequency_penalty"):
        KNOBS["vllm"].of(Sampling(1.0, frequency_penalty=0.5))
