"""The load axis (properties/engine/load.py): every case alone and with N requests in flight,
seed use per level, the background requests' own tokens tested; the stand-in's batch-coupled bugs
flagged on the level they live on, the correct stand-in passing on every level."""

from __future__ import annotations

import pytest

from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.standin import BUGS, StandIn
from specproof.properties.engine.audit import audit_engine
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.contract import T1, EngineSpec
from specproof.properties.engine.load import check_loads, only_at
from specproof.properties.engine.loops import direct_engine
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError

PROMPT = (0, 6)
#: alpha 1e-3, seed 1, 200 samples a case: the planted bugs' tests
CONFIG = EngineAuditConfig(alpha=1e-3, samples=200, seed=1, report_samples=16)


def _audit(bug: str | None, loads: tuple[int, ...] = (1, 8), config: EngineAuditConfig = CONFIG):
    """The endpoint audit of a listening stand-in (sockets: N connections put N requests in
    flight) against a correct twin, at ``loads``."""
    with StandIn(bug, loop="laws") as si, StandIn(speculative=False, loop="laws") as twin:
        ep = Endpoint(EndpointOptions((si.url,), twin=twin.url, concurrency=4, loads=loads))
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
    assert not alone.rejected and alone.n == 200  # alone the verifier is exact
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
