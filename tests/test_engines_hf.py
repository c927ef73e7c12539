"""HF transformers' generate loop under the engine audit (skipped without transformers; run by
``tox -e engine``, which also writes the HF table of docs/measurements/engine-audit-hf.md).

Fixed seeds and sample sizes, alpha 1e-3, so verdicts cannot flake: the paths transformers
declares lossless pass (assistant model with top-k/top-p, heuristic_transient schedule, prompt
lookup, early exit, DFlash, different tokenizers when the assistant's vocabulary lists its ids in
order; greedy decoding for each path that has one); the documented relaxations are caught (the
ensemble weight is lossy; the ``heuristic`` schedule, whose draft length persists across calls,
breaks "equal seeds give equal tokens"); and the two findings, each with its cause pinned in
transformers' own code and reproduced in the reference by the exact oracle
(properties/oracle/findings.py, proofs_notes/thirdparty.md):

* Gemma 4's assistant drafts the argmax but hands the verifier its soft logits: lossy;
* universal speculative decoding (assistant with another tokenizer, sampling) hands the verifier
  a permutation of the law its drafts were drawn from whenever the assistant tokenizer's
  ``get_vocab()`` is not in id order (a hash order in practice): lossy; and its first call after
  seeding draws from torch's global RNG while pruning the assistant's head, so the first call's
  tokens differ from the next call's under the same seed.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import tier_helpers
import torch

from specproof.properties.conformance.backends.thirdparty import ADAPTERS, availability
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.registry import GREEDY, T07, T1, Sampling, resolve_engine, with_options
from specproof.properties.verdicts import Verdict


def _need_hf() -> None:
    ok, why = availability(next(a for a in ADAPTERS if a.module == "hf"))
    if not ok:
        if tier_helpers.required():  # .ci/run's HF tier: transformers was just installed
            pytest.fail(f"the HF tier is required here (SPECPROOF_TIER_REQUIRED=1): {why}", pytrace=False)
        pytest.skip(why)


@pytest.fixture(autouse=True)
def _hf() -> None:
    _need_hf()


ALPHA = 1e-3


def _audit(name: str, sampling: Sampling, samples: int, prompt=(5, 2, 5, 2)):
    spec = with_options(resolve_engine(name), prompts=[prompt], samplings=[sampling])
    return audit_engine(spec, EngineAuditConfig(alpha=ALPHA, samples=samples, seed=0))


LOSSLESS = [
    ("hf.assisted[k=3]", Sampling(0.7, top_p=0.8)),
    ("hf.assisted[k=3]", Sampling(1.0, top_k=3)),
    ("hf.assisted[heuristic_transient]", T1),
    ("hf.prompt_lookup", T07),
    ("hf.early_exit", T1),
    ("hf.dflash", T07),
    ("hf.universal[warm,ids]", T1),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "sampling"), LOSSLESS, ids=[f"{n}-{s.label}" for n, s in LOSSLESS])
def test_paths_declared_lossless_pass(name, sampling):
    res = _audit(name, sampling, samples=200)
    assert res.verdict == Verdict.PASS, res.summary()
    f = res.cases[0].forwards
    assert min(f) < 4 and max(f) > 1, f  # drafts were accepted (fewer forwards than tokens) and rejected


@pytest.mark.parametrize(
    "name",
    ["hf.assisted.greedy", "hf.prompt_lookup.greedy", "hf.universal.greedy", "hf.gemma4_assistant.greedy"],
)
def test_greedy_paths_reproduce_greedy_decoding(name):
    res = _audit(name, GREEDY, samples=10)
    assert res.verdict == Verdict.PASS and res.cases[0].point_mass, res.summary()


def test_documented_relaxations_are_caught():
    res = _audit("hf.assisted[ensemble=0.5]", T1, samples=200)
    assert res.verdict == Verdict.LOSSY, res.summary()
    res = _audit("hf.assisted[heuristic]", T1, samples=50)
    assert res.verdict == Verdict.CONTRACT_VIOLATION and res.violation["kind"] == "nondeterministic"


def test_gemma4_assistant_drafts_the_argmax_but_verifies_them_as_sampled(monkeypatch):
    from transformers.generation import utils

    from specproof.properties.oracle.findings import argmax_told_q_witness

    res = _audit("hf.gemma4_assistant", T1, samples=400, prompt=(0, 6))
    assert res.verdict == Verdict.LOSSY, res.summary()
    # the cause, in transformers' loop: the candidates handed to _speculative_sampling are the
    # argmax of the candidate logits, and those logits are not one-hot
    seen = []
    real = utils._speculative_sampling

    def spy(candidate_input_ids, candidate_logits, candidate_length, new_logits, **kw):
        seen.append((candidate_input_ids[0, -candidate_length:].clone(), candidate_logits[0].clone()))
        return real(candidate_input_ids, candidate_logits, candidate_length, new_logits, **kw)

    monkeypatch.setattr(utils, "_speculative_sampling", spy)
    engine = resolve_engine("hf.gemma4_assistant").build(T1)
    for seed in range(5):
        engine.generate([0, 6], 4, seed)
    assert seen
    for drafts, logits in seen:
        assert torch.equal(drafts, logits.argmax(-1))
        assert (logits.softmax(-1).max(-1).values < 0.999).all()
    # the same one-line difference in the reference: lossy by the exact oracle
    assert argmax_told_q_witness().tv == Fraction(1, 2)


def test_universal_speculative_decoding_tells_the_verifier_a_permuted_draft_law():
    from transformers.generation.candidate_generator import AssistantToTargetTranslator

    from specproof.properties.engine.adapters import hf as hf_engine
    from specproof.properties.oracle.findings import permuted_draft_law_witness

    def mismatches(order: str) -> list[int]:
        tr = AssistantToTargetTranslator(
            hf_engine.word_tokenizer(hf_engine.TARGET_WORDS),
            hf_engine.word_tokenizer(hf_engine.ASSISTANT_WORDS, order),
            hf_engine.VOCAB,
            assistant_model=hf_engine.llama(2, vocab=len(hf_engine.ASSISTANT_WORDS), layers=1),
            assistant_prune_lm_head=True,
        )
        bad = []
        for j in range(len(tr.assistant_overlap_token_ids)):
            spike = torch.full((1, 1, len(tr.assistant_overlap_token_ids)), -30.0)
            spike[0, 0, j] = 30.0
            law_at = int(tr.get_target_logits(spike)[0, 0].argmax())  # where q's mass is told to be
            drawn = int(
                tr.get_target_ids(torch.tensor([[0]]), torch.tensor([[0]]), torch.tensor([[0, j]]))[0, -1]
            )
            bad += [j] if law_at != drawn else []
        return bad

    assert mismatches("ids") == []
    assert len(mismatches("alphabetical")) >= 2
    res = _audit("hf.universal[warm]", T1, samples=300, prompt=(0, 6))
    assert res.verdict == Verdict.LOSSY, res.summary()
    assert permuted_draft_law_witness().tv == Fraction(3, 26)


def test_universal_first_call_draws_from_the_global_rng_while_pruning_the_head():
    from transformers.pytorch_utils import prune_linear_layer

    engine = resolve_engine("hf.universal").build(T1)
    first, second = engine.generate([0, 6], 4, 3), engine.generate([0, 6], 4, 3)
    warm = resolve_engine("hf.universal[warm]").build(T1)
    assert warm.generate([0, 6], 4, 3) == warm.generate([0, 6], 4, 3) == second
    assert first != second
    # the cause: pruning builds a fresh nn.Linear, whose initialization draws from torch's global RNG
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        a = torch.rand(1)
        torch.manual_seed(0)
        prune_linear_layer(torch.nn.Linear(4, 6), torch.tensor([0, 2]))
        b = torch.rand(1)
    assert not torch.equal(a, b)


def test_teacher_forced_laws_are_the_laws_one_prefix_at_a_time():
    """``target_laws_along`` (one forward over the path) gives :meth:`target_law` at every prefix,
    under a stateful option too (its processors called once per position, as ``generate`` does)."""
    from specproof.properties.engine.adapters import hf_options as H

    for option in ("repetition_penalty", "synthid"):
        gen = next(g for g in H.GENERATORS if g.name == "plain")
        engine = H.build(gen, next(o for o in H.OPTIONS if o.name == option), T1)
        prompt = list(H.PROMPT)
        tokens = engine.generate(prompt, 6, 1)
        along = engine.target_laws_along(prompt, tokens)
        engine._memo.clear()
        for d, law in enumerate(along):
            one = engine.target_law(prompt + tokens[:d], prompt_len=len(prompt))
            assert torch.allclose(torch.tensor(law), torch.tensor(one), atol=1e-6), (option, d)


def test_a_uniform_shared_by_a_steps_drafts_in_transformers_own_loop_is_lossy():
    """The real-code mutant (hf_mutants.shared_uniform): transformers' ``_speculative_sampling``
    with its acceptance uniforms replaced by one repeated uniform. The token test over 48 tokens
    flags it (seed 0, alpha 1e-3, 160 samples: 7,680 tokens), and so does the cells test at M = 4
    given enough samples; the unmutated path passes the same plan."""
    spec = with_options(resolve_engine("hf.assisted[shared_uniform]"), prompts=[(5, 2, 5, 2)])
    res = audit_engine(spec, EngineAuditConfig(alpha=ALPHA, samples=160, seed=0, test="tokens"))
    assert res.verdict == Verdict.LOSSY, res.summary()
    assert res.cases[0].token_finding is not None, res.summary()
    control = with_options(
        resolve_engine("hf.assisted[k=3]"), prompts=[(5, 2, 5, 2)], samplings=[T1], tokens=48
    )
    res = audit_engine(control, EngineAuditConfig(alpha=ALPHA, samples=160, seed=0, test="tokens"))
    assert res.verdict == Verdict.PASS, res.summary()
