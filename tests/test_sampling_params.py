"""Request parameters under speculation (reference/sampling.py, properties/engine/param_mutants.py,
properties/oracle/params.py; proofs_notes/sampling_params.md).

* each parameter's law, on small rows worked by hand;
* the processed law is a law (or the dead end) for hypothesis-drawn requests and contexts;
* the reference loop is exact under every parameter (the exact oracle, two steps, 4 tokens) for
  a proposer and rule per parameter, and under a parameter per proposer;
* the engine audit flags each public bug class and passes the correct loop (fixed sample sizes
  and seeds, alpha 1e-4: verdicts that cannot flake), and calls an ignored parameter a
  contract violation;
* end of sequence: samples end early and are padded; tokens after it are a violation;
* bad input is a usage error naming what is wrong.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specproof.properties.cli import main
from specproof.properties.engine import registry as E
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.oracle.params import PARAMETERS, check_cell
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import BadParameterError, UsageError
from specproof.reference.sampling import Grammar, Sampling, from_options, processed_law

Z = [2.0, -1.0, 0.5, 0.0]  # raw logits of a 4-token row


def softmax(z):
    z = np.asarray(z, dtype=float)
    e = np.exp(z - z[np.isfinite(z)].max())
    e[~np.isfinite(z)] = 0.0
    return e / e.sum()


# --------------------------------------------------------------------------- each parameter's law


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits_of_seen_tokens():
    law = processed_law(Z, Sampling(1.0, repetition_penalty=2.0), (0, 1), 2)
    assert np.allclose(law, softmax([1.0, -2.0, 0.5, 0.0]))


def test_presence_and_frequency_count_the_output_by_default():
    s = Sampling(1.0, presence_penalty=0.5, frequency_penalty=0.25)
    law = processed_law(Z, s, (2, 0, 0, 2), 2)  # prompt (2, 0); output (0, 2)
    assert np.allclose(law, softmax([2.0 - 0.75, -1.0, 0.5 - 0.75, 0.0]))
    whole = processed_law(Z, Sampling(1.0, presence_penalty=0.5, presence_scope="all"), (2, 0, 0, 2), 2)
    assert np.allclose(whole, softmax([1.5, -1.0, 0.0, 0.0]))


def test_logit_bias_adds_and_minus_infinity_bans():
    law = processed_law(Z, Sampling(1.0, logit_bias=((1, 3.0), (0, -math.inf))), (3,), 1)
    assert law[0] == 0 and np.allclose(law, softmax([-math.inf, 2.0, 0.5, 0.0]))


def test_bad_words_and_no_repeat_ngrams_ban_by_the_context_tail():
    s = Sampling(1.0, bad_words=((3, 1), (2,)))
    assert processed_law(Z, s, (0, 3), 1)[1] == 0 and processed_law(Z, s, (0, 3), 1)[2] == 0
    assert processed_law(Z, s, (3, 0), 1)[1] > 0
    ngram = Sampling(1.0, no_repeat_ngram_size=2)
    law = processed_law(Z, ngram, (1, 3, 2, 1), 4)  # "1 3" was seen: 3 may not follow 1 again
    assert law[3] == 0 and law[0] > 0


def test_min_new_tokens_holds_back_eos_and_eos_is_absorbing():
    s = Sampling(1.0, eos=0, min_new_tokens=2)
    assert processed_law(Z, s, (1, 2), 1)[0] == 0  # one token generated
    assert processed_law(Z, s, (1, 2, 3), 1)[0] > 0  # two
    assert processed_law(Z, s, (1, 2, 0), 1) == [1.0, 0.0, 0.0, 0.0]  # after eos, eos


def test_a_grammar_masks_by_state_and_allows_eos_where_it_accepts():
    g = Grammar.from_regex("(ab|c)+", "abcd")
    s = Sampling(1.0, eos=3, grammar=g)
    assert [p > 0 for p in processed_law(Z, s, (0,), 1)] == [True, False, True, False]
    assert [p > 0 for p in processed_law(Z, s, (0, 0), 1)] == [False, True, False, False]
    assert [p > 0 for p in processed_law(Z, s, (0, 0, 1), 1)] == [True, False, True, True]
    dead = processed_law(Z, s, (0, 1), 1)  # "b" first: the output left the language
    assert dead == [0.0, 0.0, 0.0, 1.0]


def test_the_cut_offs_follow_the_temperature():
    law = processed_law(Z, Sampling(0.5, top_k=2), (0,), 1)
    assert np.allclose(law, softmax([4.0, -math.inf, 1.0, -math.inf]))
    law = processed_law(Z, Sampling(1.0, min_p=0.3), (0,), 1)
    p = softmax(Z)
    assert np.allclose(law, np.where(p >= 0.3 * p.max(), p, 0) / np.where(p >= 0.3 * p.max(), p, 0).sum())


REQUESTS = st.builds(
    Sampling,
    temperature=st.sampled_from([0.0, 0.5, 1.0, 1.5]),
    top_k=st.one_of(st.none(), st.integers(1, 4)),
    min_p=st.one_of(st.none(), st.sampled_from([0.0, 0.2, 0.6])),
    repetition_penalty=st.one_of(st.none(), st.sampled_from([0.7, 1.3, 2.0])),
    presence_penalty=st.sampled_from([0.0, 0.5, -0.5]),
    frequency_penalty=st.sampled_from([0.0, 0.3]),
    bad_words=st.sampled_from([(), ((1,),), ((0, 2), (3,))]),
    no_repeat_ngram_size=st.integers(0, 3),
    min_new_tokens=st.integers(0, 2),
    eos=st.just(3),
)


@given(
    REQUESTS,
    st.lists(st.floats(-3, 3), min_size=4, max_size=4),
    st.lists(st.integers(0, 3), min_size=1, max_size=6),
    st.integers(0, 6),
)
def test_the_processed_law_is_a_law(s, logits, context, prompt_len):
    law = processed_law(logits, s, tuple(context), min(prompt_len, len(context)))
    assert len(law) == 4 and all(p >= 0 for p in law) and abs(sum(law) - 1) < 1e-12


# --------------------------------------------------------------------------- exact, two steps


@pytest.mark.parametrize("parameter", list(PARAMETERS))
def test_the_reference_loop_is_exact_under_each_parameter(parameter):
    cell = check_cell(parameter, "ngram", "token")
    assert cell.verdict == Verdict.EXACT, cell


@pytest.mark.slow
@pytest.mark.parametrize(
    "proposer, rule",
    [("draft", "token"), ("medusa", "rrs"), ("eagle2", "rrs"), ("mtp", "block"), ("dflash", "mss")],
)
def test_the_reference_loop_is_exact_for_each_proposer_under_a_grammar_and_penalties(proposer, rule):
    for parameter in ("grammar (ab|c)+", "presence 0.8, frequency 0.5"):
        cell = check_cell(parameter, proposer, rule)
        assert cell.verdict == Verdict.EXACT, cell


# --------------------------------------------------------------------------- the engine audit

PARAM_MUTANTS = [
    "mutant.penalty_ignored_at_drafts",
    "mutant.penalty_per_step",
    "mutant.penalty_counted_twice",
    "mutant.penalty_bonus_only",
    "mutant.min_p_bonus_only",
    "mutant.logit_bias_bonus_only",
    "mutant.one_grammar_mask",
    "mutant.min_new_tokens_in_steps",
    "mutant.min_new_tokens_counts_drafts_ahead",
    "mutant.top_p_draft_only",
]


@pytest.mark.parametrize("name", PARAM_MUTANTS)
def test_each_bug_class_is_flagged(name):
    res = audit_engine(E.resolve_engine(name), EngineAuditConfig(samples=1500, seed=0))
    assert res.verdict == Verdict.LOSSY, res.summary()


def test_the_correct_loop_passes_under_every_parameter():
    res = audit_engine(
        E.resolve_engine("alternative.sampling_params"), EngineAuditConfig(samples=400, seed=0)
    )
    assert res.verdict == Verdict.PASS, res.summary()


def test_an_ignored_parameter_is_a_contract_violation():
    res = audit_engine(E.resolve_engine("mutant.ignores_penalties"), EngineAuditConfig(samples=50))
    assert res.verdict == Verdict.CONTRACT_VIOLATION and res.violation["kind"] == "ignored_parameter"


@pytest.mark.slow
@given(REQUESTS.filter(lambda s: s.temperature > 0))
def test_the_reference_loop_passes_under_drawn_requests(s):
    """The law holds under every drawn request. Where the request truncates both laws to disjoint
    supports (top-k 1 with the draft's argmax never the target's), every draft is rejected and
    the right verdict is ``no_speculation``: the law test must still find nothing."""
    from dataclasses import replace

    s = replace(s, eos=7)
    spec = E.with_options(E.resolve_engine("reference.draft.token"), prompts=[(0, 6)], samplings=[s])
    res = audit_engine(spec, EngineAuditConfig(samples=150, seed=1))
    assert res.violation is None and not any(c.rejected for c in res.cases), res.summary()
    if res.verdict == Verdict.NO_SPECULATION:
        assert res.speculation.drafted > 0 and res.speculation.accepted == 0, res.summary()
        cut = (s.top_k, s.top_p, s.min_p)
        assert any(c is not None for c in cut), res.summary()  # only a cut-off can do it
    else:
        assert res.verdict == Verdict.PASS, res.summary()


def test_samples_end_on_eos_and_tokens_after_it_are_a_violation():
    from specproof.properties.engine.contract import EngineSpec
    from specproof.properties.engine.loops import direct_engine

    s = Sampling(1.0, eos=7, logit_bias=((7, 2.5),))
    spec = E.with_options(E.resolve_engine("reference.draft.token"), prompts=[(0, 6)], samplings=[s])
    res = audit_engine(spec, EngineAuditConfig(samples=300, seed=0))
    assert res.verdict == Verdict.PASS, res.summary()

    class AfterEos:
        vocab, eos_id = 8, 7

        def __init__(self, sampling):
            self.inner = direct_engine(sampling)

        def generate(self, prompt, m, seed):
            return [7, 1, 1, 1][:m]

        def target_law(self, context, prompt_len=None):
            return self.inner.target_law(context, prompt_len)

    bad = EngineSpec("after_eos", "user", "", AfterEos, 8, ((0, 6),), (s,), tokens=4)
    res = audit_engine(bad, EngineAuditConfig(samples=20))
    assert res.verdict == Verdict.CONTRACT_VIOLATION and res.violation["kind"] == "after_eos"


# --------------------------------------------------------------------------- bad input


def test_bad_parameters_are_usage_errors_naming_them(capsys):
    with pytest.raises(UsageError, match="typical_p"):
        from_options({"typical_p": 0.9})
    with pytest.raises(BadParameterError, match="repetition_penalty"):
        Sampling(1.0, repetition_penalty=0.0)
    with pytest.raises(BadParameterError, match="accepts no output"):
        Sampling(1.0, grammar=Grammar.from_regex("z+", "abcd"))
    with pytest.raises(BadParameterError, match="needs the end-of-sequence"):
        Sampling(1.0, min_new_tokens=2)
    assert main(["audit", "engine", "reference.direct", "--param", "logit_bias=9:1"]) == 4
    assert "logit_bias: id 9 outside" in capsys.readouterr().err
    assert main(["audit", "engine", "reference.direct", "--param", "typical_p=0.9"]) == 4
    assert "typical_p" in capsys.readouterr().err
