"""The engine audit's token test end to end: every emitted token scored against the target's law
at its own prefix, at any horizon, an anytime-valid verdict naming the statistic that moved it.

Every audit here has a fixed seed and plan, so each verdict is a fixed outcome (no flakes): alpha
1e-4 family-wise (the audit's default), per-token TV 0.05 or 0.1 (a few thousand tokens a case),
the token test alone (``test="tokens"``) where the point is that it decides by itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import T07, T1, EngineSpec, Sampling
from specproof.properties.engine.loops import DirectEngine, engine_target
from specproof.properties.engine.registry import resolve_engine, with_options
from specproof.properties.engine.token_stage import block_indices
from specproof.properties.tokens.family import direction
from specproof.properties.verdicts import Verdict
from specproof.reference.transformer import TransformerLM

QUICK = {"tv": 0.05, "test": "tokens", "report_samples": 0}


def _audit(name: str, **kw: object):
    spec = resolve_engine(name)
    plan = {**QUICK, **{k: v for k, v in kw.items() if k in ("tv", "test", "samples", "seed")}}
    if "tokens" in kw or "prompts" in kw or "samplings" in kw:
        spec = with_options(spec, kw.get("prompts"), kw.get("samplings"), kw.get("tokens"))  # type: ignore[arg-type]
    return audit_engine(spec, EngineAuditConfig(**plan))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "prompt", "setting", "tv"),
    [
        ("mutant.temperature_target_only", (0, 6), T07, 0.05),
        ("mutant.greedy_draft_soft_law", (0, 6), T1, 0.05),
        # a stale KV moves each context's law its own way: the surprisal's excess sees it, slowly
        ("mutant.no_kv_rollback", (5, 2, 5, 2), T07, 0.02),
    ],
)
def test_the_token_test_alone_flags_the_mutant_loops(name, prompt, setting, tv):
    r = _audit(name, prompts=[prompt], samplings=[setting], tv=tv)
    assert r.verdict == Verdict.LOSSY, r.summary()
    assert r.token_rejected and r.token_test is not None and r.token_test["rejected"]
    assert "token test" in r.short_witness() and "e-value" in r.witness_text()
    f = r.token_test["finding"]
    assert f["statistic"] and f["tokens"] > 0
    assert (
        f["direction"] == direction(f["statistic"], f["drift"]) and f"({f['direction']})" in r.witness_text()
    )


def test_a_drift_reads_which_way_it_leans():
    """The sign of each statistic's drift, in words (the table of properties/tokens/family.py)."""
    assert direction("mean", -0.03) == "toward likely tokens (sharpening)"
    assert direction("position[8-16].mean", 0.02) == "toward unlikely tokens (flattening)"
    assert direction("greedy", 0.1) == "toward the argmax"
    assert direction("surprisal", 0.2).startswith("tokens more surprising")
    assert direction("serial.samples", 0.3) == "consecutive samples moving together"
    assert direction("index.mean", -0.1) == "toward lower token ids"
    assert direction("block[3+].uniform", 0.05).startswith("mass moved between cells")


def test_where_the_cells_test_is_stronger_the_report_says_which_test_found_it():
    """At M = 4 a stale KV is seen by the cells of the joint law long before the token test."""
    r = _audit("mutant.no_kv_rollback", test="both", tv=0.05)
    assert r.verdict == Verdict.LOSSY and any(c.rejected for c in r.cases) and not r.token_rejected
    assert "token test" not in r.short_witness() and "p =" in r.short_witness()


@pytest.mark.parametrize("name", ["reference.draft.token", "alternative.kv_rollback"])
def test_exact_loops_pass_the_token_test(name):
    r = _audit(name)
    assert r.verdict == Verdict.PASS, r.summary()
    assert not r.token_rejected and r.token_test["log_wealth"] < math.log(1e4)
    assert all(c.observed_tokens >= c.planned * 4 for c in r.cases)
    assert "detects a per-token TV" in r.summary()


def test_a_long_horizon_passes_and_sees_every_position():
    """M = 48, beyond the cells test's 12: the token test alone, every position scored."""
    r = _audit("reference.draft.token", tokens=48, prompts=[(0, 6)], samplings=[T1], tv=0.1)
    assert r.verdict == Verdict.PASS, r.summary()
    bets = {b["name"]: b for b in r.token_test["cases"]["0"]["bets"]}
    assert bets["position[16-48].uniform"]["tokens"] == r.samples * 33  # positions 16 to 48
    with pytest.raises(Exception, match="M must lie in"):
        audit_engine(
            with_options(resolve_engine("reference.direct"), tokens=48), EngineAuditConfig(test="cells")
        )


