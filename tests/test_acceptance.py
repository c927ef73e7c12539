"""The acceptance oracle (properties/engine/acceptance.py; proofs_notes/acceptance.md): the rule's
prediction, the shortfall test's alpha and power, the verdict ``acceptance_low`` for a loop that
keeps the law and loses acceptance, and what is skipped.

Every statistical check names its alpha and seed: the simulations use numpy's generator seeded 0
and compare counts with exact binomial bounds at 1e-6; the audits run at fixed seeds and sample
sizes, so each verdict is a fixed outcome.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from specproof.properties.engine import registry as E
from specproof.properties.engine.acceptance import ACCEPTANCE_ALPHA_SHARE, Acceptance, overlap, plan_lambda
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import EngineSpec, Sampling
from specproof.properties.engine.loops import CHAIN3, ReferenceEngine, engine_target
from specproof.properties.engine.signoff import signoff
from specproof.properties.verdicts import Verdict
from specproof.reference.proposers.draft_model import draft_model


def test_the_first_drafts_acceptance_rate_is_the_overlap_of_the_two_laws():
    """Claim 1 at the first draft of the first step: 10,000 seeds, within 4.5 standard errors."""
    target = engine_target()
    q = draft_model(target)
    engine = ReferenceEngine(target, q, "iid_chain", "token", CHAIN3, Sampling(1.0))
    prompt = (0, 6)
    n = 10_000
    accepted = 0
    for seed in range(n):
        engine.generate(list(prompt), 1, seed)
        accepted += engine.last_steps[0] >= 2
    alpha = overlap(engine.target_law(list(prompt)), q.law(prompt))
    assert abs(accepted / n - alpha) < 4.5 * math.sqrt(alpha * (1 - alpha) / n)


def _runs(runs: int, n: int, shortfall: float, alpha: float, seed: int = 0) -> int:
    """How many of ``runs`` simulated tests of ``n`` indicators cross: each indicator's mean is
    its prediction (uniform in [0.2, 0.9]) less ``shortfall``."""
    rng = np.random.default_rng(seed)
    crossed = 0
    lam = plan_lambda(alpha, n)
    for _ in range(runs):
        acc = Acceptance("token_chain", alpha, lam)
        means = rng.uniform(0.2, 0.9, n)
        hits = rng.random(n) < means - shortfall
        for m, h in zip(means, hits):
            acc.add(1, bool(h), float(m))
        crossed += acc.crossed_at is not None
    return crossed


def test_the_shortfall_test_keeps_its_alpha_on_bernoulli_indicators():
    """Claim 2: with indicators of exactly the predicted means, 2,000 runs at alpha 0.05 cross
    at most as often as a binomial(2000, 0.05) count allows at 1e-6."""
    runs, alpha = 2000, 0.05
    crossed = _runs(runs, 500, 0.0, alpha)
    assert crossed <= stats.binom.ppf(1 - 1e-6, runs, alpha), crossed


def test_a_shortfall_of_the_detectable_size_is_found():
    """At 1.5 times the shortfall the test states it detects at 2,000 indicators (alpha 1e-3), at
    least 90 % of 200 runs cross."""
    alpha, n = 1e-3, 2000
    acc = Acceptance("token_chain", alpha, plan_lambda(alpha, n))
    acc.indicators = n
    crossed = _runs(200, n, 1.5 * acc.detects(), alpha)
    assert crossed >= 180, crossed


def test_a_stale_draft_cache_keeps_the_law_and_is_acceptance_low():
    """Claim 3: the law tests pass the stale loop, the acceptance test does not (seed 0)."""
    res = audit_engine(E.resolve_engine("mutant.stale_draft_kv"), EngineAuditConfig(samples=200, seed=0))
    assert res.verdict == Verdict.ACCEPTANCE_LOW and res.verdict.exit_code == 7, res.summary()
    assert not any(c.rejected for c in res.cases) and not res.token_rejected, res.summary()
    acc = res.acceptance
    assert acc is not None and acc.status == "low" and acc.accepted < acc.predicted - 100
    assert "acceptance (token_chain)" in res.summary() and "LOW" in res.summary()
    (item,) = [i for i in signoff(res) if i.question == "acceptance as the rule predicts"]
    assert item.answer == "no"
    js = res.to_json()["acceptance"]
    assert js["status"] == "low" and [p["position"] for p in js["by_position"]] == [1, 2, 3]


def test_the_correct_loop_accepts_as_predicted():
    res = audit_engine(E.resolve_engine("alternative.fresh_draft_kv"), EngineAuditConfig(samples=200, seed=0))
    assert res.verdict == Verdict.PASS, res.summary()
    acc = res.acceptance
    assert acc is not None and acc.status == "as_predicted" and acc.indicators > 2000
    assert abs(acc.accepted - acc.predicted) < 4.5 * math.sqrt(acc.indicators / 4)
    (item,) = [i for i in signoff(res) if i.question == "acceptance as the rule predicts"]
    assert item.answer == "yes" and "as predicted" in item.detail


def test_the_alpha_is_shared_with_the_law_tests():
    config = EngineAuditConfig(samples=20, seed=0)
    res = audit_engine(E.resolve_engine("alternative.fresh_draft_kv"), config)
    assert res.acceptance is not None and res.acceptance.alpha == config.alpha * ACCEPTANCE_ALPHA_SHARE
    main = config.alpha * (1 - ACCEPTANCE_ALPHA_SHARE)
    assert f"alpha {main / 2:g}" in res.plan_text, res.plan_text  # the token test's and the cells'
    plain = audit_engine(E.resolve_engine("reference.draft.token"), config)
    assert plain.acceptance is None and f"alpha {config.alpha / 2:g}" in plain.plan_text
    (item,) = [i for i in signoff(plain) if i.question == "acceptance as the rule predicts"]
    assert item.answer == "not tested" and "declares no acceptance rule" in item.detail


def test_cases_whose_samples_may_end_early_are_skipped_and_said():
    spec = E.with_options(E.resolve_engine("alternative.fresh_draft_kv"), samplings=[Sampling(1.0, eos=7)])
    res = audit_engine(spec, EngineAuditConfig(samples=20, seed=0))
    acc = res.acceptance
    assert acc is not None and acc.status == "not_run" and "end early" in acc.why, res.summary()
    assert "acceptance: NOT TESTED" in res.summary()


@pytest.mark.parametrize(
    "rule, kind",
    [({"rule": "tree", "drafts": 3}, "capabilities"), ({"rule": "token_chain", "drafts": 0}, "capabilities")],
)
def test_a_malformed_declaration_is_a_contract_violation(rule, kind):
    def build(s: Sampling):
        engine = ReferenceEngine(
            engine_target(), draft_model(engine_target()), "iid_chain", "token", CHAIN3, s
        )
        engine.acceptance_rule = rule
        return engine

    spec = EngineSpec("declares", "user", "", build, 8, ((0, 6),), (Sampling(1.0),))
    res = audit_engine(spec, EngineAuditConfig(samples=10))
    assert res.verdict == Verdict.CONTRACT_VIOLATION and res.violation["kind"] == kind, res.summary()
    assert "acceptance_rule" in res.violation["detail"]


class _GreedyChain:
    """Sample-and-compare on the draft model's argmax chain, as llama-server's draft model does:
    a first token alone, then steps of ``min(3, M - pos - 1)`` greedy drafts, each kept while the
    target's own sample equals it. ``lie`` reports one accepted draft more than it kept."""

    vocab = 8

    def __init__(self, sampling: Sampling, lie: bool = False) -> None:
        self.target = ReferenceEngine(
            engine_target(), draft_model(engine_target()), "iid_chain", "token", CHAIN3, sampling
        )
        self.q = draft_model(engine_target())
        self.lie = lie
        self.acceptance_rule = {"rule": "greedy_chain", "drafts": 3, "first": 1, "leave": 1}
        self.last_counters: dict[str, int] = {}

    def draft_law(self, context):  # type: ignore[no-untyped-def]
        return self.q.law(tuple(int(x) for x in context))

    def target_law(self, context, prompt_len=None):  # type: ignore[no-untyped-def]
        return self.target.target_law(context)

    def _draw(self, context, rng):  # type: ignore[no-untyped-def]
        cdf = np.cumsum(self.target_law(list(context)))
        return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), self.vocab - 1))

    def generate(self, prompt_ids, max_new_tokens, seed):  # type: ignore[no-untyped-def]
        rng = np.random.default_rng(seed)
        out = [self._draw(prompt_ids, rng)]
        drafted = accepted = 0
        while len(out) < max_new_tokens:
            k = min(3, max_new_tokens - len(out) - 1)
            if k <= 0:
                out.append(self._draw(list(prompt_ids) + out, rng))
                continue
            chain: list[int] = []
            for _ in range(k):
                chain.append(int(np.argmax(self.draft_law(list(prompt_ids) + out + chain))))
            drafted += k
            for d in chain:
                y = self._draw(list(prompt_ids) + out, rng)
                out.append(y)
                if y != d:
                    break
                accepted += 1
            else:
                out.append(self._draw(list(prompt_ids) + out, rng))
        self.last_counters = {"drafted": drafted, "accepted": accepted + int(self.lie)}
        return out[:max_new_tokens]


