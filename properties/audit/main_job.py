"""The main job: every built-in verifier audited against what it declares, under fixed plans.

Each backend (the reference rules, the correct alternatives, the mutant corpus; the optimized
kernels where CUDA runs them) is audited under the fixed plan of its speed class
(:data:`MAIN_JOB_PLANS`), so the job's verdicts are the same on every machine: a backend gets
its declared verdict (``pass``, ``lossy`` or ``contract_violation``) or the job disagrees.
``specproof audit`` with no kind runs it; :func:`run_main_job` is the same from Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from specproof.properties.audit.config import MAIN_JOB_GUARD
from specproof.properties.audit.results import AuditResult
from specproof.properties.audit.stages import AuditConfig, ProgressFn, audit
from specproof.properties.conformance.backends import Backend, all_backends
from specproof.properties.plan import Budget
from specproof.properties.verdicts import Verdict

#: The main job's fixed plan per speed class of backend (``Backend.speed``): the TV planned on
#: small vocabularies and on the memory-bound ones. Chosen so that every declared verdict is
#: reached and the whole job fits in about 3 minutes on 2 cores; stated in README.
MAIN_JOB_PLANS: dict[str, dict[str, float]] = {
    # no probe at V = 2**24 + 2 in the main job (seconds per call for a dense verifier; every
    # single audit runs it); the V = 262,144 probes run for every backend
    "batched": {"tv": 0.03, "large_vocab_tv": 0.5, "wide_probe": 0},
    # one row at a time in Python: a coarser TV; a backend expected lossy runs to its first
    # rejection, planned finer so that the rejection is reached
    # memory-bound cases smoke-only (a row of V = 152,064 costs the Python loop 10 ms; their ids
    # are checked by the smoke stage and the V = 262,144 probes)
    "python": {"tv": 0.4, "large_vocab_tv": -1, "wide_probe": 0, "lossy_tv": 0.25},
    # the interpreter walks every id of a row: no id-range probes (a GPU run has them)
    "interpreted": {"tv": 0.5, "large_vocab_tv": 0.5, "batch": 64, "probes": 0},
}
#: why the optimized kernels are not in the job on a machine without CUDA
NO_CUDA_NOTE = (
    "optimized.* not in the main job without CUDA: run `specproof audit --group optimized` "
    "to audit them under the Triton interpreter; the coupling tests hold them to the reference"
)


def main_job_backends(groups: list[str] | None = None) -> tuple[list[Backend], str]:
    """The job's backends (``groups`` to choose; by default every group but third-party ones,
    and the optimized kernels only where CUDA runs them), and a note on what was left out."""
    backends = [b for b in all_backends() if groups is None or b.group in groups]
    if groups is not None:
        return backends, ""
    backends = [b for b in backends if b.group != "thirdparty"]
    if torch.cuda.is_available():
        return backends, ""
    # Triton's CPU interpreter runs tens of rows per second: no power in this job. The kernels
    # are held to the reference sample for sample instead (tests/test_optimized_coupled.py).
    return [b for b in backends if b.group != "optimized"], NO_CUDA_NOTE


def main_job_config(
    backend: Backend, base: AuditConfig, tv: float | None = None, large_vocab_tv: float | None = None
) -> AuditConfig:
    """The job's plan for one backend: its speed class's TVs (unless ``tv`` or ``large_vocab_tv``
    is given), stop at the first rejection, no shrinking (the job checks verdicts; a single
    audit shrinks)."""
    plan = MAIN_JOB_PLANS[backend.speed]
    planned_tv = plan["lossy_tv"] if backend.expect == "lossy" and "lossy_tv" in plan else plan["tv"]
    large = plan["large_vocab_tv"]
    return replace(
        base,
        tv=planned_tv if tv is None else tv,
        large_vocab_tv=(None if large < 0 else large) if large_vocab_tv is None else large_vocab_tv,
        batch=int(plan.get("batch", base.batch)),
        probes=bool(plan.get("probes", base.probes)),
        wide_probe=bool(plan.get("wide_probe", base.wide_probe)),
        stop_early=True,
        shrink=0,
    )


@dataclass
class MainJobResult:
    """Every backend's audit, in order; the job agrees when each got its declared verdict."""

    backends: list[Backend]
    results: list[AuditResult] = field(default_factory=list)
    configs: list[AuditConfig] = field(default_factory=list)
    note: str = ""  # what was left out and why
    seconds: float = 0.0

    @property
    def interrupted(self) -> bool:
        return any(r.verdict == Verdict.INTERRUPTED for r in self.results)

    @property
    def disagreeing(self) -> list[AuditResult]:
        return [r for r in self.results if r.verdict != r.expected]

    @property
    def verdict(self) -> str:
        """``agrees``, ``disagrees`` or ``interrupted``."""
        if self.interrupted:
            return "interrupted"
        complete = len(self.results) == len(self.backends)
        return "agrees" if complete and not self.disagreeing else "disagrees"

    @property
    def exit_code(self) -> int:
        return {"agrees": 0, "disagrees": 1}.get(self.verdict, Verdict.INTERRUPTED.exit_code)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "plans": MAIN_JOB_PLANS,
            "backends": [r.to_json() for r in self.results],
            "seconds": self.seconds,
        }


def run_main_job(
    base: AuditConfig | None = None,
    backends: list[Backend] | None = None,
    groups: list[str] | None = None,
    tv: float | None = None,
    large_vocab_tv: float | None = None,
    progress: Callable[[int, Backend], ProgressFn | None] | None = None,
    on_result: Callable[[AuditResult, AuditConfig], None] | None = None,
) -> MainJobResult:
    """Audit every backend of the job (module docstring; ``backends`` instead of the job's own,
    or only those of ``groups``) under ``base`` (its budget is the guard per backend;
    :data:`MAIN_JOB_GUARD` by default). ``progress(i, backend)`` gives an audit's
    progress callback; ``on_result`` sees each result as it comes. Ctrl-C ends the job with
    what ran (verdict ``interrupted``)."""
    base = base or AuditConfig(budget_seconds=MAIN_JOB_GUARD)
    note = ""
    if backends is None:
        backends, note = main_job_backends(groups)
    job = MainJobResult(backends, note=note)
    clock = Budget(float("inf"))
    for i, b in enumerate(backends):
        config = main_job_config(b, base, tv, large_vocab_tv)
        r = audit(b, config, progress(i, b) if progress else None)
        r.expected, r.target = b.expect, b.name
        job.results.append(r)
        job.configs.append(config)
        if on_result is not None:
            on_result(r, config)
        if r.verdict == Verdict.INTERRUPTED:
            break
    job.seconds = clock.elapsed()
    return job
