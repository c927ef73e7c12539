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


def test_a_server_that_does_not_stream_is_not_offered_streaming_never_a_violation():
    """A llama-server look-alike answering `stream: true` in one piece (no event stream): a correct
    one passes, its streaming check reads "not offered" with why, and the sign-off says not
    tested; a server that streams and drops tokens is still a contract violation."""
    from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
    from specproof.properties.endpoint.options import EndpointOptions
    from specproof.properties.endpoint.standin import StandIn
    from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
    from specproof.properties.engine.contract import T1
    from specproof.properties.verdicts import Verdict

    plan = EngineAuditConfig(alpha=1e-3, samples=60, seed=1, report_samples=8)
    with StandIn(streams=False) as server, StandIn(speculative=False) as twin:
        with Endpoint(EndpointOptions((server.url,), "llamacpp", twin=twin.url)) as ep:
            r = audit_engine(endpoint_spec(ep, prompts=[(0, 6)], samplings=[T1], tokens=8), plan)
    assert r.verdict == Verdict.PASS, r.summary()
    assert r.streaming.status == "not_offered" and "not an event stream" in r.streaming.why
    assert "streaming: not offered: " in r.summary()
    item = next(i for i in r.to_json()["signoff"] if "streamed" in i["question"])
    assert item["answer"] == "not tested", item
    with StandIn(bug="stream_step_tail") as server, StandIn(speculative=False) as twin:
        with Endpoint(EndpointOptions((server.url,), "llamacpp", twin=twin.url)) as ep:
            r = audit_engine(endpoint_spec(ep, prompts=[(0, 6)], samplings=[T1], tokens=8), plan)
    assert r.verdict == Verdict.CONTRACT_VIOLATION and r.violation["kind"] == "stream_differs", r.summary()
