"""Sharding without Ray: what a worker is told (properties/shard/recipe.py) and what comes back
(properties/shard/wire.py). The Ray tests are in tests/test_shard_ray.py.

* a registered engine, a module:attr or path.py:attr target, an engine factory, an EngineSpec
  whose build is a module-level function and a served endpoint each make a recipe that builds an
  engine drawing the same tokens as the driver's own; a lambda, a closure and an engine instance
  are refused with the reason; likewise for verifiers;
* packed samples come back equal (tokens, counters, None where the engine said nothing), in a
  few bytes per sample; a verifier call comes back with what the audit reads, and whole when it
  holds a hard failure;
* the verifier audit's default caller is the local loop (same JSON as before the hook).
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import textwrap

import pytest
import torch

from specproof.properties.audit.battery import build_models, chain_battery
from specproof.properties.audit.stages import AuditConfig, Caller, Runner, audit
from specproof.properties.conformance.backends import REGISTRY, Backend, TargetError
from specproof.properties.engine.contract import T1, EngineSpec, Generation
from specproof.properties.engine.loops import REFERENCE_PROMPTS, direct_engine
from specproof.properties.engine.registry import resolve_engine, spec_from_object
from specproof.properties.engine.results import EngineCase
from specproof.properties.engine.runner import CaseRunner, sample_seed
from specproof.properties.shard.recipe import (
    BackendRecipe,
    EngineRecipe,
    NotShippable,
    backend_recipe,
    engine_recipe,
)
from specproof.properties.shard.wire import (
    id_dtype,
    pack_call,
    pack_generations,
    payload_bytes,
    unpack_call,
    unpack_generations,
)

CASE = EngineCase(0, (0, 6), T1, 4)
SEEDS = [sample_seed(0, 0, i) for i in range(6)]


def tokens_of(engine) -> list[tuple[int, ...]]:
    return [g.tokens for g in CaseRunner(engine, CASE, 8).draw(SEEDS)]


def module_level_factory(temperature=1.0, top_k=None, top_p=None):
    return direct_engine(T1 if temperature == 1.0 else T1.__class__(temperature, top_k, top_p))


def shipped(recipe: EngineRecipe) -> EngineRecipe:
    """The recipe as a worker receives it."""
    return pickle.loads(pickle.dumps(recipe))


def test_engine_recipes_build_the_same_engine_on_the_worker(tmp_path):
    want = tokens_of(direct_engine(T1))
    registered = resolve_engine("reference.direct")
    r = engine_recipe(registered)
    assert r.how == "registered" and tokens_of(shipped(r).build(T1)) == want

    renamed = dataclasses.replace(registered, name="direct, renamed")
    r = engine_recipe(renamed, target="specproof.properties.engine.loops:direct_engine")
    assert r.how == "target" and tokens_of(shipped(r).build(T1)) == want

    f = tmp_path / "my_engine.py"
    f.write_text(
        textwrap.dedent(
            """
            from specproof.properties.engine.loops import direct_engine

            def factory(sampling):
                return direct_engine(sampling)
            """
        )
    )
    spec = resolve_engine(f"{f}:factory")
    r = engine_recipe(spec, target=f"{f}:factory")
    assert r.how == "target" and r.what.startswith("/") and tokens_of(shipped(r).build(T1)) == want

    # an EngineSpec whose build is a module-level function: shipped by name
    spec = EngineSpec("mine", "user", "", direct_engine, 8, REFERENCE_PROMPTS)
    r = engine_recipe(spec)
    assert r.how == "function" and tokens_of(shipped(r).build(T1)) == want
    # ... or a partial of one: by reference
    spec = EngineSpec("mine", "user", "", functools.partial(direct_engine), 8, REFERENCE_PROMPTS)
    r = engine_recipe(spec)
    assert r.how == "pickled" and tokens_of(shipped(r).build(T1)) == want
    # a factory given to the Python API: by name, called as the registry calls factories
    spec = spec_from_object("factory", module_level_factory)
    r = engine_recipe(spec, source=module_level_factory)
    assert r.how == "target" and tokens_of(shipped(r).build(T1)) == want


def test_what_cannot_be_rebuilt_on_a_worker_is_refused_with_the_reason():
    with pytest.raises(NotShippable, match="lambda, a closure or an engine instance"):
        engine_recipe(EngineSpec("l", "user", "", lambda s: direct_engine(s), 8, REFERENCE_PROMPTS))
    engine = direct_engine(T1)
    spec = spec_from_object("instance", engine)
    with pytest.raises(NotShippable, match="engine instance"):
        engine_recipe(spec, source=engine)
    with pytest.raises(NotShippable):
        engine_recipe(spec)

    def local(d, dp, tp, g):  # a nested function: no name a worker can load
        return REGISTRY[("chain", "torch.token")].fn(d, dp, tp, g)

    with pytest.raises(NotShippable, match="module-level function"):
        backend_recipe(Backend("nested", "chain", local, ("iid_chain",)))


def test_backend_recipes_rebuild_the_verifier():
    token = REGISTRY[("chain", "torch.token")]
    r = backend_recipe(token)
    assert r.how == "registered"
    b = pickle.loads(pickle.dumps(r)).build()
    assert b.fn is token.fn and (b.name, b.kind, b.processes, b.law) == (
        token.name,
        token.kind,
        token.processes,
        token.law,
    )
    from specproof.properties.conformance.backends.torch_chain import token_chain

    r = backend_recipe(Backend("user", "chain", token_chain, ("iid_chain",), group="user"))
    assert r.how == "target" and r.what.endswith(":token_chain")
    assert pickle.loads(pickle.dumps(r)).build().fn is token_chain
    with pytest.raises(
        TargetError, match="no file ./nowhere/v.py"
    ):  # a worker that cannot load it says which
        BackendRecipe("target", "/nowhere/v.py:f", {"name": "v"}).build()


def test_packed_samples_come_back_equal_in_a_few_bytes():
    gens = [
        Generation((1, 2, 3, 7), 4, 3, 2),
        Generation((0, 0, 0, 0), None, None, 1),
        Generation((7, 6, 5, 4), 300, 0, None),
        Generation((2, 2, 2, 2), 5, 1, None, cached=3),  # prompt tokens served from the server's cache
    ]
    packed = pickle.loads(pickle.dumps(pack_generations(gens, 8, 4)))
    assert unpack_generations(packed) == gens
    assert packed[2] == id_dtype(8).str == "|u1" and "drafted:<i2" in packed[3]
    assert id_dtype(65536) == "uint16" and id_dtype(65537) == "uint32" and id_dtype(152064) == "uint32"
    plain = [Generation((1, 2, 3, 4))] * 3
    assert pack_generations(plain, 8, 4)[3] == "" and len(pack_generations(plain, 8, 4)[4]) == 12
    assert unpack_generations(pack_generations(plain, 8, 4)) == plain
    # a shard of 64 samples, M = 4, V = 8, with three counters: 7 bytes each and a small header
    many = [Generation((i % 8, 1, 2, 3), 3, i % 4, 2) for i in range(64)]
    assert unpack_generations(pack_generations(many, 8, 4)) == many
    assert payload_bytes(pack_generations(many, 8, 4)) < 64 * 7 + 80


def test_a_packed_call_gives_what_the_audit_reads_and_a_hard_failure_whole():
    case = next(c for c in chain_battery() if c.name == "iid/K2/V8/rows")
    token = REGISTRY[("chain", "torch.token")]
    runner = Runner(token, case)
    inputs, emitted, lens, comp = Caller.call(runner, 0, 1, 64)
    sub, _, lens2, comp2 = unpack_call(
        pickle.loads(pickle.dumps(pack_call(inputs, emitted, lens, comp, 8))), case.paired
    )
    assert torch.equal(comp2.completed, comp.completed) and comp2.completed.dtype == comp.completed.dtype
    assert torch.equal(lens2, lens) and lens2.dtype == lens.dtype
    assert torch.equal(sub.sub, inputs.sub) and comp2.zero_row is None
    comp.zero_row, comp.zero_position = 3, 1
    whole = unpack_call(pack_call(inputs, emitted, lens, comp, 8), case.paired)
    assert whole[3] is comp and whole[0] is inputs
    paired = next(c for c in chain_battery() if c.paired)
    r = Runner(token, paired)
    inputs, emitted, lens, comp = Caller.call(r, 0, 1, 10)
    assert torch.equal(
        unpack_call(pack_call(inputs, emitted, lens, comp, paired.vocab), True)[0].sub, inputs.sub
    )
    # a worker rebuilds the case's models from the case alone: the same call, row for row
    rebuilt = Runner(token, case)
    rebuilt.models = build_models(case)
    again = Caller.call(rebuilt, 0, 1, 64)
    assert torch.equal(again[3].completed, Caller.call(Runner(token, case), 0, 1, 64)[3].completed)


def test_the_default_caller_is_the_local_loop(monkeypatch):
    """With no caller, the audit's calls run through :class:`Caller` here (counted), and a caller
    given explicitly gives the same reading."""
    from specproof.properties.audit import stages

    cases = [c for c in chain_battery() if c.name in ("iid/K1/V8", "iid/K3/V5")]
    config = dict(tv=0.2, cases=cases, probes=False, budget_seconds=10**6)
    token = REGISTRY[("chain", "torch.token")]
    made: list[Caller] = []

    class Counted(Caller):
        def __init__(self) -> None:
            self.n = 0
            made.append(self)

        def calls(self, runner, config, rows):  # type: ignore[no-untyped-def]
            for out in super().calls(runner, config, rows):
                self.n += 1
                yield out

    monkeypatch.setattr(stages, "Caller", Counted)
    a = audit(token, AuditConfig(**config)).to_json(timings=False)  # type: ignore[arg-type]
    assert len(made) == 1 and made[0].n > 0  # the default caller ran every call
    b = audit(token, AuditConfig(**config), caller=Counted()).to_json(timings=False)  # type: ignore[arg-type]
    assert made[1].n == made[0].n and a == b and a["verdict"] == "pass"


def test_workers_options_are_checked_before_anything_runs(capsys, monkeypatch):
    from specproof.properties.cli import main
    from specproof.properties.verdicts import USAGE_ERROR

    assert main(["audit", "--workers", "2", "--progress", "off"]) == USAGE_ERROR
    assert "--workers/--ray" in capsys.readouterr().err
    import specproof.properties.run as run

    def must_not_resolve(request):  # type: ignore[no-untyped-def]
        raise AssertionError("the engine was resolved before the options were checked")

    monkeypatch.setattr(run, "engine_spec", must_not_resolve)
    assert main(["audit", "engine", "reference.direct", "--workers", "0", "--progress", "off"]) == USAGE_ERROR
    assert "--workers" in capsys.readouterr().err


def test_worker_paths_leave_out_a_working_folder_removed_under_the_driver(tmp_path, monkeypatch):
    """A driver whose working folder was removed (a CI clone deleted under a running job) still
    gives its workers its import path, less the folder, instead of failing the start with a bare
    FileNotFoundError."""
    import os
    import sys

    from specproof.properties.shard.recipe import worker_paths

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    assert worker_paths()[0] == str(gone)
    os.rmdir(gone)
    paths = worker_paths()
    assert str(gone) not in paths and paths == [p for p in sys.path if p]
