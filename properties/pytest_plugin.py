"""pytest plugin: run the audit battery against your verifier, one test item per case.

Installed with specproof (entry point ``pytest11``). In a backend's own CI::

    pytest --specproof-chain mypkg.sampling:verify_chain
    pytest --specproof-tree mypkg.sampling:verify_tree --specproof-process wor_siblings -n auto

adds one item for the id-range probes and one per battery case (``specproof::<case>``), so
pytest-xdist spreads them over cores. Each item audits its case at level ``alpha / cases``
(Bonferroni, so the family-wise false-alarm rate over all items stays below
``--specproof-alpha``) to its planned sample size, and fails with the case's witness, or as
``underpowered`` when its plan cannot finish within the per-case time guard (``skip`` instead
with ``--specproof-underpowered skip``). Options: ``--specproof-alpha`` (1e-6),
``--specproof-tv`` (0.01), ``--specproof-large-vocab-tv`` (0.2), ``--specproof-power`` (0.99),
``--specproof-seed`` (0), ``--specproof-budget-seconds`` (per case, 60: a guard only),
``--specproof-samples`` (a fixed sample size per case instead of the planner's).

In a test of your own, the ``specproof_audit`` fixture is :func:`specproof.properties.audit.stages.audit`
with the target resolved for you::

    def test_my_sampler_is_lossless(specproof_audit):
        result = specproof_audit("mypkg.sampling:verify_chain", kind="chain", budget_seconds=30)
        assert result.verdict == "pass", result.summary()
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from specproof.reference.errors import SpecproofError, UsageError


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("specproof", "specproof audit of a speculative-decoding verifier")
    g.addoption(
        "--specproof-chain", metavar="TARGET", help="audit this chain verifier (name or module:function)"
    )
    g.addoption(
        "--specproof-tree", metavar="TARGET", help="audit this tree verifier (needs --specproof-process)"
    )
    g.addoption("--specproof-process", action="append", default=None, help="proposal process (repeatable)")
    g.addoption("--specproof-alpha", type=float, default=1e-6, help="family-wise alpha over all cases")
    g.addoption("--specproof-tv", type=float, default=0.01, help="smallest TV to detect")
    g.addoption("--specproof-power", type=float, default=0.99, help="power wanted at that TV")
    g.addoption("--specproof-seed", type=int, default=0, help="seed")
    g.addoption(
        "--specproof-budget-seconds",
        type=float,
        default=60.0,
        help="time guard per case: a case that cannot run its plan in it is underpowered (default 60)",
    )
    g.addoption(
        "--specproof-large-vocab-tv",
        type=float,
        default=0.2,
        help="TV planned for the memory-bound cases, V > 4096 (default 0.2)",
    )
    g.addoption(
        "--specproof-underpowered",
        choices=("fail", "skip"),
        default="fail",
        help="an underpowered case (its plan did not fit the budget) fails (default) or is skipped",
    )
    g.addoption(
        "--specproof-samples",
        type=int,
        default=None,
        help="fixed steps per case instead of the planner's (deterministic, independent of machine load)",
    )


class SpecproofCaseItem(pytest.Item):
    def __init__(self, *, backend: Any, case: Any, n_cases: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backend = backend
        self.case = case
        self.n_cases = n_cases
        self.result: Any = None

    def runtest(self) -> None:
        from specproof.properties.audit.stages import AuditConfig, audit
        from specproof.properties.verdicts import Verdict

        opt = self.config.getoption
        config = AuditConfig(
            alpha=opt("specproof_alpha") / self.n_cases,
            tv=opt("specproof_tv"),
            power=opt("specproof_power"),
            seed=opt("specproof_seed"),
            budget_seconds=opt("specproof_budget_seconds"),
            large_vocab_tv=opt("specproof_large_vocab_tv"),
            samples=opt("specproof_samples"),
            cases=None if self.case is None else [self.case],
            probes=self.case is None,
        )
        if self.case is None:  # the id-range probes alone: the smoke stage of one small case
            from specproof.properties.audit.stages import default_cases

            config.cases = default_cases(self.backend, config.seed)[:1]
            config.samples = 2
        self.result = audit(self.backend, config)
        verdict = self.result.verdict
        if self.case is None:
            if verdict in (Verdict.LOSSY, Verdict.CONTRACT_VIOLATION):
                raise SpecproofCaseFailure(self.result)
            return
        if verdict == Verdict.UNDERPOWERED and opt("specproof_underpowered") == "skip":
            pytest.skip(self.result.summary())
        if verdict != Verdict.PASS:
            raise SpecproofCaseFailure(self.result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, SpecproofCaseFailure):
            return excinfo.value.result.summary()
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[str, int, str]:
        what = "id-range probes" if self.case is None else self.case.describe()
        return "specproof", 0, f"specproof {self.backend.kind} audit: {what}"


class SpecproofCaseFailure(SpecproofError):
    """A battery case whose audit did not pass (its ``result`` holds the audit)."""

    def __init__(self, result: Any) -> None:
        super().__init__(result.verdict)
        self.result = result


class SpecproofCollector(pytest.Collector):
    def __init__(self, *, backend: Any, cases: list[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backend = backend
        self.cases = cases

    def collect(self) -> Iterator[pytest.Item]:
        yield SpecproofCaseItem.from_parent(
            self, name="id-range-probes", backend=self.backend, case=None, n_cases=len(self.cases)
        )
        for case in self.cases:
            yield SpecproofCaseItem.from_parent(
                self, name=case.name, backend=self.backend, case=case, n_cases=len(self.cases)
            )


def _requested(config: pytest.Config) -> tuple[str, str] | None:
    chain, tree = config.getoption("specproof_chain"), config.getoption("specproof_tree")
    if chain and tree:
        raise pytest.UsageError("--specproof-chain and --specproof-tree: give one of them")
    if chain:
        return "chain", chain
    if tree:
        return "tree", tree
    return None


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    req = _requested(config)
    if req is None:
        return
    from specproof.properties.audit.stages import default_cases
    from specproof.properties.conformance.backends import TargetError, resolve

    kind, target = req
    procs = config.getoption("specproof_process")
    try:
        backend = resolve(target, kind, tuple(procs) if procs else None)
        cases = default_cases(backend, config.getoption("specproof_seed"))
    except (TargetError, ValueError) as e:
        raise pytest.UsageError(f"specproof: {e}") from e
    collector = SpecproofCollector.from_parent(
        session, name=f"specproof-{kind}", backend=backend, cases=cases
    )
    items.extend(collector.collect())


@pytest.fixture
def specproof_audit() -> Callable[..., Any]:
    """``specproof_audit(target_or_callable, kind="chain", processes=None, **AuditConfig fields)``."""
    from specproof.properties.audit.stages import AuditConfig, audit
    from specproof.properties.conformance.backends import Backend, resolve

    def run(
        target: Any, kind: str = "chain", processes: tuple[str, ...] | None = None, **options: Any
    ) -> Any:
        if callable(target):
            from specproof.properties.conformance.backends import CHAIN_PROCESSES

            if processes is None and kind == "tree":
                raise UsageError("processes: a tree audit needs the proposal processes the verifier claims")
            backend = Backend(
                getattr(target, "__name__", "verifier"),
                kind,
                target,
                tuple(processes or CHAIN_PROCESSES),
                group="user",
            )
        else:
            backend = resolve(target, kind, processes)
        return audit(backend, AuditConfig(**options))

    return run
