"""The strict variant: draw from the target and follow the tree while it agrees.

At node i draw ``y ~ p_i``; if a child of i carries ``y`` move there, else emit ``y`` and stop;
a leaf emits its draw as the bonus token. On a chain: accept ``X_i`` iff ``y_i == X_i``.

Claim: exact for every proposal process (the emitted tokens are target samples whatever the
drafts are), with lower acceptance than token-level rejection sampling on the same drafts. Its
law of emitted sequences equals token-level's on chains drawn from q. Proof and test:
proofs_notes/strict.md.

Tape: ``("y", node)`` for each target draw.
"""

from __future__ import annotations

from ..choices import Choices
from ..step import Outcome, Step


def strict(ch: Choices, step: Step) -> Outcome:
    path, node = [0], 0
    while True:
        y = ch.categorical(step.target_probs[node], ("y", node))
        nxt = next((c for c in step.tree.children[node] if step.tokens[c] == y), None)
        if nxt is None:
            return Outcome(tuple(path), y)
        path.append(nxt)
        node = nxt
