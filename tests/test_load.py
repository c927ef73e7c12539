"""The load axis (properties/engine/load.py): every case alone and with N requests in flight,
seed use per level, the background requests' own tokens tested; the stand-in's batch-coupled bugs
flagged on the level they live on, the correct stand-in passing on every level."""

from __future__ import annotations

import pytest

from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.standin import InProcess, StandIn
from specproof.properties.endpoint.standin_bugs import BUGS
from specproof.properties.engine.audit import audit_engine
from specproof.properties.engine.axes import only_at
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.contract import T1, EngineSpec
from specproof.properties.engine.load import check_loads
from specproof.properties.engine.loops import direct_engine
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError

PROMPT = (0, 6)
#: alpha 1e-3, seed 1, 200 samples a case: the planted bugs' tests
CONFIG = EngineAuditConfig(alpha=1e-3, samples=200, seed=1, report_samples=16)


def _audit(
    bug: str | None,
    loads: tuple[int, ...] = (1, 8),
    config: EngineAuditConfig = CONFIG,
    adapters: int = 0,
    adapter: tuple[tuple[int, float], ...] = (),
):
    """The endpoint audit of a listening stand-in (sockets: N connections put N requests in
    flight) against a correct twin, at ``loads``; ``adapters``: LoRA adapters both hold;
    ``adapter``: the scales the audit's requests ask (``--adapter``)."""
    with (
        StandIn(bug, loop="laws", adapters=adapters) as si,
        StandIn(speculative=False, loop="laws", adapters=adapters) as twin,
    ):
        ep = Endpoint(EndpointOptions((si.url,), twin=twin.url, concurrency=4, loads=loads, adapter=adapter))
        try:
            spec = endpoint_spec(ep, prompts=[PROMPT], samplings=[T1], tokens=4)
            return audit_engine(spec, config), si.most_in_flight
        finally:
            ep.close()


def test_the_correct_stand_in_passes_at_every_level():
    res, most = _audit(None)
    assert res.verdict == Verdict.PASS, res.summary()
    assert [r.case.name for r in res.cases] == ["T=1 after [0 6] alone", "T=1 after [0 6] with 8 in flight"]
    assert [r.n for r in res.cases] == [200, 200]
    assert most >= 8  # the level was reached: 8 requests open at once
    load = res.load
    assert load is not None and [s.level for s in load.seeds] == [1, 8]
    assert all(s.seeds == 16 and s.differing == 0 for s in load.seeds)
    bg = load.background
    assert bg is not None and bg["verdict"] in ("pass", "underpowered") and bg["records"] >= 200
    assert bg["alpha"] == pytest.approx(1e-3 / 4)
    assert res.factor == ""
    text = res.summary()
    assert "load: levels 1, 8" in text and "seed use with 8 in flight: 16 seeds drawn twice" in text
    assert res.to_json()["load"]["levels"] == [1, 8]
    # acceptance across the levels: the same within the bound (alpha a quarter of the audit's)
    axis = res.axis_acceptance
    assert axis is not None and axis.status == "same" and axis.alpha == pytest.approx(1e-3 / 4)
    assert len(axis.pairs) == 1 and axis.pairs[0]["where"] == "with 8 in flight"


def test_rows_from_another_request_are_lossy_only_with_8_in_flight():
    res, _ = _audit("batch_rows")
    assert res.verdict == Verdict.LOSSY, res.summary()
    alone, loaded = res.cases
    # alone the verifier is exact; the look the audit stops at depends on the batches the server
    # made under load (the rows it poisons), so the samples drawn alone are the loaded case's
    assert not alone.rejected and alone.n == loaded.n >= 100
    assert loaded.rejected or loaded.token_finding
    assert res.factor == "lossy only with 8 in flight (the same prompt and setting held alone)"
    assert res.factor in res.summary() and "with 8 in flight" in res.witness_text()


