"""The exact oracle: the law of one speculative step, by enumeration.

One step = a proposal process drafting a tree from the draft model, then a rule verifying it
against the target. :func:`check` enumerates both (every draft draw and every rule draw with
nonzero probability), completes each emitted sequence with target samples to the horizon
``M = shape depth + 1``, and compares that length-M law with the target's own M-token law
(proofs_notes/lossless_criterion.md). With Fraction models every probability is rational and the total
variation distance is exact: ``tv == 0`` proves the rule lossless on the instance; ``tv > 0``
comes with the most deviating cells as a witness.

For a rule that preserves greedy decoding (``Rule.preserves == "greedy"``) the reference law is
the point mass on the target's greedy continuation and the completion is greedy too.

Proof of the criterion: proofs_notes/lossless_criterion.md. Checked by tests/test_exact.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from specproof.properties.verdicts import Verdict
from specproof.reference.choices import enumerate_law
from specproof.reference.errors import UsageError
from specproof.reference.laws import tv_distance
from specproof.reference.models import LM, MixLM, ToyLM, greedy_sequence, sequence_law
from specproof.reference.processes import PROCESSES, Process, node_contexts
from specproof.reference.rules import RULES, Rule
from specproof.reference.step import Step, make_step
from specproof.reference.tree import DraftTree

Seq = tuple[int, ...]


class _Shaped:
    """The draft-tree shape an oracle check grows its proposals from, and its horizon."""

    shape: tuple[int, ...]

    @functools.cached_property
    def tree(self) -> DraftTree:
        return DraftTree(self.shape, "shape")

    @property
    def horizon(self) -> int:
        return self.tree.max_depth + 1


@dataclass(frozen=True)
class Instance(_Shaped):
    """Everything that defines one oracle check, in plain values (printable, shrinkable).

    The target is ``ToyLM(vocab, target_seed, target_styles)``; the draft mixes the target with
    ``ToyLM(vocab, draft_seed, draft_styles)`` at ``overlap`` (1: q == p, 0: unrelated).
    ``shape`` gives the tree's parents (each node's number of children); ``prefix`` ends with
    the last committed token.
    """

    vocab: int
    shape: tuple[int, ...]
    target_seed: int = 0
    target_styles: tuple[str, ...] = ("random",)
    draft_seed: int = 1
    draft_styles: tuple[str, ...] = ("random",)
    overlap: Fraction = Fraction(1, 2)
    prefix: tuple[int, ...] = (0,)
    exact: bool = True

    @functools.cached_property
    def target(self) -> ToyLM:
        return ToyLM(self.vocab, self.target_seed, self.target_styles, self.exact)

    @functools.cached_property
    def draft(self) -> LM:
        other = ToyLM(self.vocab, self.draft_seed, self.draft_styles, self.exact)
        return MixLM(self.target, other, self.overlap if self.exact else float(self.overlap))

    def describe(self) -> str:
        return (
            f"Instance(vocab={self.vocab}, shape={self.shape}, target_seed={self.target_seed}, "
            f"target_styles={self.target_styles}, draft_seed={self.draft_seed}, "
            f"draft_styles={self.draft_styles}, overlap={self.overlap}, prefix={self.prefix})"
        )


@dataclass(frozen=True)
class ModelInstance(_Shaped):
    """An oracle check on given models (a transformer target and draft model, say) instead of
    the seeded toy models of :class:`Instance`. Float models: the TV is exact up to float64
    rounding (lossless means TV below 1e-12, not 0)."""

    target: LM
    draft: LM
    shape: tuple[int, ...]
    prefix: tuple[int, ...]
    name: str = "models"

    def describe(self) -> str:
        return f"ModelInstance({self.name}, shape={self.shape}, prefix={self.prefix})"


@dataclass
class OracleResult:
    """The exact comparison of one step's completed law with the reference law.

    ``verdict``: :attr:`Verdict.EXACT <specproof.properties.verdicts.Verdict.EXACT>` when the TV
    is exactly 0 (proven on this instance), :attr:`~specproof.properties.verdicts.Verdict.LOSSY`
    otherwise; ``summary()`` says so with the worst cells, ``to_json()`` as plain values."""

    rule: str
    process: str
    instance: Instance | ModelInstance
    tv: Any
    horizon: int
    expected_emitted: Any
    law: dict[Seq, Any] = field(repr=False)
    reference: dict[Seq, Any] = field(repr=False)

    @property
    def lossless(self) -> bool:
        return self.tv == 0

    @property
    def verdict(self) -> Verdict:
        return Verdict.EXACT if self.lossless else Verdict.LOSSY

    def witness(self, k: int = 3) -> list[tuple[Seq, Any, Any]]:
        """The ``k`` cells where the step's law and the reference law differ most."""
        keys = set(self.law) | set(self.reference)
        diffs = [(s, self.law.get(s, 0), self.reference.get(s, 0)) for s in keys]
        diffs = [d for d in diffs if d[1] != d[2]]
        diffs.sort(key=lambda d: (-abs(d[1] - d[2]), d[0]))
        return diffs[:k]

    def summary(self) -> str:
        """A message a person can act on: verdict, TV, the instance and the worst cells."""
        head = f"rule {self.rule!r} with process {self.process!r}: " + (
            "lossless (TV = 0 exactly)" if self.lossless else f"LOSSY, TV = {self.tv} (~{float(self.tv):.4g})"
        )
        lines = [head, f"  on {self.instance.describe()}, horizon M = {self.horizon}"]
        for seq, got, want in self.witness():
            lines.append(
                f"  P(next {self.horizon} tokens = {seq}) = {got} with the rule, {want} for the target"
            )
        return "\n".join(lines)

    def explain(self) -> str:
        """:meth:`summary` (its earlier name)."""
        return self.summary()

    def to_json(self) -> dict[str, Any]:
        """The verdict, the TV (float, and exact as a string), the instance and the worst cells;
        the two laws themselves are left out (``V^M`` entries)."""
        return {
            "verdict": self.verdict.value,
            "rule": self.rule,
            "process": self.process,
            "instance": self.instance.describe(),
            "horizon": self.horizon,
            "tv": float(self.tv),
            "tv_exact": str(self.tv),
            "expected_emitted": float(self.expected_emitted),
            "expected_emitted_exact": str(self.expected_emitted),
            "witness": [
                {"tokens": list(seq), "rule": str(got), "target": str(want)}
                for seq, got, want in self.witness()
            ],
        }


