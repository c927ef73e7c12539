"""The sampled and statistical checks of ``specproof e2e`` on the 16-token target.

* :func:`sampled_check` - the reference decoding loop (reference/decode.py: tree forward, KV
  cache, commit) for ``steps`` steps after :data:`SAMPLED_PROMPT`: emitted tokens per target
  forward, the mean first-draft acceptance probability ``alpha`` seen along the way and, for
  token-level verification of a chain of K drafts, :func:`closed_form` - the expected tokens per
  step when acceptances are i.i.d. (Leviathan et al. 2023, eq. 1);
* :func:`statistical_check` - ``runs`` independent decodings tested against the target's exact
  law of their first :data:`STAT_HORIZON` tokens (:mod:`.sequences`, alpha :data:`ALPHA`);
  :func:`against_target_law` is the test itself, shared with the optimized loop's
  (:mod:`.coupling`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from specproof.properties.audit.sequences import SequenceTest, check_runs
from specproof.properties.e2e import mismatch
from specproof.properties.e2e.exact_law import drafts_per_step
from specproof.properties.e2e.results import SampledCheck
from specproof.reference.decode import Decoded, decode
from specproof.reference.processes import Process
from specproof.reference.proposers import Proposer
from specproof.reference.rules import RULES
from specproof.reference.transformer import TinyTransformer, TransformerLM
from specproof.reference.tree import DraftTree

SAMPLED_PROMPT = (3, 4)
STAT_HORIZON = 3
ALPHA = 1e-6


def closed_form(alpha: float, k: int) -> float:
    """Expected tokens per step of a K-draft chain with i.i.d. acceptance probability alpha."""
    return float(k + 1) if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def mean_alpha(overlaps: Sequence[float]) -> float:
    """The mean first-draft acceptance probability of a run (0 when it drafted nothing)."""
    return float(np.mean(overlaps)) if overlaps else 0.0


def iid_closed_form(proposer: Proposer, proc: Process, rule: str, alpha: float) -> float | None:
    """:func:`closed_form` for token-level verification of a chain of drafts; ``None`` otherwise."""
    shape = DraftTree(proposer.shape, "shape")
    chain_k = shape.n - 1 if shape.is_chain and proc.chain else None
    return closed_form(alpha, chain_k) if chain_k and rule == "token" else None


def _decode(
    proposer: Proposer,
    proc: Process,
    rule: str,
    dep: mismatch.Deployment,
    steps: int,
    rng: np.random.Generator,
    until: int | None = None,
) -> Decoded:
    """``steps`` steps of the reference loop after :data:`SAMPLED_PROMPT` (stopping at ``until``
    tokens when given): ``dep``'s drafter verified by its 16-token model."""
    args = (dep.big, dep.big_drafter, proc, rule, proposer.shape, SAMPLED_PROMPT, steps, rng)
    return decode(*args, until=until)


def sampled_check(
    proposer: Proposer, proc: Process, rule: str, dep: mismatch.Deployment, steps: int, seed: int
) -> SampledCheck:
    """``steps`` steps of the reference loop: ``dep``'s drafter verified by its 16-token model."""
    out = _decode(proposer, proc, rule, dep, steps, np.random.default_rng(seed))
    alpha = mean_alpha(out.overlaps)
    return SampledCheck(
        vocab=dep.big.vocab,
        drafts_per_step=drafts_per_step(proc, proposer.shape),
        steps=out.target_forwards,
        emitted=sum(out.emitted_per_step),
        mean_emitted_per_target_forward=out.mean_emitted,
        alpha=alpha,
        closed_form_iid=iid_closed_form(proposer, proc, rule, alpha),
    )


def against_target_law(
    one: Callable[[int], tuple[int, ...]], rule: str, model: TinyTransformer, runs: int
) -> SequenceTest:
    """``runs`` decodings (``one(r)``: run r's emitted tokens) against ``model``'s law of their
    first :data:`STAT_HORIZON` tokens: its greedy law for a rule that preserves greedy decoding."""
    greedy = RULES[rule].preserves == "greedy"
    target = TransformerLM(model, 0.0 if greedy else 1.0)
    return check_runs(one, target, SAMPLED_PROMPT, STAT_HORIZON, runs, ALPHA, greedy=greedy)


def statistical_check(
    proposer: Proposer,
    proc: Process,
    rule: str,
    dep: mismatch.Deployment,
    law_model: TinyTransformer,
    runs: int,
    seed: int,
) -> SequenceTest:
    """``runs`` decodings of the reference loop (run r seeded ``[seed, r]``) against the law of
    ``law_model`` (the verifier, or the original target of a moved baseline)."""

    def one(r: int) -> tuple[int, ...]:
        o = _decode(proposer, proc, rule, dep, STAT_HORIZON, np.random.default_rng([seed, r]), STAT_HORIZON)
        return tuple(o.tokens[len(SAMPLED_PROMPT) :])

    return against_target_law(one, rule, law_model, runs)
