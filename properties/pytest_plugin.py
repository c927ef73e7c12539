"""pytest plugin: audit your verifier or your engine in your own test suite.

Installed with specproof (entry point ``pytest11``). In a backend's own CI::

    pytest --specproof-chain mypkg.sampling:verify_chain
    pytest --specproof-tree mypkg.sampling:verify_tree --specproof-process wor_siblings -n auto
    pytest --specproof-engine mypkg.engine:make_engine --specproof-engine-prompt "0 6"
    pytest --specproof-endpoint http://127.0.0.1:8080 --specproof-endpoint-target http://127.0.0.1:8081

A verifier audit adds one item for the id-range probes and one per battery case
(``specproof-chain::<case>``); an engine audit one item per (sampling setting, prompt). So
pytest-xdist spreads them over cores. Each item audits its case at level ``alpha / cases``
(Bonferroni, so the family-wise false-alarm rate over all items stays below the stated alpha)
to its planned sample size, and fails with the case's witness, or as ``underpowered`` when a
time guard the user set stopped it short (``skip`` instead with ``--specproof-underpowered
skip``).

Every option of the engine and endpoint audits is here, spelled from the same tables as the
command line's (:mod:`specproof.properties.run`): ``--specproof-engine-*`` for the request and
the plan (``-prompt``, ``-tokens``, ``-temperature``, ``-top-k``, ``-param``, ``-alpha``, ``-tv``,
``-looks``, ...), ``--specproof-endpoint-*`` for a served engine (``-profile``, ``-twin``,
``-vocab``, ``-concurrency``, ...), ``--specproof-workers``/``--specproof-ray`` for sharding; the
verifier audit's plan is ``--specproof-alpha``, ``-tv``, ... Each defaults to the one default of
its field, so the audit is the one Python and the command line run, except that no time guard
runs unless one is asked for (a verdict in CI must not depend on the runner's speed). Nothing is
opened or sent at collection: an endpoint is reached by the items that audit it.

As fixtures, in a test of your own::

    def test_my_sampler_is_lossless(specproof_audit):
        result = specproof_audit("mypkg.sampling:verify_chain", kind="chain", budget_seconds=30)
        assert result.verdict == "pass", result.summary()

    def test_my_engine_is_lossless(specproof_engine_audit):
        result = specproof_engine_audit(make_engine, prompts=[(0, 6)], temperatures=[1.0, 0.7])
        assert result.verdict == "pass", result.summary()
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from specproof.reference.errors import SpecproofError, UsageError


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("specproof", "specproof audit of a speculative-decoding verifier or engine")
    g.addoption(
        "--specproof-chain", metavar="TARGET", help="audit this chain verifier (name or module:function)"
    )
    g.addoption(
        "--specproof-tree", metavar="TARGET", help="audit this tree verifier (needs --specproof-process)"
    )
    g.addoption("--specproof-process", action="append", default=None, help="proposal process (repeatable)")
    g.addoption(
        "--specproof-large-vocab-tv", type=float, help="TV planned for the memory-bound cases, V > 4096"
    )
    for unit, what in (
        ("token", "per emitted token (the token test's plan)"),
        ("joint", "of the M tokens' joint law (--specproof-engine-test cells)"),
    ):
        g.addoption(
            f"--specproof-{unit}-tv",
            type=float,
            dest=f"specproof_{unit}_tv",
            default=None,
            help=f"the engine and endpoint audits' TV named with its unit: {what}; refused where it "
            "is not the unit the plan reads",
        )
    g.addoption(
        "--specproof-underpowered",
        choices=("fail", "skip"),
        default="fail",
        help="an underpowered case (its plan did not fit the budget) fails (default) or is skipped",
    )
    from specproof.properties.audit.config import AuditConfig
    from specproof.properties.run import DOOR_CLASSES

    done: set[str] = set()
    _add_options(g, AuditConfig, "specproof", done)  # the verifier audit's plan
    for cls, prefix in DOOR_CLASSES.items():
        _add_options(g, cls, prefix, done)


def _add_options(g: Any, cls: type, prefix: str, done: set[str]) -> None:
    """The pytest options of ``cls``'s fields (its flag table), each stored as text, default None."""
    from specproof.properties.options import door_default, flags

    for name, flag in flags(cls).items():
        opt = flag.pytest_flag(prefix)
        if opt is None or opt in done or not flag.reaches("pytest"):
            continue
        done.add(opt)
        default = door_default(cls, name, "pytest")
        kw: dict[str, Any] = {"dest": _dest(cls, name), "default": None}
        kw["help"] = f"{flag.help} (default {default})"
        if flag.switch:
            kw["action"] = argparse.BooleanOptionalAction
        elif flag.repeat:
            kw["action"] = "append"
        if flag.choices and not flag.switch:
            kw["choices"] = list(flag.choices)
        g.addoption(opt, *flag.pytest_aliases, **kw)


