"""``specproof e2e``: decode with a proposer and a rule on transformer targets, and judge it.

One report per (proposer, process, rule), :func:`run`'s; this module composes the checks, each
in a module of its own:

* **exact** (:mod:`.exact_law`) - the law of two consecutive steps on the 4-token target,
  enumerated (:func:`.exact.multi_step_check`) and compared with the target's own law of the
  same tokens: lossless iff TV < 1e-12 (float64 laws); its expected emitted tokens per step;
* **sampled** (:mod:`.sampled`) - the decoding loop (reference/decode.py: tree forward, KV
  cache, commit) for ``steps`` steps on the 16-token target: emitted tokens per target forward,
  the mean first-draft acceptance probability ``alpha`` seen along the way and, for token-level
  verification of a chain of K drafts, the closed form ``(1 - alpha^(K+1)) / (1 - alpha)`` that
  holds when acceptances are i.i.d. (Leviathan et al. 2023, eq. 1);
* **statistical** (``runs`` > 0, :mod:`.sampled`) - the 16-token target's law is too large to
  enumerate over several steps, so ``runs`` independent decodings are tested against the
  target's exact law of their first 3 tokens (:mod:`.sequences`, alpha 1e-6).

:func:`run` returns an :class:`E2EResult` (:mod:`.results`): ``verdict`` is ``lossy``
(:class:`~specproof.properties.verdicts.Verdict`) if any check flags it; otherwise ``pass`` when
the statistical check ran (it found no deviation at its alpha: the weaker of the two claims), and
``exact`` when the enumerated law is the only evidence (``runs=0``; equal to the target's up to
float64 rounding). ``summary()`` is what ``specproof e2e`` prints, ``to_json()`` what ``--json``
writes.

``engine="optimized"`` (``specproof e2e --engine optimized``): the same checks on the optimized
loop (:mod:`specproof.optimized.decode`, :func:`optimized_run`, :mod:`.coupling`); the exact law,
enumerated from the reference program, carries over to it through a coupling check on shared
tapes.

Three more reports (docs/self-drafting.md):

* **moved baseline** - a proposer that fine-tunes the target (Medusa-2) is verified by the
  fine-tuned model: the exact check is against that model, and the report adds how far it is
  from the original (exact TV of the M-token law on the 4-token target, KL per position on the
  16-token one). ``against="original"`` audits against the original target instead: flagged,
  with the message that the baseline moved (:func:`.mismatch.baseline_audit`);
* **mismatch** - ``mismatch`` stages a mismatched deployment (:func:`.mismatch.deployment`):
  another vocabulary or hidden size is refused before decoding; another target revision or the
  wrong feature layer stays lossless, and the report compares acceptance with the draft's own
  target (:func:`.mismatch.acceptance_finding`, :mod:`.mismatch_report`);
* **calibration** - :func:`calibration` (``specproof e2e --calibration``,
  :mod:`.calibration_report`): path confidence against acceptance, the drafter side by side with
  the same drafter at another temperature (:mod:`.draft_calibration`).

The acceptance table (``--table``) is :mod:`.table`'s, the ``--report`` writer :mod:`.report`'s;
this module re-exports their names and the results', so ``check`` stays the one entry point.
"""

from __future__ import annotations

from collections.abc import Callable

from specproof.properties.e2e import coupling, mismatch
from specproof.properties.e2e.calibration_report import (
    CALIBRATION_LENGTH,
    CALIBRATION_PROMPTS,
    CALIBRATION_STEPS,
    calibration,
    calibration_lines,
)
from specproof.properties.e2e.coupling import COUPLING_PROMPTS, COUPLING_STEPS
from specproof.properties.e2e.exact_law import exact_check
from specproof.properties.e2e.mismatch_report import MISMATCH_RUNS, MISMATCH_STEPS, mismatch_report
from specproof.properties.e2e.report import write_report
from specproof.properties.e2e.results import (
    Coupling,
    E2EResult,
    ExactCheck,
    MismatchReport,
    SampledCheck,
    describe_more,
)
from specproof.properties.e2e.sampled import (
    ALPHA,
    SAMPLED_PROMPT,
    STAT_HORIZON,
    closed_form,
    sampled_check,
    statistical_check,
)
from specproof.properties.e2e.table import markdown_table, table_rows
from specproof.reference.decode import e2e_models
from specproof.reference.errors import BadParameterError
from specproof.reference.proposers import Proposer
from specproof.reference.rules import RULES

