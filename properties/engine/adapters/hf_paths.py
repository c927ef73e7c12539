"""The ``hf`` group of engines: one row per path of HF transformers' ``generate`` that runs on the
tiny models of :mod:`.hf`, with what the user passes, the settings it is audited at and the
verdict it should get (docs/engine-audit.md, "HF transformers"). A table, kept apart from the
adapter that runs it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from specproof.properties.engine.adapters.hf import (
    PROMPTS,
    TOP_K,
    TOP_P,
    VOCAB,
    HFEngine,
    assisted,
    available,
    dflash,
    early_exit,
    gemma4_assistant,
    prompt_lookup,
    shared_uniform,
    universal,
)
from specproof.properties.engine.contract import DEFAULT_TOKENS, GREEDY, T07, T1, EngineSpec, Sampling


def _spec(
    name: str,
    build: Callable[[Sampling], HFEngine],
    doc: str,
    samplings: tuple[Sampling, ...] = (T1, T07),
    expect: str = "pass",
    vocab: int = VOCAB,
    notes: str = "",
    tokens: int = DEFAULT_TOKENS,
) -> EngineSpec:
    return EngineSpec(
        name,
        "hf",
        doc,
        build,
        vocab,
        PROMPTS,
        samplings,
        expect=expect,
        available=available,
        notes=notes,
        tokens=tokens,
    )


def paths() -> list[EngineSpec]:
    """The table: one row per path, its build, what the user passes, the settings it runs at and
    the verdict it should get (every row a call a user makes; the reasons for an expected
    violation are in the row's doc), grouped by candidate generator."""
    return _assisted() + _lookup() + _universal() + _gemma4() + _dflash()


def _assisted() -> list[EngineSpec]:
    """AssistedCandidateGenerator: an assistant model, its generation config's options."""
    p = functools.partial
    return [
        _spec(
            "hf.assisted",
            p(assisted, defaults=True),
            "assistant_model=draft, the assistant's generation config as transformers fills it "
            "(num_assistant_tokens 20, schedule constant, assistant_confidence_threshold 0.4)",
        ),
        _spec(
            "hf.assisted[k=3]",
            assisted,
            "assistant_model=draft; assistant generation_config: num_assistant_tokens=3, constant, "
            "assistant_confidence_threshold=0 (off); with top-k and top-p settings",
            (T1, T07, TOP_K, TOP_P),
        ),
        _spec(
            "hf.assisted.greedy",
            assisted,
            "assistant_model=draft, do_sample=False (num_assistant_tokens=3)",
            (GREEDY,),
        ),
        _spec(
            "hf.assisted[heuristic]",
            p(assisted, schedule="heuristic", tokens=2),
            "num_assistant_tokens_schedule='heuristic' (documented: the draft length persists across calls)",
            expect="contract_violation",
        ),
        _spec(
            "hf.assisted[heuristic_transient]",
            p(assisted, schedule="heuristic_transient", tokens=2),
            "num_assistant_tokens_schedule='heuristic_transient' (reset after each call)",
        ),
        _spec(
            "hf.assisted[threshold=0.7]",
            p(assisted, tokens=4, threshold=0.7),
            "assistant_confidence_threshold=0.7: drafting stops at the first draft the assistant gives < 0.7",
        ),
        _spec(
            "hf.assisted[shared_uniform]",
            shared_uniform,
            "a planted bug (hf_mutants): _speculative_sampling draws one acceptance uniform and "
            "repeats it at every draft position of a step (num_assistant_tokens=3); 48 tokens",
            (T1,),
            expect="lossy",
            notes="a real-code mutant: right marginal acceptance per draft, wrong joint law of a step",
            tokens=48,
        ),
        _spec(
            "hf.assisted[ensemble=0.5]",
            p(assisted, ensemble=0.5),
            "assistant_ensemble_weight=0.5 (documented as biased: verifies against 0.5 p + 0.5 q)",
            expect="lossy",
        ),
    ]


def _lookup() -> list[EngineSpec]:
    """PromptLookupCandidateGenerator and EarlyExitCandidateGenerator: no assistant model."""
    p = functools.partial
    return [
        _spec(
            "hf.prompt_lookup",
            prompt_lookup,
            "prompt_lookup_num_tokens=3, max_matching_ngram_size=2",
            (T1, T07, TOP_K),
        ),
        _spec(
            "hf.prompt_lookup[ngram=1]",
            p(prompt_lookup, tokens=2, ngram=1),
            "prompt_lookup_num_tokens=2, max_matching_ngram_size=1",
        ),
        _spec(
            "hf.prompt_lookup.greedy", prompt_lookup, "prompt_lookup_num_tokens=3, do_sample=False", (GREEDY,)
        ),
        _spec(
            "hf.early_exit",
            early_exit,
            "assistant_early_exit=1 on a 3-layer target (its first layer and head draft 3 tokens)",
        ),
    ]


def _universal() -> list[EngineSpec]:
    """Another tokenizer's assistant: universal speculative decoding, and its greedy path."""
    p = functools.partial
    return [
        _spec(
            "hf.universal",
            universal,
            "assistant with another tokenizer (10 words, 8 shared, other ids; get_vocab() in word order): "
            "UniversalSpeculativeDecodingGenerator, as the user calls it",
            expect="pass",
        ),
        _spec(
            "hf.universal[warm]",
            p(universal, warmup=True),
            "the same after one warm-up call (so that the law is tested past the first call)",
        ),
        _spec(
            "hf.universal[warm,ids]",
            p(universal, warmup=True, order="ids"),
            "the same, with an assistant tokenizer whose get_vocab() lists ids in ascending order",
        ),
        _spec(
            "hf.universal.greedy",
            universal,
            "assistant with another tokenizer, do_sample=False: "
            "AssistedCandidateGeneratorDifferentTokenizers",
            (GREEDY,),
        ),
    ]


def _gemma4() -> list[EngineSpec]:
    """SinglePositionMultiTokenCandidateGenerator: Gemma 4's assistants."""
    p = functools.partial
    return [
        _spec(
            "hf.gemma4_assistant",
            gemma4_assistant,
            "Gemma4ForCausalLM + Gemma4AssistantForCausalLM (SinglePositionMultiTokenCandidateGenerator), "
            "num_assistant_tokens=3",
        ),
        _spec(
            "hf.gemma4_assistant[ordered_embeddings]",
            p(gemma4_assistant, ordered_embeddings=True),
            "the same with use_ordered_embeddings=True (centroid-masked head: 2 centroids, top 1)",
        ),
        _spec(
            "hf.gemma4_unified_assistant",
            p(gemma4_assistant, unified=True),
            "Gemma4ForCausalLM + Gemma4UnifiedAssistantForCausalLM "
            "(SinglePositionMultiTokenCandidateGenerator)",
        ),
        _spec(
            "hf.gemma4_assistant.greedy",
            gemma4_assistant,
            "Gemma4ForCausalLM + Gemma4AssistantForCausalLM, do_sample=False",
            (GREEDY,),
        ),
    ]


def _dflash() -> list[EngineSpec]:
    """DFlashTokenCandidateGenerator: a block of drafts from a MuseGlimmer assistant."""
    return [
        _spec(
            "hf.dflash",
            dflash,
            "Llama + MuseGlimmerAssistantModel, speculation_type='dflash' (DFlashTokenCandidateGenerator), "
            "block_size=3",
            vocab=VOCAB + 1,
        ),
    ]
