"""pytest plugin: audit a whole speculative engine in your test suite (entry point
``specproof_engine``).

Command line, one test item per case (prompt x sampling setting), so pytest-xdist can spread
them; each item audits its case at ``alpha / cases`` (Bonferroni: the family-wise false-alarm
rate stays below ``--specproof-engine-alpha``) and fails with the verdict and its witness::

    pytest --specproof-engine mypkg.engine:make_engine --specproof-engine-prompt "0 6" \\
        --specproof-engine-temperature 1 --specproof-engine-temperature 0.7

Options: ``--specproof-engine-alpha`` (1e-4), ``--specproof-engine-tv`` (0.1),
``--specproof-engine-power`` (0.99), ``--specproof-engine-seed`` (0),
``--specproof-engine-tokens`` (M, the engine's default), ``--specproof-engine-samples`` (a fixed
size per case: verdicts then never depend on the machine), ``--specproof-engine-budget-seconds``
(per case, 600; past it the item fails as underpowered, never passes).

As a fixture::

    def test_my_engine_is_lossless(specproof_engine_audit):
        result = specproof_engine_audit(make_engine, prompts=[(0, 6)], temperatures=[1.0, 0.7])
        assert result.verdict == "pass", result.summary()

``make_engine`` may be a registered name, ``module:attr``, an engine, a factory
``factory(temperature=, top_k=, top_p=)`` or an :class:`~specproof.properties.engine.registry.EngineSpec`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from specproof.reference.errors import SpecproofError


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("specproof-engine", "specproof engine audit of a speculative generate loop")
    g.addoption("--specproof-engine", metavar="TARGET", help="audit this engine (name or module:attr)")
    g.addoption("--specproof-engine-prompt", action="append", default=None, help="prompt ids, e.g. '0 6'")
    g.addoption(
        "--specproof-engine-temperature", action="append", type=float, default=None, help="temperature"
    )
    g.addoption("--specproof-engine-tokens", type=int, default=None, help="new tokens M per sample")
    g.addoption("--specproof-engine-alpha", type=float, default=1e-4, help="family-wise alpha over all cases")
    g.addoption("--specproof-engine-tv", type=float, default=0.1, help="smallest TV to detect")
    g.addoption("--specproof-engine-power", type=float, default=0.99, help="power wanted at that TV")
    g.addoption("--specproof-engine-seed", type=int, default=0, help="seed")
    g.addoption("--specproof-engine-samples", type=int, default=None, help="fixed samples per case")
    g.addoption("--specproof-engine-budget-seconds", type=float, default=600.0, help="time guard per case")


def _spec(target: Any, prompts: Any = None, temperatures: Any = None, tokens: int | None = None) -> Any:
    from specproof.properties.engine.audit import _prompts
    from specproof.properties.engine.registry import Sampling, resolve_engine, spec_from_object, with_options

    if isinstance(target, str):
        spec = resolve_engine(target)
    else:
        name = getattr(target, "__name__", type(target).__name__)
        spec = spec_from_object(name, target, tuple(tuple(p) for p in prompts) if prompts else ((1, 2),))
    if prompts and isinstance(prompts[0], str):
        prompts = _prompts(list(prompts))
    samplings = [Sampling(t) for t in temperatures] if temperatures else None
    return with_options(spec, prompts, samplings, tokens)


class EngineCaseItem(pytest.Item):
    def __init__(self, *, spec: Any, n_cases: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.n_cases = n_cases
        self.result: Any = None

    def runtest(self) -> None:
        from specproof.properties.engine.audit import EngineAuditConfig, audit_engine

        opt = self.config.getoption
        config = EngineAuditConfig(
            alpha=opt("specproof_engine_alpha") / self.n_cases,
            tv=opt("specproof_engine_tv"),
            power=opt("specproof_engine_power"),
            seed=opt("specproof_engine_seed"),
            samples=opt("specproof_engine_samples"),
            budget_seconds=opt("specproof_engine_budget_seconds"),
        )
        self.result = audit_engine(self.spec, config)
        if self.result.verdict != "pass":
            raise EngineCaseFailure(self.result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, EngineCaseFailure):
            return str(excinfo.value.result.summary())
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[str, int, str]:
        return "specproof-engine", 0, f"specproof engine audit: {self.name}"


class EngineCaseFailure(SpecproofError):
    """An engine audit item that did not pass (its ``result`` holds the audit)."""

    def __init__(self, result: Any) -> None:
        super().__init__(str(result.verdict))
        self.result = result


class EngineCollector(pytest.Collector):
    def __init__(self, *, spec: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec

    def collect(self) -> Iterator[pytest.Item]:
        from dataclasses import replace

        cases = [(s, p) for s in self.spec.samplings for p in self.spec.prompts]
        for s, p in cases:
            one = replace(self.spec, samplings=(s,), prompts=(p,))
            name = f"{s.label}[{' '.join(map(str, p))}]"
            yield EngineCaseItem.from_parent(self, name=name, spec=one, n_cases=len(cases))


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    target = config.getoption("specproof_engine")
    if not target:
        return
    from specproof.properties.engine.registry import EngineTargetError

    try:
        spec = _spec(
            target,
            config.getoption("specproof_engine_prompt"),
            config.getoption("specproof_engine_temperature"),
            config.getoption("specproof_engine_tokens"),
        )
    except (EngineTargetError, ValueError) as e:
        raise pytest.UsageError(f"specproof-engine: {e}") from e
    collector = EngineCollector.from_parent(session, name=f"specproof-engine::{spec.name}", spec=spec)
    items.extend(collector.collect())


@pytest.fixture
def specproof_engine_audit() -> Callable[..., Any]:
    """``specproof_engine_audit(target, prompts=None, temperatures=None, tokens=None,
    **EngineAuditConfig fields)`` -> :class:`~specproof.properties.engine.audit.EngineAuditResult`."""
    from specproof.properties.engine.audit import EngineAuditConfig, audit_engine

    def run(
        target: Any, prompts: Any = None, temperatures: Any = None, tokens: int | None = None, **options: Any
    ) -> Any:
        return audit_engine(_spec(target, prompts, temperatures, tokens), EngineAuditConfig(**options))

    return run
