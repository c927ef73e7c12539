"""Where an output ends (reference/sampling.py ``Sampling.end``; proofs_notes/stops.md): at the
first end of sequence or the first token whose text completes a stop string, wherever in a step's
block it lies; the law is absorbing after it; the reference loop stops there exactly; the engine
audit refuses tokens past a stop (``after_stop``) and passes the loop that stops right.

Every check here is exact or a deterministic outcome at a fixed seed: the mutants break the
contract on a sample, not by a statistic; the correct loop's pass is the law test at alpha 1e-4
(the audit's default), seed 0, 400 samples a case.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specproof.properties.engine import registry as E
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.request import EngineRequest, parse_param
from specproof.properties.engine.stop_mutants import STOPS, TEXTS, cut
from specproof.properties.verdicts import Verdict
from specproof.reference.decode import decode
from specproof.reference.errors import BadParameterError, SpecproofInputError, UsageError
from specproof.reference.proposers.draft_model import draft_model
from specproof.reference.sampling import Sampling, processed_law

#: token texts of several characters, so a stop string can span tokens and end inside one
WORDS = ("ab", "c", "a", "bc")


def test_the_output_ends_at_the_first_eos_or_completed_stop_string():
    s = Sampling(1.0, eos=3, stop=("ca",), texts=WORDS)
    assert s.end([0, 2, 0]) is None  # "aba ab": no "ca"
    assert s.end([1, 2, 0, 1]) == 2  # "c" + "a" completes "ca" at the second token
    assert s.end([0, 3, 1, 2]) == 2  # eos first
    assert s.end([1, 0]) == 2  # "c" + "ab": "ca" ends inside the second token's text
    only_eos = Sampling(1.0, eos=3)
    assert only_eos.end([0, 1, 3, 3]) == 3 and only_eos.end([0, 1]) is None
    assert Sampling(1.0).end([0, 1, 2]) is None and not Sampling(1.0).ends


def test_a_stop_string_spanning_three_tokens_ends_at_the_token_completing_it():
    s = Sampling(1.0, stop=("cabc",), texts=WORDS)
    assert s.end([1, 2, 3]) == 3  # "c" + "a" + "bc"
    assert s.end([2, 1, 0, 1]) == 4  # "a" "c" "ab" "c": "cabc" needs the fourth
    assert s.end([1, 2, 0]) is None


@given(st.lists(st.integers(0, 3), max_size=8), st.sampled_from([("ca",), ("b",), ("abc", "ca")]))
def test_end_is_the_shortest_prefix_whose_text_holds_a_stop(out, stops):
    s = Sampling(1.0, stop=stops, texts=WORDS)
    texts = ["".join(WORDS[x] for x in out[:k]) for k in range(len(out) + 1)]
    want = next((k for k, t in enumerate(texts) if any(x in t for x in stops)), None)
    assert s.end(out) == want


def test_the_law_is_absorbing_at_the_ending_token():
    s = Sampling(1.0, stop=("ca",), texts=WORDS)
    logits = [0.1, 0.2, 0.3, 0.4]
    law = processed_law(logits, s, (0, 1, 2), prompt_len=1)  # generated "c" "a": ended
    assert law == [0.0, 0.0, 1.0, 0.0]
    assert processed_law(logits, s, (1, 2), prompt_len=2) == processed_law(logits, Sampling(1.0), (1, 2), 2)
    # the prompt's own text never stops the output
    assert processed_law(logits, s, (1, 2, 0), prompt_len=2)[2] < 1


def test_bad_stop_parameters_name_the_argument():
    with pytest.raises(BadParameterError, match="stop"):
        Sampling(1.0, stop=("",), texts=WORDS)
    with pytest.raises(BadParameterError, match="stop.*texts"):
        Sampling(1.0, stop=("a",))
    with pytest.raises(BadParameterError, match="stop"):
        Sampling(1.0, stop="a", texts=WORDS)  # type: ignore[arg-type]
    with pytest.raises(BadParameterError, match="texts"):
        Sampling(1.0, stop=("a",), texts=WORDS).check_vocab(8)
    with pytest.raises(SpecproofInputError, match="id 7 has no text"):
        Sampling(1.0, stop=("a",), texts=WORDS).end([1, 7])
    assert parse_param("stop=c;ab") == ("stop", ("c", "ab"))
    with pytest.raises(UsageError, match="stop"):
        parse_param("stop=;")
    with pytest.raises(UsageError, match="token-map"):
        EngineRequest(params=(("stop", ("c",)),)).settings([Sampling(1.0)])
    made = EngineRequest(params=(("stop", ("c",)),), token_map=TEXTS).settings([Sampling(1.0)])
    assert made == (Sampling(1.0, stop=("c",), texts=TEXTS),)


@pytest.mark.parametrize("rule, process", [("token", "iid_chain"), ("rrs", "wor_siblings")])
def test_the_reference_loop_stops_exactly_where_its_output_ends(rule, process):
    """With the same draws, the loop with the stop returns the loop without it cut at
    ``Sampling.end``: a stop inside a block drops the block's rest, and nothing else changes.
    This holds for the rules that decide node by node; block verification reads the laws after
    the end too (absorbing ones), so its draws differ, and its exactness with stops is the exact
    matrix's (tests/test_sampling_params.py, ``stop 'ba' or 'c'``)."""
    from specproof.properties.engine.loops import engine_target

    target = engine_target()
    with_stop = Sampling(1.0, eos=7, stop=("c", "ab"), texts=TEXTS)
    shape = (-1, 0, 1, 2) if process == "iid_chain" else (-1, 0, 0, 1)
    inside = 0
    for seed in range(40):
        args = (target, draft_model(target), process, rule, shape, (0, 6), 12)
        free = decode(*args, np.random.default_rng(seed), until=8)
        stopped = decode(*args, np.random.default_rng(seed), until=8, sampling=with_stop)
        out = free.tokens[2:]
        k = with_stop.end(out)
        assert stopped.tokens[2:] == (out if k is None else out[:k])
        assert sum(stopped.emitted_per_step) == len(stopped.tokens) - 2
        inside += k is not None and k not in np.cumsum(free.emitted_per_step)
    assert inside > 0  # some stops fell inside a block