def max_drafts(vocab: int, max_cells: int) -> int:
    """The most draft nodes a tree may have so that ``vocab ** (drafts + 1) <= max_cells``: a
    bound on both the proposals and the horizon-M cells the oracle enumerates."""
    drafts = 0
    while vocab ** (drafts + 1) <= max_cells:
        drafts += 1
    return drafts


def step_inputs(process: Process, instance: Instance | ModelInstance, proposal: Any) -> Step:
    """The verifier's validated inputs for one proposal of ``process`` on ``instance``."""
    contexts = node_contexts(instance.prefix, proposal)
    return make_step(
        proposal.parents,
        proposal.tokens,
        process.draft_probs(instance.prefix, proposal, instance.draft),
        [instance.target.law(c) for c in contexts],
    )


def emitted_law(rule: Rule, process: Process, instance: Instance | ModelInstance) -> dict[Seq, Any]:
    """The exact law of the tokens one step emits (proposal and verification enumerated)."""
    proposals = enumerate_law(process.propose, instance.tree, instance.prefix, instance.draft)
    out: dict[Seq, Any] = {}
    for proposal, w in proposals.items():
        step = step_inputs(process, instance, proposal)
        for outcome, pr in enumerate_law(rule.bound, step).items():
            e = outcome.emitted(step)
            out[e] = out.get(e, 0) + w * pr
    return out


def complete(law: dict[Seq, Any], target: LM, prefix: Seq, m: int, greedy: bool = False) -> dict[Seq, Any]:
    """Continue every emitted sequence with target samples (or greedy tokens) up to length m."""
    out: dict[Seq, Any] = {}
    for e, w in law.items():
        if len(e) > m:
            raise UsageError(f"emitted {e} is longer than the horizon {m}")
        if greedy:
            rest = {greedy_sequence(target, prefix + e, m - len(e)): 1}
        else:
            rest = sequence_law(target, prefix + e, m - len(e))
        for r, pr in rest.items():
            out[e + r] = out.get(e + r, 0) + w * pr
    return out