def test_the_plan_is_in_tokens_and_says_so():
    r = _audit("reference.direct", prompts=[(0, 6)], samplings=[T1], tokens=8)
    assert "tokens per case for power 0.99 against a per-token TV of 0.05" in r.plan_text
    assert "information limit" in r.plan_text
    planned = r.token_test["cases"]["0"]["tokens"]
    assert planned == r.cases[0].observed_tokens >= r.cases[0].planned * 8 - 8


class _Ending(DirectEngine):
    """No speculation; end of sequence 3 may be drawn and ends the sample (absorbing)."""

    def __init__(self, sampling: Sampling) -> None:
        super().__init__(TransformerLM(engine_target(), sampling.temperature))
        self.eos_id = 3


def test_ended_samples_are_scored_up_to_their_end():
    spec = EngineSpec("ending", "user", "", _Ending, 8, ((0, 6),), (Sampling(1.0, eos=3),), tokens=6)
    r = audit_engine(spec, EngineAuditConfig(samples=300, test="tokens", report_samples=0))
    assert r.verdict == Verdict.PASS, r.summary()
    seen = r.cases[0].observed_tokens
    assert 300 <= seen < 300 * 6  # some samples ended early: their padding is not observed


class _IgnoresTopK(DirectEngine):
    """Samples from the untruncated law while its target_law applies top-k (a bug)."""

    def __init__(self, sampling: Sampling) -> None:
        super().__init__(TransformerLM(engine_target(), sampling.temperature))
        self._cut = sampling

    def generate(self, prompt_ids, max_new_tokens, seed):  # type: ignore[no-untyped-def]
        rng = np.random.default_rng(seed)
        out: list[int] = []
        for _ in range(max_new_tokens):  # the untruncated law: top-k forgotten when sampling
            p = np.asarray(self._law.law(tuple(prompt_ids) + tuple(out)))
            out.append(int(rng.choice(len(p), p=p)))
        return out

    def target_law(self, context, prompt_len=None):  # type: ignore[no-untyped-def]
        z = np.log(np.clip(np.asarray(super().target_law(context)), 1e-300, None))
        return self._cut.law(list(z))


def test_an_impossible_token_ends_the_audit_with_its_witness():
    spec = EngineSpec("topk", "user", "", _IgnoresTopK, 8, ((0, 6),), (Sampling(1.0, top_k=2),), tokens=6)
    r = audit_engine(spec, EngineAuditConfig(tv=0.05, test="tokens", report_samples=0))
    assert r.verdict == Verdict.LOSSY and r.samples < 50, r.summary()
    f = r.token_test["finding"]
    assert f["statistic"] == "impossible" and f["detail"]["position"] >= 1
    assert "of probability 0" in r.witness_text()


def test_the_token_reading_is_the_same_on_ray_workers_as_here():
    """The same samples in the same order: the token test's JSON does not depend on who drew."""
    pytest.importorskip("ray")
    from specproof.properties.shard.engine import RayDrawer

    spec = with_options(resolve_engine("reference.draft.token"), prompts=[(0, 6)], samplings=[T1])
    config = EngineAuditConfig(samples=120, test="tokens", report_samples=0)
    here = audit_engine(spec, config).token_test
    with RayDrawer.for_spec(spec, 2) as drawer:
        there = audit_engine(spec, config, drawer=drawer).token_test
    assert here == there


def test_block_indices_from_the_steps():
    assert block_indices((2, 1, 3), 5).tolist() == [0, 1, 0, 0, 1]
    assert block_indices(None, 3) is None and block_indices((1, 1), 3) is None  # steps short of M


