"""The exact check of ``specproof e2e``: the law of two consecutive steps on the 4-token target.

:func:`exact_check` enumerates the joint law of the tokens two decoding steps emit
(:func:`specproof.properties.oracle.exact.multi_step_check`) and compares it with the verifying
target's own law of the same tokens (lossless iff TV < 1e-12, float64 laws). When the verifying
model is not the target (a proposer that fine-tunes it, Medusa-2), the comparison is the moved
baseline's (:func:`.mismatch.baseline_audit`): against the verifier, or against the original
target with ``against="original"``. :func:`drafts_per_step` is the draft count both the exact
and the sampled reports give.
"""

from __future__ import annotations

from specproof.properties.e2e import mismatch
from specproof.properties.e2e.mismatch import BaselineFinding
from specproof.properties.e2e.results import ExactCheck
from specproof.properties.oracle.exact import multi_step_check
from specproof.reference.decode import EXACT_PREFIX
from specproof.reference.dynamic_tree import DynamicTree
from specproof.reference.processes import Process
from specproof.reference.proposers import Proposer
from specproof.reference.transformer import TinyTransformer, TransformerLM
from specproof.reference.tree import DraftTree

#: the steps whose joint law is enumerated
EXACT_STEPS = 2


def drafts_per_step(proc: Process, shape: tuple[int, ...]) -> int:
    """Draft nodes per step: the shape's, or the dynamic tree's budget N (at most)."""
    return proc.nodes if isinstance(proc, DynamicTree) else len(shape) - 1


def exact_check(
    proposer: Proposer,
    proc: Process,
    rule: str,
    small: TinyTransformer,
    dep: mismatch.Deployment,
    against: str,
    mismatch_kind: str | None,
) -> tuple[ExactCheck, BaselineFinding | None]:
    """The exact check of ``dep`` on the 4-token target ``small``, and the moved baseline's
    finding when the verifying model is not ``small`` (``None`` otherwise, and for a staged
    mismatch). ``against``: ``"verifier"`` or ``"original"`` (the baseline of the TV)."""
    baseline = None
    if dep.small is not small and mismatch_kind is None:  # the verifying model is not the target
        baseline = mismatch.baseline_audit(
            rule,
            proc,
            TransformerLM(dep.small),
            TransformerLM(small),
            dep.small_drafter,
            proposer.exact_shape,
            EXACT_PREFIX,
            EXACT_STEPS,
        )
        tv = baseline.tv_to_reference if against == "original" else baseline.tv_to_verifier
        exact_mean = baseline.mean_emitted
    else:
        tv, exact_mean = multi_step_check(
            rule,
            proc,
            TransformerLM(dep.small),
            dep.small_drafter,
            proposer.exact_shape,
            EXACT_PREFIX,
            EXACT_STEPS,
        )
    check = ExactCheck(
        vocab=small.vocab,
        steps=EXACT_STEPS,
        depth=DraftTree(proposer.exact_shape, "shape").max_depth,
        drafts=drafts_per_step(proc, proposer.exact_shape),
        tv=float(tv),
        mean_emitted_per_step=float(exact_mean),
    )
    return check, baseline
