"""The verifier audit's plan (:class:`AuditConfig`), apart from the audit so that reading its
defaults (the command line's help) imports nothing heavy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specproof.properties.plan import PlanConfig, check_probability
from specproof.reference.errors import UsageError

if TYPE_CHECKING:
    from specproof.properties.audit.battery import Case

#: cases with a larger vocabulary are memory-bound: planned for ``large_vocab_tv``
LARGE_VOCAB = 4096
#: the main job's guard, in seconds per backend (only a guard: a backend past it is underpowered)
MAIN_JOB_GUARD = 120.0


@dataclass
class AuditConfig(PlanConfig):
    """The verifier audit's plan: :class:`~specproof.properties.plan.PlanConfig`'s fields with
    this audit's defaults (alpha 1e-6, TV 0.01, a 900 s guard, 128 cells), and its own."""

    alpha: float = 1e-6
    tv: float = 0.01
    budget_seconds: float = 900.0
    max_cells: int = 128
    #: the TV planned for the memory-bound cases (V > LARGE_VOCAB); None: they get the smoke
    #: stage only (contract, zero mass), no samples and no power claimed for them
    large_vocab_tv: float | None = 0.2
    batch: int = 8192  # rows per verifier call (fewer where the rows are large)
    max_batch_bytes: int = 96 * 2**20
    cases: list[Case] | None = None  # instead of the default battery
    probes: bool = True  # the id-range probes of the smoke stage
    wide_probe: bool = True  # also the probe at V = 2**24 + 2 (float32 round trips of ids)
    shrink: int = 16  # after a lossy verdict, at most this many smaller candidate cases (0: off)
    shrink_seconds: float = 120.0  # a guard on shrinking
    call_timeout: float = 120.0  # seconds before a call counts as a hang (raised for slow verifiers)
    smoke_rows: int = 4

    def validate(self) -> None:
        super().validate()
        if self.large_vocab_tv is not None:
            check_probability(self.large_vocab_tv, "large_vocab_tv")
        if self.batch < 2:
            raise UsageError(f"batch: must be at least 2, got {self.batch}")
        if not self.call_timeout > 0:
            raise UsageError(f"call_timeout: must be positive, got {self.call_timeout}")
        if self.shrink < 0:
            raise UsageError(f"shrink: must be >= 0, got {self.shrink}")

    def case_tv(self, case: Case) -> float:
        if case.vocab <= LARGE_VOCAB:
            return self.tv
        return 1.0 if self.large_vocab_tv is None else max(self.tv, self.large_vocab_tv)

    def smoke_only(self, case: Case) -> bool:
        return case.vocab > LARGE_VOCAB and self.large_vocab_tv is None

    def to_json(self) -> dict[str, Any]:
        out = self.plan_json()
        out.update(
            large_vocab_tv=self.large_vocab_tv,
            batch=self.batch,
            probes=self.probes,
            wide_probe=self.wide_probe,
            shrink=self.shrink,
        )
        return out
