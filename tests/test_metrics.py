"""The server's own speculation metrics against its answers' counters (properties/engine/metrics.py):
equal growth over the sample stage, exactly, or ``misreported``; said "not checked", with why,
wherever the equality cannot be required. The planted ``averaged_metric`` (a mean of per-request
ratios where a ratio of sums is meant) is flagged; the correct stand-in agrees."""

from __future__ import annotations

from typing import Any

import pytest

from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.families.base import AnswerError, prometheus_totals
from specproof.properties.endpoint.families.llamacpp import LlamaCpp
from specproof.properties.endpoint.families.vllm import VLLM
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.standin import InProcess, StandIn
from specproof.properties.engine.audit import audit_engine
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.contract import T1
from specproof.properties.engine.metrics import Tally, metrics_check
from specproof.properties.engine.signoff import signoff
from specproof.properties.verdicts import Verdict

CONFIG = EngineAuditConfig(alpha=1e-3, samples=200, seed=1, report_samples=16)


def _audit(
    si: StandIn, loads: tuple[int, ...] = (), config: EngineAuditConfig = CONFIG, profile: str = "llamacpp"
) -> Any:
    with si, StandIn(speculative=False, loop="laws", listen=False) as twin:
        ways = {si.url: InProcess(si), twin.url: InProcess(twin)}
        options = EndpointOptions((si.url,), profile, twin=twin.url, vocab=8, concurrency=4, loads=loads)
        ep = Endpoint(options, transports=ways)
        try:
            return audit_engine(endpoint_spec(ep, prompts=[(0, 6)], samplings=[T1], tokens=4), config)
        finally:
            ep.close()


def _acceptance_item(r: Any) -> Any:
    return next(i for i in signoff(r) if i.question.startswith("acceptance"))


def test_the_correct_stand_in_agrees_with_its_metrics():
    si = StandIn(loop="laws", listen=False)
    r = _audit(si)
    assert r.verdict == Verdict.PASS, r.summary()
    m = r.metrics
    assert m.status == "agree" and m.tally.answers == m.tally.counted == 200, r.summary()
    # the growth is the answers' sum, and the stand-in's own totals (law requests draft nothing)
    assert m.grew == {"drafted": r.speculation.drafted, "accepted": r.speculation.accepted}
    # read from the server: the contract stage's requests came before, the checks' after
    assert m.before is not None and m.after is not None and 0 < m.before["drafted"] < m.after["drafted"]
    assert m.after["drafted"] < si.drafted_total and m.after["retried"] == 0
    assert "server metrics: agree" in r.summary() and "server metrics: agree" in _acceptance_item(r).detail
    assert r.to_json()["metrics"]["status"] == "agree"


@pytest.mark.parametrize("profile", ["llamacpp", "vllm"])
def test_an_averaged_acceptance_metric_is_misreported(profile):
    r = _audit(StandIn("averaged_metric", loop="laws", listen=False), profile=profile)
    assert r.verdict == Verdict.MISREPORTED, r.summary()
    assert r.reports.status == "consistent" and not any(c.rejected for c in r.cases)  # the answers are right
    m = r.metrics
    assert m.status == "differ" and m.grew["drafted"] == m.tally.drafted
    # a mean of the requests' shares over-weights the requests that drafted little: it reads high here
    assert m.grew["accepted"] > m.tally.accepted, r.summary()
    assert "MISREPORT" in r.summary()
    item = _acceptance_item(r)
    assert item.answer == "no" and "grew by" in item.detail


def test_the_load_axis_is_not_checked_and_says_why():
    r = _audit(
        StandIn(loop="laws", listen=False),
        loads=(1, 3),
        config=EngineAuditConfig(alpha=1e-3, samples=60, seed=1, report_samples=4),
    )
    assert r.metrics.status == "not_checked" and "background" in r.metrics.why, r.summary()
    assert "server metrics: NOT CHECKED" in r.summary()


class _NoMetrics(StandIn):
    def respond(self, method: str, path: str, raw: bytes) -> tuple[int, Any]:
        if path == "/metrics":
            return 404, {"error": {"code": 404, "message": "metrics are off (--metrics)"}}
        return super().respond(method, path, raw)


def test_a_server_without_a_metrics_page_is_said_not_offered():
    r = _audit(
        _NoMetrics(loop="laws", listen=False),
        config=EngineAuditConfig(alpha=1e-3, samples=40, seed=1, report_samples=4),
    )
    assert r.verdict == Verdict.PASS, r.summary()
    assert r.metrics.status == "not_offered" and "--metrics" in r.metrics.why
    assert "server metrics: not offered" in r.summary()


def _tally(*counters: tuple[int | None, int | None]) -> Tally:
    t = Tally()
    for d, a in counters:
        t.add(d, a)
    return t


def test_metrics_check_requires_equal_growth_and_names_what_it_cannot_check():
    before = {"drafted": 10, "accepted": 4, "retried": 0}
    assert (
        metrics_check(before, {"drafted": 16, "accepted": 6, "retried": 0}, _tally((6, 2))).status == "agree"
    )
    assert (
        metrics_check(before, {"drafted": 16, "accepted": 7, "retried": 0}, _tally((6, 2))).status == "differ"
    )
    # more drafted than the answers said (other traffic, or a counter bumped twice): also a difference
    assert (
        metrics_check(before, {"drafted": 17, "accepted": 6, "retried": 0}, _tally((6, 2))).status == "differ"
    )
    retried = metrics_check(before, {"drafted": 16, "accepted": 6, "retried": 1}, _tally((6, 2)))
    assert retried.status == "not_checked" and "sent again" in retried.why
    silent = metrics_check(before, {"drafted": 16, "accepted": 6, "retried": 0}, _tally((6, 2), (None, None)))
    assert silent.status == "not_checked" and "1 of 2 answers carried no counters" in silent.why
    lacking = metrics_check({"drafted": 1}, {"drafted": 2, "accepted": 0, "retried": 0}, _tally())
    assert lacking.status == "not_checked" and "accepted" in lacking.why
    assert metrics_check(None, before, _tally()).status == "not_offered"
    assert metrics_check(before, before, _tally(), "a fault").why == "a fault"


def test_prometheus_totals_sum_label_sets_and_refuse_a_value_that_is_no_number():
    page = (
        "# HELP a_total x\n# TYPE a_total counter\na_total 5\n"
        'b_total{position="0"} 3\nb_total{position="1",model="a b"} 2 1700000000\nbb_total 9\n'
    )
    assert prometheus_totals(page, ("a_total", "b_total", "c_total")) == {
        "a_total": 5.0,
        "b_total": 5.0,
        "c_total": None,
    }
    with pytest.raises(AnswerError, match="a_total"):
        prometheus_totals("a_total many\n", ("a_total",))
    # llama-server's names; a page without them is no metrics at all
    assert LlamaCpp().read_metrics("llamacpp:spec_decode_num_draft_tokens_total 7\n") == {
        "drafted": 7,
        "accepted": 0,
    }
    assert LlamaCpp().read_metrics("llamacpp:prompt_tokens_total 7\n") is None
    # vLLM's: floats, summed over engines
    page = (
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 28.0\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 2.0\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 9.0\n'
        'vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="m"} 1.79e9\n'
    )
    assert VLLM().read_metrics(page) == {"drafted": 30, "accepted": 9}
