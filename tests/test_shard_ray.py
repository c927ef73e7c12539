"""Audits sharded over Ray actors (properties/shard/): the same JSON for 1 and 2 workers and for
a local run, faults that never pass. A local Ray instance (2 CPUs, no dashboard) is started by a
fixture and stopped after the module; everything skips when Ray is not installed.

Every audit here has a fixed seed and a fixed plan, so each verdict and JSON is a fixed outcome
(a sample or a call is a function of (seed, case, index) alone, whoever draws it); JSONs are
compared as text after dropping timing keys (scripts/same_outputs.py ``normalize``).

* engine audit: a reference loop (pass) and a lossy mutant (the same witness) give the same JSON
  locally, on 1 and on 2 workers; an actor killed mid-run has its shards drawn again (same JSON);
  a factory that raises on the workers, workers that never start (no room on the cluster) and
  workers that keep dying end ``underpowered``, never ``pass``;
* verifier audit: the same for an exact verifier and a lossy one, a hard failure and a contract
  violation in the sampling stage attributed to the same (call, row) as locally, a killed actor,
  a verifier the workers cannot load;
* endpoint audit through HTTP (the stand-in server), and ``specproof audit engine --workers 2``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib

import pytest
import torch

ray = pytest.importorskip(
    "ray", reason="Ray is not installed (pip install 'specproof[ray]'): sharded audits untested"
)

from specproof.properties.audit.battery import chain_battery  # noqa: E402
from specproof.properties.audit.stages import AuditConfig, audit, call_seeds  # noqa: E402
from specproof.properties.conformance import mutants  # noqa: E402, F401  (registers mutant.*)
from specproof.properties.conformance.backends import REGISTRY, Backend  # noqa: E402
from specproof.properties.conformance.backends.torch_chain import token_chain  # noqa: E402
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine  # noqa: E402
from specproof.properties.engine.contract import T07, T1, EngineSpec  # noqa: E402
from specproof.properties.engine.loops import direct_engine  # noqa: E402
from specproof.properties.engine.registry import resolve_engine, with_options  # noqa: E402
from specproof.properties.shard.engine import RayDrawer  # noqa: E402
from specproof.properties.shard.recipe import BackendRecipe, backend_recipe  # noqa: E402
from specproof.properties.shard.verifier import RayCaller  # noqa: E402
from specproof.properties.verdicts import Verdict  # noqa: E402

#: each test starts its own actors (a few seconds each on 2 cores): out of the quick tier
pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("same_outputs", ROOT / "scripts" / "same_outputs.py")
same_outputs = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(same_outputs)  # type: ignore[union-attr]

ALPHA = 1e-3
SMALL = [
    c for c in chain_battery() if c.name in ("iid/K1/V8", "onehot/K2/V6/tiny", "iid/K3/V5", "iid/K2/V8/rows")
]


def text(result) -> str:
    """The JSON without its timings, as text (the comparison is byte for byte)."""
    data = result.to_json() if not isinstance(result, dict) else result
    return json.dumps(same_outputs.normalize(data), sort_keys=True, default=str)


@pytest.fixture(scope="module", autouse=True)
def cluster():
    started = not ray.is_initialized()
    if started:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            object_store_memory=128 * 2**20,
        )
    yield
    if started:
        ray.shutdown()


# --------------------------------------------------------------------------- engine audit

REFERENCE = with_options(resolve_engine("reference.draft.token"), prompts=[(0, 6)], samplings=[T1, T07])
MUTANT = with_options(resolve_engine("mutant.greedy_draft_soft_law"), prompts=[(0, 6)], samplings=[T1])


def engine_config(samples: int = 160) -> EngineAuditConfig:
    return EngineAuditConfig(alpha=ALPHA, samples=samples, seed=0)


@pytest.fixture(scope="module")
def reference_local() -> str:
    res = audit_engine(REFERENCE, engine_config())
    assert res.verdict == Verdict.PASS, res.summary()
    return text(res)


@pytest.mark.parametrize("workers", [1, 2])
def test_engine_audit_gives_the_local_json_on_any_number_of_workers(reference_local, workers):
    with RayDrawer.for_spec(REFERENCE, workers) as drawer:
        res = audit_engine(REFERENCE, engine_config(), drawer=drawer)
        stats = drawer.pool.stats
    assert text(res) == reference_local
    assert drawer.drawn == res.samples == 320 and stats.restarts == stats.rerun == 0
    # what came back: 4 token bytes, 3 counter bytes and the steps (a count and at most M = 4
    # sizes, one byte each: the token test's index in a step) per sample, and a header per shard
    assert stats.bytes_up <= (7 + 1 + REFERENCE.tokens) * drawer.drawn + 100 * stats.jobs


def test_a_lossy_engine_has_the_same_witness_on_1_and_2_workers():
    local = audit_engine(MUTANT, engine_config(300))
    assert local.verdict == Verdict.LOSSY and local.witness is not None
    for workers in (1, 2):
        with RayDrawer.for_spec(MUTANT, workers) as drawer:
            res = audit_engine(MUTANT, engine_config(300), drawer=drawer)
        assert text(res) == text(local), workers
        assert res.witness_text() == local.witness_text()


def test_an_actor_killed_mid_run_has_its_shards_drawn_again(reference_local):
    with RayDrawer.for_spec(REFERENCE, 2) as drawer:
        rounds = []

        def kill_once(pool):
            rounds.append(1)
            if len(rounds) == 6:  # jobs are in flight on both actors
                ray.kill(pool.actors[0])

        drawer.pool.on_dispatch = kill_once
        res = audit_engine(REFERENCE, engine_config(), drawer=drawer)
        stats = drawer.pool.stats
    assert stats.restarts == 1 and stats.rerun >= 1, stats
    assert text(res) == reference_local  # nothing counted twice, nothing lost


def only_on_the_driver(sampling):
    """An engine factory that works in the test's process and raises on every worker (a node
    without the GPU the engine needs)."""
    if os.environ.get("SPECPROOF_TEST_DRIVER_PID") != str(os.getpid()):
        raise RuntimeError("no GPU on this worker")
    return direct_engine(sampling)


def test_a_factory_that_raises_on_the_workers_ends_underpowered(monkeypatch):
    monkeypatch.setenv("SPECPROOF_TEST_DRIVER_PID", str(os.getpid()))
    spec = EngineSpec("only_on_the_driver", "user", "", only_on_the_driver, 8, ((0, 6),), (T1,), expect=None)
    with RayDrawer.for_spec(spec, 2) as drawer:
        assert drawer.recipe.how == "function"
        res = audit_engine(spec, engine_config(), drawer=drawer)
    assert res.verdict == Verdict.UNDERPOWERED, res.summary()
    assert "no GPU on this worker" in res.fault and res.samples == 0


def test_workers_that_never_start_or_keep_dying_end_underpowered():
    # a GPU per actor on a cluster without GPUs: the actors never start (a cluster gone away)
    with RayDrawer.for_spec(REFERENCE, 2, gpus_per_worker=1, stall_seconds=2) as drawer:
        res = audit_engine(REFERENCE, engine_config(), drawer=drawer)
    assert res.verdict == Verdict.UNDERPOWERED and "no worker answered" in res.fault
    with RayDrawer.for_spec(REFERENCE, 1, max_restarts=0) as drawer:
        drawer.pool.on_dispatch = lambda pool: ray.kill(pool.actors[0]) if drawer.drawn >= 40 else None
        res = audit_engine(REFERENCE, engine_config(), drawer=drawer)
    assert res.verdict == Verdict.UNDERPOWERED and "died" in res.fault
    assert res.samples >= 40  # what was drawn before the workers died is kept


# --------------------------------------------------------------------------- verifier audit


def verifier_config(**over) -> AuditConfig:
    base = dict(tv=0.1, cases=SMALL, probes=False, batch=512, budget_seconds=10**6, shrink=0)
    base.update(over)
    return AuditConfig(**base)  # type: ignore[arg-type]


def _call_seed(case_name: str, k: int) -> int:
    return call_seeds(0, next(c for c in SMALL if c.name == case_name), k)[1]


ZERO_AT = _call_seed("iid/K3/V5", 2)  # the verifier's generator seed on call 2 of iid/K3/V5
RANGE_AT = _call_seed("iid/K1/V8", 3)


def zero_at_call_2(d, dp, tp, g):
    """torch.token, except on call 2 of iid/K3/V5, where the first row whose target law has a
    zero emits that token (a hard failure in the sampling stage)."""
    seed = g.initial_seed()
    out = token_chain(d, dp, tp, g)
    if seed == ZERO_AT:
        out = out.clone()
        row = int((tp[:, 0].min(dim=1).values == 0).nonzero()[0])
        out[row] = -1
        out[row, 0] = int(torch.argmin(tp[row, 0]))
    return out


def out_of_range_at_call_3(d, dp, tp, g):
    """torch.token, except on call 3 of iid/K1/V8, where row 7 emits an id outside [0, V)."""
    seed = g.initial_seed()
    out = token_chain(d, dp, tp, g)
    if seed == RANGE_AT:
        out = out.clone()
        out[7, 0] = tp.shape[-1] + 5
    return out


def user_backend(fn) -> Backend:
    return Backend(fn.__name__, "chain", fn, ("iid_chain", "onehot_chain"), group="user")


@pytest.mark.parametrize(
    "backend",
    [
        REGISTRY[("chain", "torch.token")],
        REGISTRY[("chain", "mutant.residual_from_p")],
        user_backend(zero_at_call_2),
        user_backend(out_of_range_at_call_3),
    ],
    ids=["exact", "lossy", "hard_failure", "violation"],
)
def test_verifier_audit_gives_the_local_json_on_1_and_2_workers(backend):
    local = audit(backend, verifier_config()).to_json(timings=False)
    for workers in (1, 2) if backend.name == "torch.token" else (2,):
        with RayCaller.for_backend(backend, workers) as caller:
            res = audit(backend, verifier_config(), caller=caller).to_json(timings=False)
        assert text(res) == text(local), workers
    if backend.name == "zero_at_call_2":
        w = next(r for r in local["cases"] if r["case"]["name"] == "iid/K3/V5") if "cases" in local else None
        assert local["verdict"] == "lossy" and "of call 2" in json.dumps(w or local)
    if backend.name == "out_of_range_at_call_3":
        v = local["violation"]
        assert v["row"] == 7 and v["regenerate"]["call"] == 3 and v["during"] == "sampling"
    if backend.name == "mutant.residual_from_p":
        assert local["verdict"] == "lossy"


def test_verifier_audit_survives_a_killed_actor():
    token = REGISTRY[("chain", "torch.token")]
    local = audit(token, verifier_config()).to_json(timings=False)
    with RayCaller.for_backend(token, 2) as caller:
        rounds = []

        def kill_once(pool):
            rounds.append(1)
            if len(rounds) == 4:
                ray.kill(pool.actors[1])

        caller.pool.on_dispatch = kill_once
        res = audit(token, verifier_config(), caller=caller).to_json(timings=False)
        assert caller.pool.stats.restarts == 1 and caller.pool.stats.rerun >= 1
    assert text(res) == text(local)


def test_a_verifier_the_workers_cannot_load_ends_underpowered():
    token = REGISTRY[("chain", "torch.token")]
    fields = backend_recipe(token).fields
    with RayCaller(BackendRecipe("target", "/nowhere/verifier.py:verify", fields), 2) as caller:
        res = audit(token, verifier_config(), caller=caller)
    assert res.verdict == "underpowered", res.summary()
    assert all(r.status in ("not_run", "short") for r in res.cases)
    assert "no file" in json.dumps(res.to_json())


# --------------------------------------------------------------------------- endpoint and CLI


def test_endpoint_audit_on_workers_each_with_its_own_client():
    from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
    from specproof.properties.endpoint.options import EndpointOptions
    from specproof.properties.endpoint.standin import StandIn

    with StandIn(loop="laws") as si:
        texts = []
        for workers in (None, 1, 2):
            ep = Endpoint(EndpointOptions((si.url,), "llamacpp", concurrency=4))
            try:
                spec = endpoint_spec(ep, prompts=[(0, 6)], samplings=[T1], tokens=4)
                if workers is None:
                    res = audit_engine(spec, EngineAuditConfig(alpha=ALPHA, samples=200, seed=1))
                    local = res
                else:
                    with RayDrawer.for_spec(spec, workers) as drawer:
                        assert drawer.recipe.how == "endpoint"
                        res = audit_engine(
                            spec, EngineAuditConfig(alpha=ALPHA, samples=200, seed=1), drawer=drawer
                        )
            finally:
                ep.close()
            data = res.to_json()
            data.get("description", {}).pop("requests", None)  # the driver's own requests differ
            # the server's absolute counters carry the traffic of the runs before this one; what this
            # run added ("grew") and the check's status must agree
            for key in ("before", "after"):
                (data.get("metrics") or {}).pop(key, None)
            texts.append(text(data))
    assert local.verdict == Verdict.PASS, local.summary()
    assert texts[1] == texts[2]
    assert json.loads(texts[0])["cases"] == json.loads(texts[1])["cases"]


def test_cli_audit_engine_with_workers(tmp_path, capsys):
    from specproof.properties.cli import main

    common = ["audit", "engine", "reference.draft.token", "--prompt", "0 6", "--temperature", "1"]
    common += ["--samples", "80", "--alpha", "1e-3", "--progress", "off"]
    assert main([*common, "--json", str(tmp_path / "a.json")]) == 0
    assert main([*common, "--workers", "2", "--json", str(tmp_path / "b.json")]) == 0
    assert "sharded over 2 Ray workers" in capsys.readouterr().out
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("a.json", "b.json"))
    assert text(a) == text(b)
