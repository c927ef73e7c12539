"""``specproof e2e --engine optimized``: the checks on the optimized loop (:mod:`specproof.optimized.decode`).

The exact law of two steps is the reference program's, enumerated; it carries over to the
optimized loop through the **coupling** check (:func:`coupling_check`): fed the same random tapes
as the reference loop (:data:`COUPLING_PROMPTS`, one request each, :data:`COUPLING_STEPS` steps,
float64), the optimized loop must emit the same tokens at every step. The **sampled**
(:func:`resample_optimized`) and **statistical** (:func:`statistical_optimized`, one batch of
``runs`` requests, each with its own seed) checks run the optimized loop itself.
:func:`require_kernel` refuses an engine or a rule the optimized loop does not have.

The optimized loop is imported when a check runs, not with this module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specproof.properties.audit.sequences import SequenceTest
from specproof.properties.e2e.results import Coupling, SampledCheck
from specproof.properties.e2e.sampled import (
    SAMPLED_PROMPT,
    STAT_HORIZON,
    against_target_law,
    iid_closed_form,
    mean_alpha,
)
from specproof.reference.errors import BadParameterError
from specproof.reference.processes import Process
from specproof.reference.proposers import Proposer
from specproof.reference.transformer import TinyTransformer

#: ``--engine optimized``: the coupling check's prompts and steps (shared tapes, float64)
COUPLING_PROMPTS = ((3, 4), (1, 2, 3, 1, 2), (5, 6, 7), (9, 9, 9, 9, 0, 1, 2))
COUPLING_STEPS = 8


def require_kernel(rule: str, engine: str) -> None:
    """Refuse an engine other than ``"optimized"`` and a rule without an optimized kernel."""
    from specproof.optimized.decode import KERNEL_RULES

    if engine != "optimized":
        raise BadParameterError("engine", f"'reference' or 'optimized', got {engine!r}")
    if rule not in KERNEL_RULES:
        kernels = ", ".join(KERNEL_RULES)
        raise BadParameterError("rule", f"{rule!r} has no optimized kernel; kernels: {kernels}")


def _tapes(seed: int, draft_width: int, nodes: int) -> list[tuple[Any, Any, Any]]:
    """One random tape per coupling prompt: draft, node and final uniforms for every step."""
    rng = np.random.default_rng(seed)
    return [
        (
            rng.random((COUPLING_STEPS, draft_width)),
            rng.random((COUPLING_STEPS, nodes)),
            rng.random(COUPLING_STEPS),
        )
        for _ in COUPLING_PROMPTS
    ]


def coupling_check(big: TinyTransformer, proposer: Proposer, rule: str, proc: Process, seed: int) -> Coupling:
    """The optimized loop (one request per coupling prompt, a batch) against the reference loop
    on the same tapes: the requests whose tokens or emitted counts differ at any step."""
    from specproof.optimized.decode import OptimizedDecoder, TapeUniforms, reference_decode_on_tape

    dec = OptimizedDecoder(big, proposer, rule, process=proc.name)
    tapes = _tapes(seed, dec.S, dec.N)
    for i, (p, t) in enumerate(zip(COUPLING_PROMPTS, tapes)):
        dec.admit(i, p, steps=COUPLING_STEPS, tape=TapeUniforms(*t))
    got = dec.run()
    diverged = []
    for i, (p, t) in enumerate(zip(COUPLING_PROMPTS, tapes)):
        ref = reference_decode_on_tape(
            big, proposer, rule, p, TapeUniforms(*t), COUPLING_STEPS, process=proc.name
        )
        if (ref.tokens, ref.emitted_per_step) != (got[i].tokens, got[i].emitted_per_step):
            diverged.append(i)
    return Coupling(requests=len(COUPLING_PROMPTS), steps=COUPLING_STEPS, dtype="float64", diverged=diverged)


def resample_optimized(
    sa: SampledCheck,
    big: TinyTransformer,
    proposer: Proposer,
    rule: str,
    proc: Process,
    steps: int,
    seed: int,
) -> None:
    """Replace the rates of ``sa`` (the reference loop's) with ``steps`` steps of the optimized
    loop after :data:`.sampled.SAMPLED_PROMPT`, seeded ``seed``."""
    from specproof.optimized.decode import OptimizedDecoder

    dec = OptimizedDecoder(big, proposer, rule, process=proc.name)
    dec.admit(0, SAMPLED_PROMPT, steps=steps, seed=seed)
    out = dec.run()[0]
    alpha = mean_alpha(out.overlaps)
    sa.steps, sa.emitted = out.target_forwards, sum(out.emitted_per_step)
    sa.mean_emitted_per_target_forward, sa.alpha = out.mean_emitted, alpha
    sa.closed_form_iid = iid_closed_form(proposer, proc, rule, alpha)
    sa.engine = "optimized"


def statistical_optimized(
    big: TinyTransformer, proposer: Proposer, rule: str, proc: Process, runs: int, seed: int
) -> SequenceTest:
    """``runs`` requests of the optimized loop in one batch (request r seeded
    ``seed * 1_000_003 + r``) against the verifying target's law of their first tokens."""
    from specproof.optimized.decode import OptimizedDecoder, verifying_target

    dec = OptimizedDecoder(big, proposer, rule, process=proc.name)
    for r in range(runs):
        dec.admit(r, SAMPLED_PROMPT, max_new_tokens=STAT_HORIZON, seed=seed * 1_000_003 + r)
    done = dec.run()

    def one(r: int) -> tuple[int, ...]:
        return tuple(done[r].tokens[len(SAMPLED_PROMPT) :])

    return against_target_law(one, rule, verifying_target(proposer, big, True), runs)
