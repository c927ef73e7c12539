"""What every audit's plan is made of, validated once, and the time guard every audit shares.

An audit is an instrument: its reading is fixed by the plan and the seed, never by the clock.
The plan comes from the false-alarm rate ``alpha``, the smallest deviation ``tv`` it must catch
and the ``power`` wanted there (or a fixed ``samples`` per case), over at most ``max_cells``
cells of ``min_count`` expected samples each. ``budget_seconds`` is only a guard: a plan that
cannot finish in it ends ``underpowered``, never ``pass``.

:class:`PlanConfig` holds those fields and their one validation. The verifier audit
(:class:`specproof.properties.audit.stages.AuditConfig`) and the engine audit
(:class:`specproof.properties.engine.audit.EngineAuditConfig`) extend it, each with its own
defaults, written once there: the same defaults from Python, the command line and pytest (the
command line and the plugins read them from the config class).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from specproof.properties import options as _options
from specproof.properties.options import Flag
from specproof.reference.errors import UsageError

#: the guard pytest runs under unless asked for one (plan fields' ``door_defaults``)
NO_GUARD = (
    math.inf,
    "in CI a verdict must not depend on the runner's speed: no time guard runs unless one is asked for",
)


def check_probability(value: float, argument: str, *, open_low: bool = True) -> float:
    """``value`` as a float in (0, 1) (``[0, 1)`` with ``open_low=False``), or a
    :class:`UsageError` naming ``argument``."""
    if not isinstance(value, (int, float)) or math.isnan(value):
        raise UsageError(f"{argument}: expected a number, got {value!r}")
    if not (0 < value < 1 if open_low else 0 <= value < 1):
        raise UsageError(f"{argument}: must lie in (0, 1), got {value}")
    return float(value)


@dataclass
class PlanConfig:
    """The fields every audit plans with (module docstring); subclasses set the defaults."""

    alpha: float = 1e-6  # family-wise false-alarm rate, over the cases (Holm)
    tv: float = 0.01  # the smallest deviation (total variation on the cells) the plan must detect
    power: float = 0.99  # the power wanted against that deviation
    seed: int = 0  # every draw of the audit derives from it
    budget_seconds: float = 900.0  # a guard: what cannot finish in it makes the verdict underpowered
    samples: int | None = None  # a fixed sample size per case instead of the planner's
    max_cells: int = 128  # most cells of a case's joint-law test
    min_count: float = 10.0  # least expected count of a cell
    stop_early: bool = False  # end the audit at the first case rejected at its own level
    #: torch threads during the audit (restored after): 1 by default, so that reductions run in
    #: one order on every machine and small operations are not slowed by contended threads;
    #: None leaves torch's setting alone
    threads: int | None = 1

    #: how each field is reached from the command line and pytest (:mod:`.options`)
    FLAGS: ClassVar[dict[str, Flag]] = {
        "alpha": Flag("--alpha", "family-wise false-alarm rate", parse=float, example=0.001),
        "tv": Flag(
            "--tv",
            "smallest deviation to detect, a TV: of one call's output law (verifier); of each emitted "
            "token's law for the token test, of the M tokens' joint law with --test cells (engine, "
            "endpoint; on the command line --token-tv and --joint-tv name the unit)",
            parse=float,
            example=0.3,
        ),
        "power": Flag("--power", "power wanted at that TV", parse=float, example=0.9),
        "seed": Flag("--seed", "seed of every draw", parse=int, example=5),
        "budget_seconds": Flag(
            "--budget-seconds",
            "time guard: a plan that cannot finish in it ends underpowered, never pass",
            parse=float,
            example=30.0,
            door_defaults={"pytest": NO_GUARD},
        ),
        "samples": Flag(
            "--samples", "fixed samples per case instead of the planner's", parse=int, example=50
        ),
        "max_cells": Flag("--cells", "most cells per case's test", parse=int, example=32),
        "min_count": Flag("--min-count", "least expected count of a cell", parse=float, example=5.0),
        "stop_early": Flag(
            "--stop-early", "end at the first case rejected at its own level", switch=True, example=True
        ),
        "threads": Flag("--threads", "torch threads during the audit (restored after)", parse=int, example=2),
    }

    def validate(self) -> None:
        """Every field in its range; raises :class:`UsageError` naming the field."""
        check_probability(self.alpha, "alpha")
        check_probability(self.tv, "tv")
        check_probability(self.power, "power")
        if not (isinstance(self.budget_seconds, (int, float)) and self.budget_seconds > 0):
            raise UsageError(f"budget_seconds: must be positive, got {self.budget_seconds}")
        if self.samples is not None and (not isinstance(self.samples, int) or self.samples < 2):
            raise UsageError(f"samples: must be at least 2, got {self.samples}")
        if not isinstance(self.max_cells, int) or self.max_cells < 2:
            raise UsageError(f"max_cells: must be at least 2, got {self.max_cells}")
        if not self.min_count > 0:
            raise UsageError(f"min_count: must be positive, got {self.min_count!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise UsageError(f"threads: must be >= 1 (or None), got {self.threads}")

    def plan_json(self) -> dict[str, Any]:
        """The shared fields, as every audit's JSON states them."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(PlanConfig)}


C = TypeVar("C", bound=PlanConfig)


def defaults(cls: type[C]) -> dict[str, Any]:
    """The default of every field of a config class (what the command line shows in its help)."""
    return _options.defaults(cls)


def build_config(cls: type[C], options: dict[str, Any], door: str = "python") -> C:
    """``cls`` built from its defaults and the options that were given (``None``: not given),
    validated. An option the class does not have is a :class:`UsageError`. ``door``: where the
    options came from, for the fields whose default differs there on purpose (:mod:`.options`)."""
    return _options.build(cls, options, door)


@dataclass
class Budget:
    """The time guard. ``clock`` is injectable, so tests can slow time down and show that a
    short budget only ever makes a verdict ``underpowered``."""

    seconds: float
    clock: Callable[[], float] = time.perf_counter
    start: float = field(init=False)

    def __post_init__(self) -> None:
        self.start = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def exhausted(self) -> bool:
        return self.left() <= 0
