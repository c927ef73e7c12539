"""``specproof e2e --mismatch``: a staged mismatched deployment against the draft weights' own target.

:func:`mismatch_report` compares acceptance of the deployment (:func:`.mismatch.deployment`)
with the draft weights verified by their own target: exact on the 4-token target (expected
accepted drafts per step), sampled on the 16-token one (:data:`MISMATCH_RUNS` prompts of the
target's own text, :data:`MISMATCH_STEPS` steps each) and, when the target is the same, the
draft laws themselves (:func:`.mismatch.compare_draft_laws`).
"""

from __future__ import annotations

from collections.abc import Callable

from specproof.properties.e2e import mismatch
from specproof.properties.e2e.results import MismatchReport
from specproof.properties.oracle.exact import multi_step_check
from specproof.reference.decode import EXACT_PREFIX, e2e_models
from specproof.reference.processes import Process
from specproof.reference.proposers import Proposer
from specproof.reference.transformer import TransformerLM

#: the sampled acceptance comparison of ``--mismatch``: prompts (independent runs), steps each
MISMATCH_RUNS, MISMATCH_STEPS = 16, 16


def mismatch_report(
    proposer: Proposer,
    proc: Process,
    rule: str,
    dep: mismatch.Deployment,
    exact_mean: float,
    seed: int,
    progress: Callable[[str], None] | None,
) -> MismatchReport:
    """Acceptance of the mismatched deployment against the draft weights with their own target:
    exact on the 4-token target (expected accepted drafts per step), sampled on the 16-token one
    (:data:`MISMATCH_RUNS` prompts of the target's own text, :data:`MISMATCH_STEPS` steps each)."""
    small, big = e2e_models()
    _, own_mean = multi_step_check(
        rule,
        proc,
        TransformerLM(proposer.verifying_target(small)),
        proposer.make_drafter(small),
        proposer.exact_shape,
        EXACT_PREFIX,
        2,
    )
    exact = mismatch.acceptance_finding(
        mismatch.Acceptance("own target, 4-token", float(own_mean) - 1),
        mismatch.Acceptance(f"{dep.kind} mismatch, 4-token", float(exact_mean) - 1),
    )
    if progress:
        progress(f"{proposer.name}/{rule}: acceptance with its own target and mismatched ({dep.kind})")
    prompts = mismatch.prompts_from(big, MISMATCH_RUNS, 4, seed)
    args = (proc, rule, proposer.shape, prompts, MISMATCH_STEPS, seed)
    own = mismatch.measure_acceptance(
        "own target", proposer.verifying_target(big), proposer.make_drafter(big), *args
    )
    deployed = mismatch.measure_acceptance(f"{dep.kind} mismatch", dep.big, dep.big_drafter, *args)
    sampled = mismatch.acceptance_finding(own, deployed)
    laws = None
    if dep.big is proposer.verifying_target(big):  # same target: the draft laws must be the same
        contexts = [p[:n] for p in prompts for n in range(2, len(p) + 1)]
        laws = mismatch.compare_draft_laws(proposer.make_drafter(big), dep.big_drafter, contexts)
    return MismatchReport(
        kind=str(dep.kind), deployment=dep.doc, exact=exact, sampled=sampled, draft_laws=laws
    )