def test_greedy_chains_are_read_from_the_tokens_and_accept_as_predicted():
    spec = EngineSpec("greedy", "user", "", _GreedyChain, 8, ((0, 6),), (Sampling(1.0),), tokens=6)
    res = audit_engine(spec, EngineAuditConfig(samples=300, seed=0))
    acc = res.acceptance
    assert res.verdict == Verdict.PASS, res.summary()
    assert acc is not None and acc.rule == "greedy_chain" and acc.status == "as_predicted"
    assert acc.contradicted == 0 and acc.indicators > 300, res.summary()


def test_counters_that_contradict_the_tokens_are_said():
    def lying(s: Sampling) -> _GreedyChain:
        return _GreedyChain(s, lie=True)

    spec = EngineSpec("lying", "user", "", lying, 8, ((0, 6),), (Sampling(1.0),), tokens=6)
    res = audit_engine(spec, EngineAuditConfig(samples=100, seed=0))
    acc = res.acceptance
    assert acc is not None and acc.contradicted == res.samples, res.summary()
    assert "COUNTERS CONTRADICT THE TOKENS" in res.summary()
    assert res.verdict == Verdict.MISREPORTED, res.summary()  # the law holds; its counters lie
    (item,) = [i for i in signoff(res) if i.question == "acceptance as the rule predicts"]
    assert item.answer == "no"
