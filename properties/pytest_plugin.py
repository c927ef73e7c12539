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

The plan's options (``--specproof-alpha``, ``-tv``, ``-power``, ``-seed``, ``-samples``,
``-large-vocab-tv``, ``-budget-seconds``; ``--specproof-engine-*`` for engines) default to the
audits' own defaults (:class:`~specproof.properties.audit.stages.AuditConfig`,
:class:`~specproof.properties.engine.audit.EngineAuditConfig`): the same audit as from Python
and the command line.

As fixtures, in a test of your own::

    def test_my_sampler_is_lossless(specproof_audit):
        result = specproof_audit("mypkg.sampling:verify_chain", kind="chain", budget_seconds=30)
        assert result.verdict == "pass", result.summary()

    def test_my_engine_is_lossless(specproof_engine_audit):
        result = specproof_engine_audit(make_engine, prompts=[(0, 6)], temperatures=[1.0, 0.7])
        assert result.verdict == "pass", result.summary()
"""

from __future__ import annotations

import math
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
    for prefix, what in (("specproof", "verifier"), ("specproof-engine", "engine")):
        g.addoption(f"--{prefix}-alpha", type=float, help=f"family-wise alpha over all {what} cases")
        g.addoption(f"--{prefix}-tv", type=float, help="smallest TV to detect")
        g.addoption(f"--{prefix}-power", type=float, help="power wanted at that TV")
        g.addoption(f"--{prefix}-seed", type=int, help="seed (default 0)")
        g.addoption(f"--{prefix}-samples", type=int, help="fixed samples per case instead of the planner's")
        g.addoption(
            f"--{prefix}-budget-seconds",
            type=float,
            help="time guard per case: a case that cannot run its plan in it is underpowered",
        )
    g.addoption(
        "--specproof-large-vocab-tv", type=float, help="TV planned for the memory-bound cases, V > 4096"
    )
    g.addoption(
        "--specproof-underpowered",
        choices=("fail", "skip"),
        default="fail",
        help="an underpowered case (its plan did not fit the budget) fails (default) or is skipped",
    )
    g.addoption("--specproof-engine", metavar="TARGET", help="audit this engine (name or module:attr)")
    g.addoption("--specproof-engine-prompt", action="append", default=None, help="prompt ids, e.g. '0 6'")
    g.addoption(
        "--specproof-engine-temperature", action="append", type=float, default=None, help="temperature"
    )
    g.addoption("--specproof-engine-tokens", type=int, default=None, help="new tokens M per sample")
    g.addoption(
        "--specproof-endpoint",
        metavar="URL",
        help="audit this served engine through its HTTP API (the --specproof-engine-* options apply)",
    )
    g.addoption("--specproof-endpoint-profile", default="llamacpp", help="server family (default llamacpp)")
    g.addoption(
        "--specproof-endpoint-target", metavar="URL", help="the same model served without speculation"
    )
    g.addoption("--specproof-endpoint-vocab", type=int, help="vocabulary size, where the server does not say")


def _options(config: pytest.Config, prefix: str) -> dict[str, Any]:
    """The plan options given on the command line (None: the config class's default). In CI the
    verdict must be an instrument reading, so no time guard runs unless the user asks for one:
    the plan comes from the statistics alone, and a busy runner only takes longer."""
    opt = config.getoption
    budget = opt(f"{prefix}_budget_seconds")
    return {
        "alpha": opt(f"{prefix}_alpha"),
        "tv": opt(f"{prefix}_tv"),
        "power": opt(f"{prefix}_power"),
        "seed": opt(f"{prefix}_seed"),
        "samples": opt(f"{prefix}_samples"),
        "budget_seconds": math.inf if budget is None else budget,
    }


def pytest_configure(config: pytest.Config) -> None:
    """Resolve what the options name once, in the main process: a target that cannot be imported
    is a usage error (exit 4) there, also under pytest-xdist, whose workers collect silently."""
    if hasattr(config, "workerinput"):
        return
    try:
        _verifier_backend(config)
        target = config.getoption("specproof_engine")
        if target:
            engine_spec(target)
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
        from specproof.properties.audit.stages import AuditConfig, audit, default_cases
        from specproof.properties.plan import build_config
        from specproof.properties.verdicts import Verdict

        options = _options(self.config, "specproof")
        options["large_vocab_tv"] = self.config.getoption("specproof_large_vocab_tv")
        config = build_config(AuditConfig, options)
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
        from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
        from specproof.properties.plan import build_config

        config = build_config(EngineAuditConfig, _options(self.config, "specproof_engine"))
        config.alpha /= self.n_cases
        self.result = audit_engine(self.spec, config)
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
    from specproof.properties.audit.stages import default_cases

    try:
        backend = _verifier_backend(config)
        if backend is None:
            return None
        cases = default_cases(backend, config.getoption("specproof_seed") or 0)
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
    name, ``module:attr``, an engine, a factory or a spec) with the options in place."""
    from specproof.properties.engine.contract import Sampling
    from specproof.properties.engine.registry import resolve_engine, spec_from_object, with_options

    if prompts:
        from specproof.properties.cli.common import parse_ids

        prompts = [parse_ids(p, "prompt") if isinstance(p, str) else tuple(p) for p in prompts]
    if isinstance(target, str):
        spec = resolve_engine(target)
    else:
        name = getattr(target, "__name__", type(target).__name__)
        spec = spec_from_object(name, target, tuple(prompts) if prompts else ((1, 2),))
    samplings = [Sampling(t) for t in temperatures] if temperatures else None
    return with_options(spec, prompts, samplings, tokens)


def _endpoint_spec(config: pytest.Config, url: str) -> Any:
    """The served engine at ``url`` as an engine spec; its servers are checked now, before any
    item runs, and released when the session ends."""
    from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
    from specproof.properties.engine.contract import Sampling

    endpoint = Endpoint(
        [url],
        config.getoption("specproof_endpoint_profile"),
        target=config.getoption("specproof_endpoint_target"),
        vocab=config.getoption("specproof_endpoint_vocab"),
    )
    config.add_cleanup(endpoint.close)
    prompts = config.getoption("specproof_engine_prompt")
    if prompts:
        from specproof.properties.cli.common import parse_ids

        prompts = [parse_ids(p, "--specproof-engine-prompt") for p in prompts]
    temps = config.getoption("specproof_engine_temperature")
    samplings = [Sampling(t) for t in temps] if temps else None
    return endpoint_spec(endpoint, prompts, samplings, config.getoption("specproof_engine_tokens") or 4)


def _engine_items(config: pytest.Config) -> tuple[str, list[Any]] | None:
    target, url = config.getoption("specproof_engine"), config.getoption("specproof_endpoint")
    if not target and not url:
        return None
    if target and url:
        raise pytest.UsageError("--specproof-engine and --specproof-endpoint: give one of them")
    try:
        if url:
            spec = _endpoint_spec(config, url)
        else:
            spec = engine_spec(
                target,
                config.getoption("specproof_engine_prompt"),
                config.getoption("specproof_engine_temperature"),
                config.getoption("specproof_engine_tokens"),
            )
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
        return audit_engine(engine_spec(target, prompts, temperatures, tokens), EngineAuditConfig(**options))

    return run