def _dest(cls: type, name: str) -> str:
    return f"specproof_{cls.__name__.lower()}_{name}"


def _values(config: pytest.Config, cls: type) -> dict[str, Any]:
    """The values of ``cls``'s fields the pytest options gave (None where not given)."""
    from specproof.properties.cli.common import read_flag
    from specproof.properties.options import flags

    out = {}
    for name, flag in flags(cls).items():
        if flag.pytest_flag("x") is None or not flag.reaches("pytest"):
            continue
        out[name] = read_flag(flag, config.getoption(_dest(cls, name)), name)
    return out


def verifier_plan(config: pytest.Config) -> Any:
    """The verifier audit's plan the pytest options make (:class:`AuditConfig`, pytest's defaults)."""
    from specproof.properties.audit.config import AuditConfig
    from specproof.properties.plan import build_config

    options = _values(config, AuditConfig)
    options["large_vocab_tv"] = config.getoption("specproof_large_vocab_tv")
    return build_config(AuditConfig, options, door="pytest")


def door_values(config: pytest.Config) -> dict[type, Any]:
    """Every run-layer value the pytest options make (:mod:`specproof.properties.run`), built
    once per process with the pytest door's defaults."""
    from specproof.properties.options import build
    from specproof.properties.run import DOOR_CLASSES

    cached = config.stash.get(_VALUES, None)
    if cached is None:
        cached = {}
        for cls in DOOR_CLASSES:
            values = _values(config, cls)
            if {"tv", "test"} <= set(values):  # the TV named with its unit (options.UNIT_TV)
                values["token_tv"] = config.getoption("specproof_token_tv")
                values["joint_tv"] = config.getoption("specproof_joint_tv")
            cached[cls] = build(cls, values, door="pytest")
        config.stash[_VALUES] = cached
    return cached


_VALUES = pytest.StashKey[dict]()
_SPEC = pytest.StashKey[Any]()


def pytest_configure(config: pytest.Config) -> None:
    """Read the options and resolve what they name once, in the main process: a bad value or a
    target that cannot be imported is a usage error (exit 4) there, also under pytest-xdist,
    whose workers collect silently. Nothing is sent to an endpoint here."""
    if hasattr(config, "workerinput"):
        return
    try:
        _verifier_backend(config)
        if config.getoption("specproof_enginerequest_target") or config.getoption(
            "specproof_endpointoptions_urls"
        ):
            _engine_case_spec(config)
    except (SpecproofError, ValueError) as e:
        raise pytest.UsageError(f"specproof: {e}") from e


def _witness_path(item: pytest.Item) -> str:
    """Where a failed item writes its audit's JSON: .specproof/ under the rootdir."""
    folder = os.path.join(str(item.config.rootpath), ".specproof")
    os.makedirs(folder, exist_ok=True)
    name = re.sub(r"[^0-9A-Za-z_.-]+", "_", item.nodeid).strip("_")
    return os.path.join(folder, f"{name}.json")


class AuditFailure(SpecproofError):
    """An audit item that did not pass (its ``result`` holds the audit)."""

    def __init__(self, result: Any) -> None:
        super().__init__(str(result.verdict))
        self.result = result


class _AuditItem(pytest.Item):
    """An item whose failure shows the audit's summary rather than a traceback."""

    result: Any = None

    def _judge(self, fail_underpowered: bool = True) -> None:
        from specproof.properties.verdicts import Verdict

        verdict = self.result.verdict
        if verdict == Verdict.UNDERPOWERED and self.config.getoption("specproof_underpowered") == "skip":
            pytest.skip(self.result.summary())
        tolerated = (
            (Verdict.PASS, Verdict.EXACT) if fail_underpowered else (Verdict.PASS, Verdict.UNDERPOWERED)
        )
        if verdict not in tolerated:
            raise AuditFailure(self.result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, AuditFailure):
            return str(excinfo.value.result.summary())
        return str(super().repr_failure(excinfo))