@pytest.mark.parametrize(
    ("where", "how"),
    [("target_laws_along", "negative"), ("target_laws_along", "nan"), ("target_laws_along", "sum"),
     ("draft_laws_along", "negative")],
)  # fmt: skip
def test_laws_along_that_are_not_laws_are_a_contract_violation_naming_where(where, how):
    """Rows are checked as they are scored (never copied whole first): a negative entry in a row
    that sums to 1, a NaN, or a sum of 1.1 at position 5 of every sample is a contract violation
    naming the method and the context of that row."""
    from specproof.properties.engine.narrow import NarrowLM, NarrowSpeculative

    class Bad(NarrowSpeculative):
        def _spoil(self, rows):
            rows = np.array(rows)
            if how == "negative":  # the row still sums to 1
                rows[4, 1] += rows[4, 0] + 0.25
                rows[4, 0] = -0.25
            elif how == "nan":
                rows[4, 3] = np.nan
            else:
                rows[4] *= 1.1
            return rows

        def target_laws_along(self, prompt_ids, tokens):
            rows = super().target_laws_along(prompt_ids, tokens)
            return self._spoil(rows) if where == "target_laws_along" else rows

        def draft_laws_along(self, prompt_ids, tokens):
            rows = super().draft_laws_along(prompt_ids, tokens)
            return self._spoil(rows) if where == "draft_laws_along" else rows

    lm = NarrowLM(64)
    spec = EngineSpec(
        "bad", "user", "", lambda s: Bad(lm, lm.perturbed(0.3, 1)), 64, ((3, 1),), (T1,), tokens=8
    )
    res = audit_engine(spec, EngineAuditConfig(samples=8, looks=1, test="tokens", report_samples=0))
    assert res.verdict == Verdict.CONTRACT_VIOLATION, res.summary()
    assert res.violation["kind"] == where
    assert (
        f"{where}: the law after [3, 1, " in res.violation["detail"]
        and "is not a law" in res.violation["detail"]
    )


def _windowed(fault: bool):
    """tinylm's engine on a target with a sliding window of 16 whose ``target_law`` decodes the
    context one token at a time (the single-query kernel: the window kept) while the multi-query
    forward (the verify forward, and teacher forcing over the path) drops the window where
    ``fault``: the engine's samples and its teacher-forced laws share the fault."""
    import sys

    sys.path.insert(0, "docs/examples/engines")
    import tinylm

    class Windowed(tinylm.Speculative):
        capabilities = tinylm.Speculative.capabilities - {"prompt_len"}

        def _multi(self, tokens, cache):
            return self.target.forward(tokens, cache, window=None if fault else "own")

        def verify_forward(self, tokens, cache):
            return self._multi(tokens, cache)

        def target_laws_along(self, prompt_ids, tokens):
            seq = list(prompt_ids) + list(tokens)
            z = self._multi(seq[:-1] if tokens else seq, tinylm.Cache(self.target.width))
            return self.law_from_logits(z[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(tokens)])

        def target_law(self, context):
            cache = tinylm.Cache(self.target.width)
            for t in context:  # one token at a time: the decode path
                z = self.target.forward([t], cache)
            return self.law_from_logits(z[-1])

    target = tinylm.AttentionLM(512, seed=1, window=16)
    draft = target.draft_of(0.25, seed=2)
    name = "windowed" + (".fault" if fault else "")
    return EngineSpec(
        name, "user", "", lambda s: Windowed(target, draft), 512, ((3, 17, 5),), (T1,), tokens=64
    )


def test_a_multi_query_fault_shared_by_teacher_forcing_is_caught_at_the_prefix_alone():
    """The sliding window dropped by the multi-query kernel alone: the token test reads its laws by
    teacher forcing, which shares the fault, so only the check against target_law at one prefix
    (one sample in eight) sees it: contract_violation teacher_forcing_differs naming the context.
    The engine with the fault fixed passes, its two paths differing by rounding only."""
    plan = EngineAuditConfig(tv=0.05, seed=2, report_samples=0)
    bad = audit_engine(_windowed(True), plan)
    assert bad.verdict == Verdict.CONTRACT_VIOLATION, bad.summary()
    assert (
        bad.violation["kind"] == "teacher_forcing_differs"
        and "differs from target_law there" in bad.violation["detail"]
    )
    good = audit_engine(_windowed(False), plan)
    assert good.verdict == Verdict.PASS, good.summary()
    checked = good.token_test["teacher_forcing_checked"]
    assert checked["checked"] > 5 and checked["largest_tv"] < 1e-9, checked