def reference_law(target: LM, prefix: Seq, m: int, greedy: bool = False) -> dict[Seq, Any]:
    """The target's own law of its next m tokens (a point mass for greedy decoding)."""
    if greedy:
        return {greedy_sequence(target, prefix, m): 1}
    return sequence_law(target, prefix, m)


def check(rule: Rule | str, process: Process | str, instance: Instance | ModelInstance) -> OracleResult:
    """Exact law of one step of ``rule`` under ``process`` on ``instance``, vs the target's."""
    rule = RULES[rule] if isinstance(rule, str) else rule
    process = PROCESSES[process] if isinstance(process, str) else process
    if not rule.applies_to(instance.tree.is_chain):
        raise UsageError(f"rule {rule.name!r} takes chains only; instance shape {instance.shape} branches")
    greedy = rule.preserves == "greedy"
    m = instance.horizon
    emitted = emitted_law(rule, process, instance)
    law = complete(emitted, instance.target, instance.prefix, m, greedy)
    ref = reference_law(instance.target, instance.prefix, m, greedy)
    return OracleResult(
        rule=rule.name,
        process=process.name,
        instance=instance,
        tv=tv_distance(law, ref),
        horizon=m,
        expected_emitted=sum(w * len(e) for e, w in emitted.items()),
        law=law,
        reference=ref,
    )


def step_length_law(rule: Rule | str, step: Step) -> dict[int, Any]:
    """Exact law of the number of tokens one step emits on fixed inputs."""
    rule = RULES[rule] if isinstance(rule, str) else rule
    out: dict[int, Any] = {}
    for outcome, pr in enumerate_law(rule.bound, step).items():
        n = len(outcome.accepted)
        out[n] = out.get(n, 0) + pr
    return out


def step_emitted_law(rule: Rule | str, step: Step) -> dict[Seq, Any]:
    """Exact law of the emitted tokens of one step on fixed inputs (drafts given)."""
    rule = RULES[rule] if isinstance(rule, str) else rule
    out: dict[Seq, Any] = {}
    for outcome, pr in enumerate_law(rule.bound, step).items():
        e = outcome.emitted(step)
        out[e] = out.get(e, 0) + pr
    return out


def expected_length(law: dict[int, Any]) -> Any:
    return sum(n * p for n, p in law.items())


def multi_step_check(
    rule: Rule | str,
    process: Process | str,
    target: LM,
    draft: LM | Callable[[Seq], LM],
    shape: tuple[int, ...],
    prefix: Seq,
    steps: int,
) -> tuple[Any, Any]:
    """Exact law of ``steps`` speculative steps in a row (each step's proposal and verification
    enumerated after the context the previous steps produced), completed with target samples to
    the horizon ``steps * (depth + 1)``, against the target's own law of that many tokens.
    Returns ``(tv, expected emitted tokens per step)``. A lossless step composed with itself is
    lossless (proofs_notes/lossless_criterion.md); this checks the composition directly.
    ``draft`` is a draft model, or a drafter giving each step's draft model from the step's
    committed prefix (the self-drafting proposers)."""
    from specproof.reference.proposers.selfdraft import as_drafter

    drafter = as_drafter(draft)
    rule = RULES[rule] if isinstance(rule, str) else rule
    process = PROCESSES[process] if isinstance(process, str) else process
    if steps < 1:
        raise UsageError(f"steps: must be >= 1, got {steps}")
    greedy = rule.preserves == "greedy"
    states: dict[Seq, Any] = {(): 1}
    for _ in range(steps):
        nxt: dict[Seq, Any] = {}
        for emitted, w in states.items():
            inst = ModelInstance(target, drafter(prefix + emitted), shape, prefix + emitted)
            for e, pr in emitted_law(rule, process, inst).items():
                nxt[emitted + e] = nxt.get(emitted + e, 0) + w * pr
        states = nxt
    m = steps * (DraftTree(shape, "shape").max_depth + 1)
    law = complete(states, target, prefix, m, greedy)
    ref = reference_law(target, prefix, m, greedy)
    mean = sum(w * len(e) for e, w in states.items()) / steps
    return tv_distance(law, ref), mean
