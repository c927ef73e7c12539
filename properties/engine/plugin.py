"""What a workload axis and a side check are to the engine audit: the two plug-in shapes, after
pytest's hook specifications. :class:`~.audit.EngineAudit` runs its own stages (contract, plan,
sample, the law tests, the verdict) and, at each hook, every plug-in of the table
(:mod:`.plugins`), in the table's order; it names none of them.

* An :class:`Axis` multiplies the cases: every (prompt, setting) case once per value asked (the
  load axis: alone and with 8 in flight). It says which values a spec asks, what excludes it, the
  engine at a value (through an engine capability), how a case's name reads there, the share of
  the audit's alpha its own checks take, and the value the seed and side checks run at.
* A :class:`Check` reads the engine beside the law: hooks at the start (after the engine is
  built), per answer and per counted sample of the sample stage, around that stage, in the checks
  stage; it returns its :class:`Finding`\\ s (a verdict by severity, a contract violation, a
  factor), and writes its own summary lines and JSON into the result.

An audit's verdict is the most severe finding (:func:`~specproof.properties.verdicts.most_severe`),
the law tests' included. A new axis or check is one module and one line of the table:
docs/adding-an-axis-or-check.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError

if TYPE_CHECKING:
    from specproof.properties.engine.audit import EngineAudit
    from specproof.properties.engine.case import EngineCaseResult
    from specproof.properties.engine.contract import Engine, EngineSpec, Generation
    from specproof.properties.engine.runner import CaseRunner


@dataclass(frozen=True)
class Finding:
    """What a check (or the law tests) concluded, for the verdict: ``verdict`` its severity;
    ``violation`` a contract violation to state (kind, detail, case, stage) where there is none yet;
    ``factor`` the place a deviation lives ("lossy only with 8 in flight ...")."""

    verdict: Verdict
    violation: dict[str, Any] | None = None
    factor: str = ""


class Axis:
    """A workload axis (module docstring). Subclasses set the class attributes and override what
    differs; the defaults describe an axis with no side checks of its own."""

    #: the axis's key: a case's place on it (``case.at(name)``) and its JSON key
    name: str = ""
    #: the engine capability and attribute that give the engine at a value (``at_load(level)``)
    capability: str = ""
    attr: str = ""
    #: the option that asks for it (named in usage errors) and why an engine may lack it
    option: str = ""
    why: str = ""
    #: why the server's own totals cannot be compared with the answers' counters where the axis is
    #: asked (the load axis's background requests draft too); empty: they can
    extra_requests: str = ""
    #: what every plug-in shows, required by tests/test_plugins.py: the docs section that explains
    #: it ("docs/endpoint-audit.md#under-load---load-1---load-8"), a planted bug of the stand-in
    #: server that it flags (:data:`~specproof.properties.endpoint.standin_bugs.BUGS`), its
    #: sign-off question (:mod:`.signoff`), and its calibration: a measurement page under
    #: docs/measurements, or "exact: why" for a check with no statistic to calibrate
    docs: str = ""
    bug: str = ""
    signoff: str = ""
    calibration: str = ""

    def values(self, spec: EngineSpec) -> tuple[Any, ...]:
        """The values ``spec`` asks for (empty: the axis is not asked): by default those its
        ``axes`` names under this axis's name."""
        return tuple(dict(spec.axes).get(self.name, ()))

    def exclusive(self, asked: Sequence[Axis]) -> None:
        """A :class:`UsageError` where this axis cannot be combined with the others asked."""
        others = [a.name for a in asked if a is not self]
        if others:
            raise UsageError(
                f"{self.option}: audit the {self.name} axis and the {others[0]} axis in two audits"
            )

    def suffix(self, value: Any) -> str:
        """How a case's name reads at ``value`` (" with 8 in flight")."""
        return f" {self.name} {value}"

    def args(self, value: Any) -> tuple[Any, ...] | None:
        """The arguments of the engine's ``attr`` at ``value`` (None: the engine as built)."""
        return (value,)

    def base(self, value: Any, values: tuple[Any, ...]) -> bool:
        """Whether ``value`` (of the ``values`` asked) is the axis's plain place, where seed use is
        checked (the lowest load, cold, one completion a request)."""
        return True

    def reference(self, value: Any) -> bool:
        """Whether ``value`` is the place other places' acceptance is compared with (alone, cold),
        where the axis compares acceptance at all (:mod:`.axis_acceptance`)."""
        return False

    def single(self, value: Any) -> bool:
        """Whether a request at ``value`` gives one sample of its seed (the control and the
        reported probabilities need it; not so with several completions a request)."""
        return True

    def schedule(self, value: Any, planned: int, looks: list[int]) -> tuple[int, list[int]]:
        """A case's planned samples and looks at ``value`` (the completions axis rounds them up to
        whole requests)."""
        return planned, looks

    def order(self, value: Any) -> Any:
        """A key that sorts the axis's values as the summary names them."""
        return value

    def engine_at(self, engine: Engine, value: Any) -> tuple[str, tuple[Any, ...]] | None:
        """The attribute and arguments that give ``engine`` at ``value`` (None: as built)."""
        args = self.args(value)
        return None if args is None else (self.attr, args)


class Check:
    """A side check (module docstring). Every hook does nothing by default."""

    #: the check's name, as the table lists it
    name: str = ""
    #: what every plug-in shows, required by tests/test_plugins.py: the docs section that explains
    #: it ("docs/endpoint-audit.md#under-load---load-1---load-8"), a planted bug of the stand-in
    #: server that it flags (:data:`~specproof.properties.endpoint.standin_bugs.BUGS`), its
    #: sign-off question (:mod:`.signoff`), and its calibration: a measurement page under
    #: docs/measurements, or "exact: why" for a check with no statistic to calibrate
    docs: str = ""
    bug: str = ""
    signoff: str = ""
    calibration: str = ""

    def alpha_share(self, audit: EngineAudit) -> float:
        """The share of the audit's alpha it takes (0: none; asked after :meth:`start`)."""
        return 0.0

    def start(self, audit: EngineAudit) -> None:
        """After the engine is built for every case, before the plan."""

    def planned(self, audit: EngineAudit) -> None:
        """After every case has its planned samples."""

    def before_sampling(self, audit: EngineAudit) -> None:
        """Just before the sample stage."""

    def answer(self, audit: EngineAudit, g: Generation) -> None:
        """Every answer the sample stage got (counted or not: a chunk asked ahead and not used)."""

    def sample(self, audit: EngineAudit, runner: CaseRunner, r: EngineCaseResult, g: Generation) -> None:
        """Each sample the law tests count, in index order."""

    def after_sampling(self, audit: EngineAudit) -> None:
        """Just after the sample stage."""

    def run(self, audit: EngineAudit) -> None:
        """The checks stage (after sampling, where sampling did not fail)."""

    def findings(self, audit: EngineAudit) -> list[Finding]:
        """What it concluded, at the verdict."""
        return []