__all__ = [
    "ALPHA",
    "CALIBRATION_LENGTH",
    "CALIBRATION_PROMPTS",
    "CALIBRATION_STEPS",
    "COUPLING_PROMPTS",
    "COUPLING_STEPS",
    "MISMATCH_RUNS",
    "MISMATCH_STEPS",
    "SAMPLED_PROMPT",
    "STAT_HORIZON",
    "Coupling",
    "E2EResult",
    "ExactCheck",
    "MismatchReport",
    "SampledCheck",
    "calibration",
    "calibration_lines",
    "closed_form",
    "describe_more",
    "markdown_table",
    "optimized_run",
    "run",
    "table_rows",
    "write_report",
]


def run(
    proposer: Proposer,
    rule: str,
    steps: int = 64,
    seed: int = 0,
    runs: int = 0,
    process_index: int = 0,
    progress: Callable[[str], None] | None = None,
    against: str = "verifier",
    mismatch_kind: str | None = None,
    engine: str = "reference",
) -> E2EResult:
    """Every check of one (proposer, process, rule); see the module doc. ``against``: the
    baseline, ``"verifier"`` (the model that verifies) or ``"original"`` (the target before any
    fine-tuning); ``mismatch_kind``: a mismatched deployment to stage (:data:`.mismatch.KINDS`).
    ``engine``: ``"optimized"`` runs the checks on the optimized loop (:func:`optimized_run`)."""
    if engine != "reference":
        if mismatch_kind is not None or against != "verifier":
            raise BadParameterError("engine", "the optimized loop runs the checks against the verifier only")
        return optimized_run(proposer, rule, steps, seed, runs, process_index, progress, engine)
    say = progress or _silent
    proc = proposer.processes[process_index]
    small, big = e2e_models()
    dep = mismatch.deployment(proposer, small, big, mismatch_kind)  # refuses vocab/width mismatches
    say(f"{proposer.name}/{rule}: exact 2-step law on the {small.vocab}-token target")
    exact, baseline = exact_check(proposer, proc, rule, small, dep, against, mismatch_kind)
    original = bool(baseline) and against == "original"  # the checks' baseline is the original
    say(f"{proposer.name}/{rule}: {steps} sampled steps on the {big.vocab}-token target")
    report = E2EResult(
        proposer=proposer.name,
        process=proc.name,
        rule=rule,
        declared_exact=proc.name in RULES[rule].exact_for,
        exact_check=exact,
        sampled=sampled_check(proposer, proc, rule, dep, steps, seed),
        against="original" if original else "verifier",
    )
    if runs > 0:
        say(f"{proposer.name}/{rule}: {runs} decoding runs against the target's {STAT_HORIZON}-token law")
        law_model = big if original else dep.big
        report.statistical = statistical_check(proposer, proc, rule, dep, law_model, runs, seed)
    if baseline is not None:
        report.baseline = baseline
        report.baseline_kl = mismatch.kl_per_position(big, dep.big)
    if mismatch_kind is not None:
        mean = exact.mean_emitted_per_step
        report.mismatch = mismatch_report(proposer, proc, rule, dep, mean, seed, progress)
    return report


def optimized_run(
    proposer: Proposer,
    rule: str,
    steps: int = 64,
    seed: int = 0,
    runs: int = 0,
    process_index: int = 0,
    progress: Callable[[str], None] | None = None,
    engine: str = "optimized",
) -> E2EResult:
    """:func:`run`'s checks on the optimized loop. The exact law of two steps is the reference
    program's, enumerated; it carries over to the optimized loop through the **coupling** check:
    fed the same random tapes as the reference loop (:data:`COUPLING_PROMPTS`, one request each,
    :data:`COUPLING_STEPS` steps, float64), the optimized loop must emit the same tokens at every
    step. The **sampled** and **statistical** checks run the optimized loop itself (the
    statistical runs as one batch of ``runs`` requests, each with its own seed); see
    :mod:`.coupling`."""
    coupling.require_kernel(rule, engine)
    report = run(proposer, rule, steps, seed, 0, process_index, progress)  # the exact check
    say = progress or _silent
    proc = proposer.processes[process_index]
    _, big = e2e_models()
    say(f"{proposer.name}/{rule}: optimized loop coupled to the reference loop")
    report.coupling = coupling.coupling_check(big, proposer, rule, proc, seed)
    say(f"{proposer.name}/{rule}: {steps} sampled steps of the optimized loop")
    coupling.resample_optimized(report.sampled, big, proposer, rule, proc, steps, seed)
    report.statistical = None
    report.engine = "optimized"
    if runs > 0:
        say(f"{proposer.name}/{rule}: {runs} optimized decodings (a batch) against the target's law")
        report.statistical = coupling.statistical_optimized(big, proposer, rule, proc, runs, seed)
    return report


def _silent(message: str) -> None:
    """No progress to show."""
