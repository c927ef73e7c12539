"""Greedy verification: follow the target's argmax through the tree.

At node i the target's choice is ``y = argmax p_i`` (ties to the smallest id). If a child of i
carries ``y`` the step moves there; otherwise it emits ``y`` and stops. A leaf emits its argmax
as the bonus token.

Claim: for any draft tree and any proposal process, the emitted tokens are exactly the first
tokens of greedy decoding of the target. Proof and test: proofs_notes/greedy.md
(tests/test_rules_exact.py::test_declared_exact_rules_are_exact).
"""

from __future__ import annotations

from ..choices import Choices
from ..laws import argmax
from ..step import Outcome, Step


def greedy(ch: Choices, step: Step) -> Outcome:
    path, node = [0], 0
    while True:
        y = argmax(step.target_probs[node])
        nxt = next((c for c in step.tree.children[node] if step.tokens[c] == y), None)
        if nxt is None:
            return Outcome(tuple(path), y)
        path.append(nxt)
        node = nxt
