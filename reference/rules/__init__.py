"""Every verification rule, and what each claims.

A rule is a function ``rule(ch, step, **params) -> Outcome`` (one module each, in the papers'
notation). :data:`RULES` maps a configured rule's name to a :class:`Rule`: the function, its
parameters, the proposal processes it claims to be exact for, and what it preserves ("target":
the target's sampling law; "greedy": greedy decoding of the target).

The proposal processes are named in :mod:`specproof.reference.processes`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ..choices import Choices
from ..step import Outcome, Step
from .block import block
from .greedy import greedy
from .mss import mss
from .rrs import rrs
from .strict import strict
from .target_only import target_only
from .token import token
from .traversal import traversal
from .typical import typical

CHAINS = frozenset({"iid_chain", "onehot_chain"})
#: Trees that are a deterministic function of the context, passed as one-hot drafts: the
#: k most likely tokens per node, and EAGLE-2's dynamic tree (:mod:`..dynamic_tree`). A rule
#: exact for one is exact for the other (proofs_notes/processes.md, "deterministic trees").
DETERMINISTIC_TREES = frozenset({"onehot_siblings", "dynamic_tree"})
ALL_PROCESSES = CHAINS | DETERMINISTIC_TREES | {"iid_siblings", "wor_siblings", "topk_siblings"}


@dataclass(frozen=True)
class Rule:
    """A configured verification rule and its claims."""

    name: str
    fn: Callable[..., Outcome]
    exact_for: frozenset[str]
    preserves: str = "target"
    chain_only: bool = False
    params: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""

    def __call__(self, ch: Choices, step: Step) -> Outcome:
        return self.fn(ch, step, **self.params)

    def applies_to(self, is_chain: bool) -> bool:
        return is_chain or not self.chain_only

    @property
    def bound(self) -> Callable[[Choices, Step], Outcome]:
        return functools.partial(self.fn, **self.params)


def _rules() -> dict[str, Rule]:
    rules = [
        Rule("greedy", greedy, ALL_PROCESSES, preserves="greedy", note="proofs_notes/greedy.md"),
        Rule("token", token, CHAINS, note="proofs_notes/token.md"),
        Rule("strict", strict, ALL_PROCESSES, note="proofs_notes/strict.md"),
        Rule("block", block, CHAINS, chain_only=True, note="proofs_notes/block.md"),
        Rule("mss", mss, CHAINS | DETERMINISTIC_TREES | {"iid_siblings"}, note="proofs_notes/mss.md"),
        Rule("rrs", rrs, CHAINS | DETERMINISTIC_TREES | {"wor_siblings"}, note="proofs_notes/rrs.md"),
        Rule(
            "target_only",
            target_only,
            CHAINS | DETERMINISTIC_TREES | {"wor_siblings", "topk_siblings"},
            note="proofs_notes/target_only.md",
        ),
        Rule(
            "target_only[threshold_single=0.3]",
            target_only,
            frozenset(),
            params={"threshold_single": Fraction(3, 10)},
            note="proofs_notes/target_only.md",
        ),
        Rule(
            "target_only[threshold_acc=0.5]",
            target_only,
            frozenset(),
            params={"threshold_acc": Fraction(1, 2)},
            note="proofs_notes/target_only.md",
        ),
        Rule(
            "traversal",
            traversal,
            CHAINS | DETERMINISTIC_TREES | {"iid_siblings"},
            note="proofs_notes/traversal.md",
        ),
        Rule(
            "typical",
            typical,
            frozenset(),
            params={"eps": 0.09, "delta": 0.3},
            note="proofs_notes/typical.md",
        ),
    ]
    return {r.name: r for r in rules}


#: Every configured rule by name, in the order the matrix lists them.
RULES: dict[str, Rule] = _rules()

__all__ = [
    "ALL_PROCESSES",
    "CHAINS",
    "RULES",
    "Rule",
    "block",
    "greedy",
    "mss",
    "rrs",
    "strict",
    "target_only",
    "token",
    "traversal",
    "typical",
]
