"""The completions axis (properties/engine/completions.py): every case with one completion a
request and with n; the exact sign test of a request's completions' independence; the stand-in's
shared generator and forked draft rows flagged on the axis, the correct stand-in and llama-server
(tests/test_endpoint_llamacpp.py) passing on it."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import pytest

from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.standin import InProcess, StandIn
from specproof.properties.engine.audit import audit_engine
from specproof.properties.engine.completions import (
    MAX_COMPLETIONS,
    check_completions,
    independence_test,
    requests_of,
    sign_test,
)
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.contract import T1, EngineSpec
from specproof.properties.engine.loops import direct_engine
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError

CONFIG = EngineAuditConfig(alpha=1e-3, samples=202, seed=1, report_samples=8)


def _audit(bug: str | None, profile: str = "llamacpp", completions: int = 4, vocab: int | None = None):
    with (
        StandIn(bug, loop="laws", listen=False) as si,
        StandIn(speculative=False, loop="laws", listen=False) as twin,
    ):
        ways = {si.url: InProcess(si), twin.url: InProcess(twin)}
        options = EndpointOptions(
            (si.url,), profile, twin=twin.url, vocab=vocab, concurrency=4, completions=completions
        )
        ep = Endpoint(options, transports=ways)
        try:
            return audit_engine(endpoint_spec(ep, prompts=[(0, 6)], samplings=[T1], tokens=4), CONFIG), si
        finally:
            ep.close()


def test_the_correct_stand_in_passes_with_one_and_with_four_completions_a_request():
    r, si = _audit(None)
    assert r.verdict == Verdict.PASS, r.summary()
    names = [c.case.name for c in r.cases]
    assert names == [
        "T=1 after [0 6] with one completion a request",
        "T=1 after [0 6] with 4 completions a request",
    ]
    # 202 samples asked: the 4-completion case rounds up to whole requests (204), the other does not
    assert [c.n for c in r.cases] == [202, 204]
    assert r.completions is not None and len(r.completions.tests) == 1
    t = r.completions.tests[0]
    assert not t.rejected and t.requests == 51 and t.pairs == 25
    assert t.alpha == pytest.approx(1e-3 / 4)
    assert r.factor == "" and "completions: 1 and 4 a request" in r.summary()
    item = next(i for i in r.to_json()["signoff"] if i["question"].startswith("several completions"))
    assert item["answer"] == "yes" and "independent" in item["detail"], item
    js = r.to_json()
    assert js["completions"]["tests"][0]["pairs"] == 25 and js["cases"][1]["case"]["completions"] == 4
    # the control ran on one completion a request only (a seed's completions are the server's to seed)
    assert r.control is not None and r.control.coupled == 8


def test_a_shared_generator_is_lossy_only_with_several_completions():
    r, _ = _audit("shared_choices")
    assert r.verdict == Verdict.LOSSY, r.summary()
    assert not any(c.rejected for c in r.cases)  # each completion alone is a sample of the law
    assert r.factor.startswith("lossy only with 4 completions a request: its completions are not independent")
    t = r.completions.tests[0]
    assert t.rejected and t.across == 0 and t.within >= 10, r.summary()  # the serial statistic stops it early
    assert t.first is not None and len({tuple(c) for c in t.first["completions"]}) == 1
    assert "NOT INDEPENDENT" in r.summary()
    law = next(i for i in r.to_json()["signoff"] if i["question"].startswith("the law holds"))
    assert law["answer"] == "no" and "NOT INDEPENDENT" in law["detail"]
    item = next(i for i in r.to_json()["signoff"] if i["question"].startswith("several completions"))
    assert item["answer"] == "no" and "not independent" in item["detail"]


def test_the_vllm_profile_asks_for_n_and_reads_its_choices():
    """vLLM's shape: ``n`` completions as choices, no per-request metrics for the parent (so the
    server's metrics cannot be checked against them: said)."""
    r, si = _audit(None, profile="vllm", vocab=8)
    assert r.verdict == Verdict.PASS, r.summary()
    (t,) = r.completions.tests
    assert not t.rejected and t.pairs == 25
    assert r.cases[1].speculation.status == "unobservable"  # vLLM gives no metrics for a parent
    assert r.metrics.status == "not_checked" and "carried no counters" in r.metrics.why


def test_a_profile_without_completions_is_refused_naming_the_option():
    with pytest.raises(UsageError, match="completions: .* offers no at_completions"):
        _audit(None, profile="sglang", vocab=8)


def test_an_engine_without_at_completions_is_refused():
    spec = EngineSpec("direct", "user", "", direct_engine, 8, ((0, 6),), (T1,),
                      completions=2)  # fmt: skip
    with pytest.raises(UsageError, match="completions"):
        audit_engine(spec, EngineAuditConfig(samples=8))


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, MAX_COMPLETIONS + 1])
def test_completions_out_of_range_are_refused(bad):
    with pytest.raises(UsageError, match="completions: a number"):
        check_completions(bad)
    with pytest.raises(UsageError, match="completions"):
        EndpointOptions(("http://127.0.0.1:1",), completions=bad)


def test_completions_beside_another_axis_are_refused():
    with pytest.raises(UsageError, match="two audits"):
        EndpointOptions(("http://127.0.0.1:1",), completions=2, loads=(1, 2))
    with pytest.raises(UsageError, match="two audits"):
        EndpointOptions(("http://127.0.0.1:1",), completions=2, prefix_cache=True)
    assert check_completions(1, other_axis=True) == 1  # one a request is no axis


def test_sign_test_is_the_exact_binomial_tail():
    assert sign_test(0, 7) == 1.0
    assert sign_test(3, 0) == 1 / 8
    assert sign_test(5, 5) == float(Fraction(sum(comb(10, k) for k in range(5, 11)), 2**10))
    assert sign_test(2000, 0) == 0.0 or sign_test(2000, 0) < 1e-300  # no overflow at large counts
    assert 0 < sign_test(600, 500) < 0.01


def test_requests_are_grouped_at_choice_zero_and_compared_in_disjoint_pairs():
    a, b = (1,), (2,)
    gens = [(0, a), (1, a), (0, a), (1, b), (0, b), (1, b), (0, a), (1, b), (0, b)]
    assert requests_of(gens) == [[a, a], [a, b], [b, b], [a, b], [b]]
    t = independence_test(gens, 0.05, "case", 2)
    # pairs ([a,a],[a,b]): D = 1 - 0 > 0; ([b,b],[a,b]): D = 1 - 1 = 0; the lone last request unpaired
    assert (t.requests, t.pairs, t.within, t.across) == (4, 2, 1, 0)
    assert t.pvalue == 0.5 and not t.rejected and t.first == {"completions": [[1], [1]]}