def test_a_seed_ignored_while_others_are_in_flight_is_a_contract_violation_under_load():
    res, _ = _audit("seed_in_flight")
    assert res.verdict == Verdict.CONTRACT_VIOLATION, res.summary()
    v = res.violation or {}
    assert v["kind"] == "nondeterministic_under_load" and v["stage"] == "checks"
    assert v["case"] == "T=1 after [0 6] with 8 in flight"
    alone, loaded = res.load.seeds  # type: ignore[union-attr]
    assert alone.differing == 0 and loaded.differing > 0
    assert all(not r.rejected for r in res.cases)  # the law holds at both levels
    assert "law" not in res.factor and "a seed gave two outputs" in res.summary()
    # the sign-off's concurrency item: the law held, and it says what a request returns still depends on
    from specproof.properties.engine.signoff import signoff

    items = {i.question: i for i in signoff(res)}
    same = items["the same law alone and at production concurrency"]
    assert same.answer == "yes" and "depends on the batch" in same.detail, same
    assert items["seeds are honoured with other requests in flight"].answer == "no"


def test_background_requests_mix_lora_adapters_and_the_correct_server_passes():
    """A server holding a LoRA adapter: every other background request on average asks it at
    another scale than the audit's requests run at (its own, 1: so 0), so batches mix adapters;
    the correct stand-in keeps each request's own law at both levels, the background requests'
    tokens scored against their own adapter's laws (read from the twin with the same request)."""
    res, most = _audit(None, adapters=1)
    assert res.verdict == Verdict.PASS, res.summary()
    assert most >= 8
    bg = res.load.background  # type: ignore[union-attr]
    assert bg is not None and bg["verdict"] in ("pass", "underpowered"), res.summary()
    assert bg["with_adapters"] > 0.3 * bg["records"], bg
    assert "asked a LoRA adapter" in res.summary()


def test_an_adapter_taken_from_the_batch_is_lossy_only_with_8_in_flight():
    """adapter_of_batch (vllm PR#21068's class): a request runs with another in-flight request's
    adapter. Alone, exact; with 8 in flight beside background requests asking other adapter
    scales, the audit's requests run at the wrong scale: lossy, named on the level."""
    assert BUGS["adapter_of_batch"].expect == Verdict.PASS  # without the load axis: nothing mixes
    res, _ = _audit("adapter_of_batch", adapters=1)
    assert res.verdict == Verdict.LOSSY, res.summary()
    alone, loaded = res.cases
    assert not alone.rejected and not alone.token_finding  # alone, exact (until the audit stopped)
    assert loaded.rejected or loaded.token_finding
    assert res.factor == "lossy only with 8 in flight (the same prompt and setting held alone)"


def test_the_audits_requests_under_an_adapter_read_the_adapted_law_and_pass():
    """--adapter 0=0.5: every audited request asks adapter 0 at scale 0.5 and its law is read
    from the twin with the same request, and the correct stand-in passes; the planted
    verify_server_scale (drafts verified at the server's own scale, 1) is exact for requests
    naming no adapter and lossy once they ask scale 0 (--adapter 0=0). With 8 in flight the
    background requests ask the other scale (0) or name none (the server's own, 1), each scored
    under what it asked, and the correct stand-in passes at both levels."""
    res, _ = _audit(None, loads=(), adapter=((0, 0.5),), adapters=1)
    assert res.verdict == Verdict.PASS, res.summary()
    assert res.description["adapter"] == [{"id": 0, "scale": 0.5}]
    assert "every request asks LoRA adapter 0 at 0.5" in res.to_json()["doc"]
    assert BUGS["verify_server_scale"].expect == Verdict.PASS  # no request asks its own scale
    res, _ = _audit("verify_server_scale", loads=(), adapters=1)
    assert res.verdict == Verdict.PASS, res.summary()
    res, _ = _audit("verify_server_scale", loads=(), adapter=((0, 0.0),), adapters=1)
    assert res.verdict == Verdict.LOSSY, res.summary()
    res, _ = _audit(None, adapter=((0, 0.5),), adapters=1)
    assert res.verdict == Verdict.PASS, res.summary()
    bg = res.load.background  # type: ignore[union-attr]
    assert bg is not None and bg["verdict"] in ("pass", "underpowered"), res.summary()
    assert 0 < bg["with_adapters"] < bg["records"], bg


