"""The engine audit's plan (:class:`EngineAuditConfig`), apart from the audit so that reading its
defaults (the command line's help) imports nothing heavy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from specproof.properties.options import Flag
from specproof.properties.plan import PlanConfig
from specproof.reference.errors import UsageError

#: the longest horizon M the cells test of the joint law takes (its cells grow as V^M)
MAX_TOKENS = 12
#: the longest horizon M the token test takes (it never needs a prefix to repeat)
MAX_HORIZON = 65536
#: the tests an audit may run: ``auto`` runs the token test, and the cells test beside it where M
#: is at most MAX_TOKENS
TESTS = ("auto", "tokens", "cells", "both")


@dataclass
class EngineAuditConfig(PlanConfig):
    """The engine audit's plan: :class:`~specproof.properties.plan.PlanConfig`'s fields with this
    audit's defaults (alpha 1e-4 over the cases, a per-token TV of 0.01, a 600 s guard, 64
    cells, stop at the first rejection), the number of interim looks of the cells test, and which
    tests run. ``tv`` is per token: the deviation of each emitted token's law from the target's at
    its own prefix that the token test's plan is sized for (proofs_notes/token_audit.md); the cells
    test of the joint law, where it runs, is given the same samples and says what joint TV they
    detect."""

    alpha: float = 1e-4
    tv: float = 0.01
    budget_seconds: float = 600.0
    max_cells: int = 64
    stop_early: bool = True
    looks: int = 4
    #: samples per case drawn with probabilities requested, where the engine reports them (the
    #: report check), and from its speculation-off twin (the control); 0: neither
    report_samples: int = 32
    #: the law tests (:data:`TESTS`); with both, each gets half of alpha
    test: str = "auto"

    FLAGS: ClassVar[dict[str, Flag]] = {
        "stop_early": replace(PlanConfig.FLAGS["stop_early"], example=False),
        "looks": Flag("--looks", "interim looks per case, for early stopping", parse=int, example=2),
        "test": Flag(
            "--test",
            "the law tests: auto (the token test, and the cells test of the joint law where M <= 12), "
            "tokens, cells or both",
            choices=TESTS,
            example="cells",
        ),
        "report_samples": Flag(
            "--report-samples",
            "samples per case drawn with probabilities requested, and from the twin (0: off)",
            parse=int,
            example=0,
        ),
    }

    def tests(self, horizon: int) -> tuple[bool, bool]:
        """(cells, tokens): which law tests run at horizon M."""
        cells = self.test in ("cells", "both") or (self.test == "auto" and horizon <= MAX_TOKENS)
        return cells, self.test != "cells"

    def validate(self) -> None:
        super().validate()
        if not isinstance(self.looks, int) or not 1 <= self.looks <= 10:
            raise UsageError(f"looks: must be between 1 and 10, got {self.looks}")
        if self.test not in TESTS:
            raise UsageError(f"test: {self.test!r} is not one of {', '.join(TESTS)}")
        if not isinstance(self.report_samples, int) or self.report_samples < 0:
            raise UsageError(f"report_samples: must be an integer >= 0, got {self.report_samples}")


#: the largest level an audit may ask (requests in flight at once)
MAX_LOAD = 256


def check_loads(loads: Sequence[int]) -> tuple[int, ...]:
    """The levels, checked: distinct integers in ``[1, MAX_LOAD]``, in the order given."""
    out: list[int] = []
    for level in loads:
        if not isinstance(level, int) or isinstance(level, bool) or not 1 <= level <= MAX_LOAD:
            raise UsageError(
                f"loads: each level is a number of requests in flight in [1, {MAX_LOAD}], got {level!r}"
            )
        if level in out:
            raise UsageError(f"loads: level {level} given twice")
        out.append(level)
    return tuple(out)


def check_adapter(adapter: object) -> tuple[tuple[int, float], ...]:
    """LoRA adapter scales, checked: (id, scale) pairs, ids integers >= 0 each named once, scales
    finite numbers."""
    if not isinstance(adapter, (tuple, list)):
        raise UsageError(f"adapter: expected (id, scale) pairs, got {adapter!r}")
    out: list[tuple[int, float]] = []
    for pair in adapter:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise UsageError(f"adapter: expected (id, scale) pairs, got {pair!r}")
        i, scale = pair
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise UsageError(f"adapter: an adapter id is an integer >= 0, got {i!r}")
        if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale):
            raise UsageError(f"adapter: adapter {i}'s scale must be a finite number, got {scale!r}")
        if any(i == j for j, _ in out):
            raise UsageError(f"adapter: adapter {i} given twice")
        out.append((i, float(scale)))
    return tuple(out)