class VerifierCaseItem(_AuditItem):
    """One battery case of a verifier audit, or (``case`` None) the id-range probes."""

    def __init__(self, *, backend: Any, case: Any, n_cases: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backend, self.case, self.n_cases = backend, case, n_cases

    def runtest(self) -> None:
        from specproof.properties.audit.stages import audit, default_cases
        from specproof.properties.verdicts import Verdict

        config = verifier_plan(self.config)
        config.alpha /= self.n_cases
        if self.case is None:  # the id-range probes alone: the smoke stage of one small case
            config = replace(config, cases=default_cases(self.backend, config.seed)[:1], samples=2)
        else:
            config = replace(config, cases=[self.case], probes=False)
        self.result = audit(self.backend, config)
        self.result.target = self.backend.name  # the registered name, or the TARGET as given
        if self.result.verdict not in (Verdict.PASS, Verdict.UNDERPOWERED):
            from specproof.properties.outputs import write_json

            path = _witness_path(self)
            write_json(path, self.result.to_json())
            self.result.saved_to = path
        self._judge(fail_underpowered=self.case is not None)

    def reportinfo(self) -> tuple[str, int, str]:
        what = "id-range probes" if self.case is None else self.case.describe()
        return "specproof", 0, f"specproof {self.backend.kind} audit: {what}"


class EngineCaseItem(_AuditItem):
    """One (sampling setting, prompt) of an engine audit."""

    def __init__(self, *, spec: Any, n_cases: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec, self.n_cases = spec, n_cases

    def runtest(self) -> None:
        from dataclasses import replace as with_

        from specproof.properties.run import (
            EndpointOptions,
            EngineAuditConfig,
            EngineRequest,
            ShardOptions,
            run_endpoint,
            run_engine,
        )

        values = door_values(self.config)
        config = with_(values[EngineAuditConfig], alpha=values[EngineAuditConfig].alpha / self.n_cases)
        request: EngineRequest = values[EngineRequest]
        endpoint: EndpointOptions = values[EndpointOptions]
        if endpoint.urls:  # the endpoint's servers are reached now, by the item that audits them
            case = with_(
                request, prompts=self.spec.prompts, samplings=self.spec.samplings, temperatures=None,
                top_k=None, top_p=None, min_p=None, params=(),
            )  # fmt: skip
            self.result = run_endpoint(endpoint, case, config, values[ShardOptions])
        else:
            self.result = run_engine(request, config, values[ShardOptions], spec=self.spec)
        self._judge()

    def reportinfo(self) -> tuple[str, int, str]:
        return "specproof-engine", 0, f"specproof engine audit: {self.name}"


class AuditCollector(pytest.Collector):
    def __init__(self, *, items: list[tuple[type[pytest.Item], str, dict[str, Any]]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.entries = items

    def collect(self) -> Iterator[pytest.Item]:
        for cls, name, kwargs in self.entries:
            yield cls.from_parent(self, name=name, **kwargs)


def _verifier_backend(config: pytest.Config) -> Any:
    """The verifier ``--specproof-chain`` or ``--specproof-tree`` names (None: neither)."""
    chain, tree = config.getoption("specproof_chain"), config.getoption("specproof_tree")
    if chain and tree:
        raise pytest.UsageError("--specproof-chain and --specproof-tree: give one of them")
    if not chain and not tree:
        return None
    from specproof.properties.conformance.backends import resolve

    kind, target = ("chain", chain) if chain else ("tree", tree)
    procs = config.getoption("specproof_process")
    return resolve(target, kind, tuple(procs) if procs else None)


def _verifier_items(config: pytest.Config) -> tuple[str, list[Any]] | None:
    from specproof.properties.audit.config import AuditConfig
    from specproof.properties.audit.stages import default_cases

    try:
        backend = _verifier_backend(config)
        if backend is None:
            return None
        seed = _values(config, AuditConfig)["seed"]
        cases = default_cases(backend, 0 if seed is None else seed)
    except (SpecproofError, ValueError) as e:
        raise pytest.UsageError(f"specproof: {e}") from e
    kind = backend.kind
    n = len(cases)
    items: list[tuple[type[pytest.Item], str, dict[str, Any]]] = [
        (VerifierCaseItem, "id-range-probes", {"backend": backend, "case": None, "n_cases": n})
    ]
    items += [(VerifierCaseItem, c.name, {"backend": backend, "case": c, "n_cases": n}) for c in cases]
    return f"specproof-{kind}", items


def engine_spec(target: Any, prompts: Any = None, temperatures: Any = None, tokens: int | None = None) -> Any:
    """The :class:`~specproof.properties.engine.contract.EngineSpec` of a target (a registered
    name, ``module:attr``, an engine, a factory or a spec) with the options in place: the run
    layer's, with its defaults (the engine's own prompts, else (0, 1))."""
    from specproof.properties.engine.request import parse_ids
    from specproof.properties.run import EngineRequest
    from specproof.properties.run import engine_spec as spec_of

    if prompts:
        prompts = tuple(parse_ids(p, "prompt") if isinstance(p, str) else tuple(p) for p in prompts)
    request = EngineRequest(
        target=target,
        prompts=prompts or None,
        temperatures=tuple(temperatures) if temperatures else None,
        tokens=tokens,
    )
    return spec_of(request)


def _engine_case_spec(config: pytest.Config) -> Any:
    """The spec whose cases become items: the engine's, resolved once per process; for an
    endpoint, the cases alone (prompts and settings as asked, no server reached)."""
    cached = config.stash.get(_SPEC, None)
    if cached is not None:
        return cached
    from specproof.properties.engine.contract import DEFAULT_PROMPTS, ENDPOINT_TOKENS, T07, T1, EngineSpec
    from specproof.properties.run import EndpointOptions, EngineRequest, engine_spec

    values = door_values(config)
    request: EngineRequest = values[EngineRequest]
    endpoint: EndpointOptions = values[EndpointOptions]
    if request.target and endpoint.urls:
        raise UsageError("--specproof-engine and --specproof-endpoint: give one of them")
    if endpoint.urls:
        settings = request.settings((T1, T07)) if request.asks_settings else (T1, T07)

        def unreachable(s: Any) -> Any:
            raise UsageError("an endpoint's cases are audited through run_endpoint")

        spec = EngineSpec(
            "endpoint " + ",".join(endpoint.urls),
            "endpoint",
            "a served engine",
            unreachable,
            endpoint.vocab or 0,
            request.prompts or DEFAULT_PROMPTS,
            settings,
            expect=request.expect,
            tokens=request.tokens or ENDPOINT_TOKENS,
        )
    else:
        spec = engine_spec(request)
    config.stash[_SPEC] = spec
    return spec


def _engine_items(config: pytest.Config) -> tuple[str, list[Any]] | None:
    if not config.getoption("specproof_enginerequest_target") and not config.getoption(
        "specproof_endpointoptions_urls"
    ):
        return None
    try:
        spec = _engine_case_spec(config)
    except (SpecproofError, ValueError) as e:
        raise pytest.UsageError(f"specproof-engine: {e}") from e
    cases = [(s, p) for s in spec.samplings for p in spec.prompts]
    items = [
        (
            EngineCaseItem,
            f"{s.label}[{' '.join(map(str, p))}]",
            {"spec": replace(spec, samplings=(s,), prompts=(p,)), "n_cases": len(cases)},
        )
        for s, p in cases
    ]
    return f"specproof-engine::{spec.name}", items


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    for found in (_verifier_items(config), _engine_items(config)):
        if found is not None:
            name, entries = found
            items.extend(AuditCollector.from_parent(session, name=name, items=entries).collect())


@pytest.fixture
def specproof_audit() -> Callable[..., Any]:
    """``specproof_audit(target_or_callable, kind="chain", processes=None, **AuditConfig fields)``."""
    from specproof.properties.audit.stages import AuditConfig, audit
    from specproof.properties.conformance.backends import CHAIN_PROCESSES, Backend, resolve

    def run(
        target: Any, kind: str = "chain", processes: tuple[str, ...] | None = None, **options: Any
    ) -> Any:
        if callable(target):
            if processes is None and kind == "tree":
                raise UsageError("processes: a tree audit needs the proposal processes the verifier claims")
            name = getattr(target, "__name__", "verifier")
            backend = Backend(name, kind, target, tuple(processes or CHAIN_PROCESSES), group="user")
        else:
            backend = resolve(target, kind, processes)
        return audit(backend, AuditConfig(**options))

    return run


@pytest.fixture
def specproof_engine_audit() -> Callable[..., Any]:
    """``specproof_engine_audit(target, prompts=None, temperatures=None, tokens=None,
    **EngineAuditConfig fields)`` -> :class:`~specproof.properties.engine.results.EngineAuditResult`."""
    from specproof.properties.engine.audit import EngineAuditConfig, audit_engine

    def run(
        target: Any, prompts: Any = None, temperatures: Any = None, tokens: int | None = None, **options: Any
    ) -> Any:
        from specproof.properties.options import build

        return audit_engine(
            engine_spec(target, prompts, temperatures, tokens), build(EngineAuditConfig, options)
        )

    return run