def test_an_adapter_the_server_does_not_hold_is_refused_before_sampling():
    with StandIn(loop="laws", adapters=1, listen=False) as si, StandIn(loop="laws", listen=False) as bare:
        ways = {si.url: InProcess(si), bare.url: InProcess(bare)}
        for url, held in ((si.url, r"\[0\]"), (bare.url, "none")):
            ep = Endpoint(EndpointOptions((url,), adapter=((1, 0.5),)), transports=ways)
            try:
                held_text = rf"--adapter: .* holds no LoRA adapter 1 \(it holds {held}\)"
                with pytest.raises(UsageError, match=held_text):
                    ep.open()
            finally:
                ep.close()
        ep = Endpoint(EndpointOptions((si.url,), "vllm", adapter=((0, 0.5),), vocab=8), transports=ways)
        try:
            with pytest.raises(UsageError, match="profile vllm does not send LoRA adapters"):
                ep.open()
        finally:
            ep.close()


@pytest.mark.parametrize(
    ("adapter", "match"),
    [
        (((-1, 0.5),), "an adapter id is an integer >= 0"),
        (((0, float("nan")),), "adapter 0's scale must be a finite number"),
        (((0, 0.5), (0, 1.0)), "adapter 0 given twice"),
        ((0, 0.5), "expected \\(id, scale\\) pairs"),
        ("0=0.5", "expected \\(id, scale\\) pairs"),
    ],
)
def test_adapter_scales_are_checked(adapter, match):
    with pytest.raises(UsageError, match=f"adapter: {match}"):
        EndpointOptions(("http://127.0.0.1:1",), adapter=adapter)


@pytest.mark.parametrize("text", ["0", "a=1", "0=x", "=1"])
def test_adapter_text_is_checked(text):
    from specproof.properties.endpoint.options import parse_adapter

    assert parse_adapter("2=0.25") == (2, 0.25)
    with pytest.raises(UsageError, match="--adapter: expected ID=SCALE"):
        parse_adapter(text)


def test_a_twin_without_the_endpoints_adapters_is_refused():
    with (
        StandIn(loop="laws", adapters=1, listen=False) as si,
        StandIn(speculative=False, loop="laws", listen=False) as twin,
    ):
        ways = {si.url: InProcess(si), twin.url: InProcess(twin)}
        ep = Endpoint(EndpointOptions((si.url,), twin=twin.url, concurrency=4, loads=(1, 8)), transports=ways)
        try:
            with pytest.raises(UsageError, match="LoRA adapters"):
                ep.open()
        finally:
            ep.close()


def test_without_the_load_axis_the_seed_bug_passes_and_is_listed_so():
    assert BUGS["seed_in_flight"].expect == Verdict.PASS  # why the axis exists
    res, _ = _audit("seed_in_flight", loads=())
    assert res.verdict == Verdict.PASS and res.load is None


def test_an_engine_without_at_load_is_refused_when_loads_are_asked():
    spec = EngineSpec(
        "direct", "user", "the direct sampler", direct_engine, 8, (PROMPT,), (T1,), loads=(1, 2)
    )
    with pytest.raises(UsageError, match="offers no at_load"):
        audit_engine(spec, EngineAuditConfig(samples=2, report_samples=0))


@pytest.mark.parametrize("bad", [(0,), (1, 1), (1.5,), (10**6,)])
def test_levels_are_checked(bad):
    with pytest.raises(UsageError, match="loads"):
        check_loads(bad)
    with pytest.raises(UsageError, match="loads"):
        EndpointOptions(("http://127.0.0.1:1",), loads=bad)


def test_only_at_is_silent_without_levels_and_when_every_level_deviates():
    assert only_at([]) == ""
