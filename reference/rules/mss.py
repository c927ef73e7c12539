"""Multi-draft speculative sampling with replacement (SpecInfer's multi-step sampling).

At node i with target law p and children ``x_1..x_k`` drawn i.i.d. from q (in child order):
for j = 1..k accept ``x_j`` if ``u_j < min(1, p(x_j) / q(x_j))`` and move to that child;
otherwise ``p <- norm((p - q)+)``. If every child is rejected emit ``Y ~ p``. A node whose
children are deterministic (``draft_probs`` None there) uses each child's own one-hot law as its
q, which makes the rule the target-only rule in law.

Exact for (proofs_notes/mss.md): iid_chain, onehot_chain, iid_siblings, onehot_siblings. Not
for siblings drawn without replacement (reused q) nor for top-k siblings judged with the q they
were ranked by: the matrix shows the witnesses.

Tape: ``("accept", child)`` per tested child, ``("final", 0)``.
"""

from __future__ import annotations

from ..choices import Choices
from ..laws import acceptance, onehot, residual
from ..step import Outcome, Step


def mss(ch: Choices, step: Step) -> Outcome:
    path, node = [0], 0
    while True:
        p = step.target_probs[node]
        for c in step.tree.children[node]:
            x = step.tokens[c]
            q = step.draft_probs[node] or onehot(x, step.vocab, p[0])
            if ch.bernoulli(acceptance(p[x], q[x]), ("accept", c)):
                path.append(c)
                node = c
                break
            p = residual(p, q)
        else:
            return Outcome(tuple(path), ch.categorical(p, ("final", 0)))