def _ending(drops_eos_draft: bool):
    """The narrow engine with an end of sequence (id 0, its logit raised so that it carries a few
    percent of the mass); where ``drops_eos_draft``, the draft loop breaks on an end-of-sequence
    draft and drops it (as a loop that stops drafting at end of generation does) while the
    verifier keeps the draft's law: end-of-sequence mass moves at drafted positions."""
    from specproof.properties.engine.narrow import ending_spec

    return ending_spec(256, 64, drops_eos_draft=drops_eos_draft)


def test_end_of_sequence_mass_moved_inside_a_block_is_lossy_and_ended_samples_are_made_up():
    """An end-of-sequence draft dropped by the draft loop while the verifier keeps its law: the
    eos statistic (the indicator of the end against its probability) flags it. The exact engine
    passes, and its samples, which end early, are followed by more until each case has scored its
    planned tokens (the plan is in tokens)."""
    plan = EngineAuditConfig(tv=0.03, seed=4, report_samples=0)
    good = audit_engine(_ending(False), plan)
    assert good.verdict == Verdict.PASS, good.summary()
    (case,) = good.cases
    assert case.extended > 0 and case.n > case.planned, good.summary()
    assert case.observed_tokens >= good.token_test["planned_tokens_per_case"], good.summary()
    assert "eos" in {b["statistic"] for b in good.token_test["cases"]["0"]["bets"]}
    bad = audit_engine(_ending(True), plan)
    assert bad.verdict == Verdict.LOSSY, bad.summary()
    assert bad.token_test["finding"]["family"] == "eos", bad.token_test["finding"]


def test_a_drafter_whose_generator_is_rebuilt_every_step_is_lossy():
    """The drafter's random stream rebuilt from the request's seed at every step (the verifier's
    stream started from the same seed): every step's drafts reuse the same uniforms, and the first
    acceptance test reuses the one that drew the first draft. Each token's marginal law can look
    right while the transforms depend on the step before; the exact engine passes."""
    from dataclasses import replace

    from specproof.properties.engine.narrow import NarrowSpeculative, narrow_spec

    class Reseeded(NarrowSpeculative):
        def streams(self, seed):
            return np.random.default_rng(seed), np.random.default_rng(seed)

        def draft_stream(self, seed, stream, step):
            return np.random.default_rng(seed)  # bug: the generator rebuilt from the seed every step

    spec = narrow_spec(512, 64, temperatures=(1.0,))
    exact = spec.build(spec.samplings[0])
    plan = EngineAuditConfig(tv=0.05, seed=6, report_samples=0)
    bug = replace(spec, name="narrow.reseeded", build=lambda s: Reseeded(exact.target, exact.draft))
    res = audit_engine(bug, plan)
    assert res.verdict in (Verdict.LOSSY, Verdict.CONTRACT_VIOLATION), res.summary()
    assert audit_engine(spec, plan).verdict == Verdict.PASS


def test_samples_that_keep_ending_early_hit_the_cap_and_say_it():
    """An exact engine whose end of sequence carries nearly all the mass (its samples end at the
    first token): the plan is in tokens, so the case draws more samples, up to EXTEND times its
    planned count; there it stops short of its tokens and says so, never a pass."""
    from specproof.properties.engine.narrow import NarrowLM, NarrowSpeculative
    from specproof.properties.engine.planning import EXTEND

    class Ending(NarrowSpeculative):
        capabilities = NarrowSpeculative.capabilities | {"eos"}
        eos_id = 0

    target = NarrowLM(64)
    target.bias = target.bias.copy()
    target.bias[0] += 12.0
    draft = target.perturbed(0.2, seed=1)
    spec = EngineSpec(
        "ending.always", "user", "", lambda s: Ending(target, draft), 64, ((3, 1),), (T1,), tokens=64
    )
    res = audit_engine(spec, EngineAuditConfig(tv=0.05, seed=4, report_samples=0))
    (case,) = res.cases
    assert case.short_of_tokens and case.n >= EXTEND * case.planned, res.summary()
    assert case.observed_tokens < case.planned * 64
    assert res.verdict == Verdict.UNDERPOWERED, res.summary()
    assert "it hit the cap on more samples" in res.summary()


