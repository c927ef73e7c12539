"""Streaming (properties/engine/checks.py, Streaming): the same seeds asked streamed and whole
must give the same tokens, text, reported probabilities and counters; the stand-in's stream
that keeps only each step's last token is a contract violation naming the seed."""

from __future__ import annotations

from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.standin import InProcess, StandIn
from specproof.properties.engine.audit import audit_engine
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.contract import T1
from specproof.properties.verdicts import Verdict

#: alpha 1e-3, seed 3, 100 samples a case, 16 seeds streamed
CONFIG = EngineAuditConfig(alpha=1e-3, samples=100, seed=3, report_samples=16)


def _audit(bug: str | None, profile: str = "llamacpp"):
    with (
        StandIn(bug, loop="laws", listen=False) as si,
        StandIn(speculative=False, loop="laws", listen=False) as tw,
    ):
        ways = {si.url: InProcess(si), tw.url: InProcess(tw)}
        options = EndpointOptions((si.url,), profile, twin=tw.url, vocab=8, concurrency=4)
        ep = Endpoint(options, transports=ways)
        try:
            return audit_engine(endpoint_spec(ep, prompts=[(0, 6)], samplings=[T1], tokens=4), CONFIG)
        finally:
            ep.close()


def test_a_correct_server_streams_what_it_answers_whole():
    res = _audit(None)
    assert res.verdict == Verdict.PASS, res.summary()
    s = res.streaming
    assert (s.status, s.samples, s.differing) == ("equal", 16, 0)
    assert s.reports.status == "consistent" and s.reports.checked == 64
    assert "streaming: 16 seeds streamed and whole: equal" in res.summary()


def test_a_stream_that_keeps_each_steps_last_token_is_a_contract_violation():
    res = _audit("stream_step_tail")
    assert res.verdict == Verdict.CONTRACT_VIOLATION, res.summary()
    v = res.violation or {}
    assert v["kind"] == "stream_differs" and v["stage"] == "checks"
    f = res.streaming.first or {}
    assert f["hard"] and len(f["streamed"]) < len(f["whole"]) == 4  # the drafted tokens are gone
    assert set(f["streamed"]) <= set(f["whole"])
    assert not any(c.rejected for c in res.cases)  # the law of the whole answers holds
    assert "tokens" in v["detail"] and str(f["seed"]) in v["detail"]


def test_a_family_that_does_not_stream_is_said_not_checked():
    res = _audit(None, profile="sglang")
    assert res.streaming.status == "not_offered" and res.verdict == Verdict.PASS, res.summary()
    assert res.to_json()["streaming"]["status"] == "not_offered"