@settings(max_examples=200)
@given(
    st.lists(st.integers(0, 7), min_size=1, max_size=10),
    st.lists(st.integers(1, 4), min_size=1, max_size=10),
)
def test_the_faulty_cuts_never_stop_earlier_and_past_block_overshoots_inside_a_block(tokens, blocks):
    tokens = tuple(tokens)
    s = STOPS
    end = s.end(tokens)
    right = cut(s, tokens, tuple(blocks), "none")
    assert right == (len(tokens) if end is None else end)
    bounds = set(np.cumsum(blocks).tolist())
    for fault in ("past_block", "tail_only"):
        got = cut(s, tokens, tuple(blocks), fault)
        assert got >= right or got == len(tokens)
    if end is not None and end not in bounds and end < min(sum(blocks), len(tokens)):
        assert cut(s, tokens, tuple(blocks), "past_block") > end


@pytest.mark.parametrize("name", ["mutant.stop_past_block", "mutant.stop_tail_only"])
def test_tokens_past_a_stop_inside_a_block_break_the_contract(name):
    res = audit_engine(E.resolve_engine(name), EngineAuditConfig(samples=200, seed=0))
    assert res.verdict == Verdict.CONTRACT_VIOLATION and res.violation["kind"] == "after_stop", res.summary()
    assert "stop string" in res.violation["detail"]


def test_a_length_checked_once_per_step_returns_the_rest_of_the_block():
    """max_new_tokens reached inside an accepted block: the block's tokens past the M-th are
    returned too, and the first sample whose M-th token is not its block's last breaks the contract
    (``length``), naming how many tokens came back."""
    res = audit_engine(E.resolve_engine("mutant.length_past_block"), EngineAuditConfig(samples=200, seed=0))
    assert res.verdict == Verdict.CONTRACT_VIOLATION and res.violation["kind"] == "length", res.summary()
    assert "tokens returned, 4 asked" in res.violation["detail"], res.violation


def test_the_loop_that_stops_right_passes():
    res = audit_engine(E.resolve_engine("alternative.stops"), EngineAuditConfig(samples=400, seed=0))
    assert res.verdict == Verdict.PASS, res.summary()
    ended = [c for c in res.cases if c.case.sampling.stop]
    # every case drew its samples, and many ended before the horizon (only observed tokens score)
    assert ended and all(c.n == 400 and c.observed_tokens < 400 * c.case.tokens for c in ended)
    assert sum(c.observed_tokens for c in ended) < 0.8 * sum(400 * c.case.tokens for c in ended)