def test_the_ids_that_end_the_output_are_those_a_search_over_every_id_finds():
    """properties/engine/endings.py against the definition: at every position of random outputs
    over random texts and stop strings (spanning tokens, inside one token's text, overlapping),
    with and without an end of sequence, the ids it gives are exactly those ``x`` for which
    ``Sampling.end(out[:d] + [x])`` ends the output at ``x`` (seed 31, 300 settings)."""
    from specproof.properties.engine.endings import Endings

    rng = np.random.default_rng(31)
    letters = "abc"
    for _ in range(300):
        vocab = int(rng.integers(2, 12))
        texts = tuple("".join(rng.choice(list(letters), int(rng.integers(0, 4)))) for _ in range(vocab))
        stop = tuple({"".join(rng.choice(list(letters), int(rng.integers(1, 5)))) for _ in range(2)})
        eos = int(rng.integers(0, vocab)) if rng.random() < 0.3 else None
        s = Sampling(1.0, stop=stop, texts=texts, eos=eos)
        out = [int(x) for x in rng.integers(0, vocab, 12)]
        k = s.end(out)
        out = out[: (k - 1) if k else len(out)]  # up to (not including) the ending token
        found = Endings(s).after_output(out)
        for d in range(len(out)):
            want = [x for x in range(vocab) if s.end([*out[:d], x]) == d + 1]
            assert list(found[d]) == want, (texts, stop, eos, out[:d])


def test_a_stop_draft_dropped_by_the_draft_loop_is_lossy_by_the_stopping_event():
    """A draft loop that breaks on a draft completing the stop string "ab" (spanning two tokens)
    and drops it, the verifier keeping the draft's law: the stopping tokens' mass moves at drafted
    positions, and the eos statistic, which scores the output's end against the law's mass on
    every id that would end it, flags it. The exact engine passes with that statistic running."""
    from specproof.properties.engine.narrow import stopping_spec

    plan = EngineAuditConfig(tv=0.03, seed=4, report_samples=0)
    good = audit_engine(stopping_spec(256, 64), plan)
    assert good.verdict == Verdict.PASS, good.summary()
    assert "eos" in {b["statistic"] for b in good.token_test["cases"]["0"]["bets"]}
    bad = audit_engine(stopping_spec(256, 64, drops_stop_draft=True), plan)
    assert bad.verdict == Verdict.LOSSY, bad.summary()
    assert bad.token_test["finding"]["family"] == "eos", bad.token_test["finding"]
    assert "the output ended less often than the law says" in bad.summary()


@pytest.mark.parametrize(
    ("every", "verifier", "lead", "tokens"),
    [(2, False, "index.repeat[2]", 2667), (3, True, "index.repeat[3]", 7860)],
)
def test_randomness_repeated_every_few_steps_is_lossy_by_the_repeat_at_that_lag(
    every, verifier, lead, tokens
):
    """A generator rebuilt from the request's seed every few steps (the drafter's every 2, the
    verifier's every 3; the other stream apart, so no step reuses a uniform within itself): the
    index transform of a token and of the token at its index that many steps before move
    together, and the repeat at that lag flags it at the default plan (seed 6, alpha 1e-4)."""
    from specproof.properties.engine.narrow import reseeded_spec

    res = audit_engine(reseeded_spec(512, 64, every, verifier), EngineAuditConfig(seed=6, report_samples=0))
    assert res.verdict == Verdict.LOSSY, res.summary()
    found = res.token_test["finding"]
    assert found["statistic"] == lead and found["tokens"] == tokens, found
    assert found["direction"].startswith("a step repeating an earlier step"), found


@pytest.mark.slow
def test_only_the_repeat_at_a_lag_sees_randomness_repeated_every_two_steps(monkeypatch):
    """The drafter rebuilt every 2 steps passes the default plan where the index transform is
    compared with the step before only (every other statistic looks on: 214,080 tokens, seed 6);
    a generator rebuilt every 12 steps, past the largest lag (8), passes too: what the lags do not
    cover, as docs/token-audit.md says."""
    from specproof.properties.engine.narrow import reseeded_spec
    from specproof.properties.tokens import family

    plan = EngineAuditConfig(seed=6, report_samples=0)
    beyond = audit_engine(reseeded_spec(512, 64, 12), plan)
    assert beyond.verdict == Verdict.PASS, beyond.summary()
    monkeypatch.setattr(family, "LAGS", (1,))
    alone = audit_engine(reseeded_spec(512, 64, 2), plan)
    assert alone.verdict == Verdict.PASS, alone.summary()
    assert "index.repeat[2]" not in alone.token_test["trace"]["statistics"]
