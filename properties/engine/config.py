"""The engine audit's plan (:class:`EngineAuditConfig`), apart from the audit so that reading its
defaults (the command line's help) imports nothing heavy."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from specproof.properties.options import Flag
from specproof.properties.plan import PlanConfig
from specproof.reference.errors import UsageError

#: the longest horizon M an audit may ask for (the cells grow as V^M)
MAX_TOKENS = 12


@dataclass
class EngineAuditConfig(PlanConfig):
    """The engine audit's plan: :class:`~specproof.properties.plan.PlanConfig`'s fields with this
    audit's defaults (an engine sample costs milliseconds, a verifier row microseconds: alpha
    1e-4 over the cases, TV 0.1, a 600 s guard, 64 cells, stop at the first rejection), and the
    number of interim looks per case."""

    alpha: float = 1e-4
    tv: float = 0.1
    budget_seconds: float = 600.0
    max_cells: int = 64
    stop_early: bool = True
    looks: int = 4
    #: samples per case drawn with probabilities requested, where the engine reports them (the
    #: report check), and from its speculation-off twin (the control); 0: neither
    report_samples: int = 32

    FLAGS: ClassVar[dict[str, Flag]] = {
        "stop_early": replace(PlanConfig.FLAGS["stop_early"], example=False),
        "looks": Flag("--looks", "interim looks per case, for early stopping", parse=int, example=2),
        "report_samples": Flag(
            "--report-samples",
            "samples per case drawn with probabilities requested, and from the twin (0: off)",
            parse=int,
            example=0,
        ),
    }

    def validate(self) -> None:
        super().validate()
        if not isinstance(self.looks, int) or not 1 <= self.looks <= 10:
            raise UsageError(f"looks: must be between 1 and 10, got {self.looks}")
        if not isinstance(self.report_samples, int) or self.report_samples < 0:
            raise UsageError(f"report_samples: must be an integer >= 0, got {self.report_samples}")
