"""Recursive rejection sampling: multi-draft without replacement (Jeon et al. 2024).

At node i, children ``x_1..x_k`` drawn from q without replacement: ``q^(1) = q``,
``p^(1) = p``; for j = 1..k accept ``x_j`` if ``u_j < min(1, p^(j)(x_j) / q^(j)(x_j))``; else
``p^(j+1) = norm((p^(j) - q^(j))+)`` and ``q^(j+1) = q^(j)`` with ``x_j`` removed, renormalized.
All rejected: ``Y ~ p^(k+1)``. Deterministic children use their own one-hot laws, as in mss.

Exact for (proofs_notes/rrs.md): iid_chain, onehot_chain, wor_siblings, onehot_siblings. Not for
i.i.d. siblings (duplicates make the removal wrong).

Tape: ``("accept", child)`` per tested child, ``("final", 0)``.
"""

from __future__ import annotations

from ..choices import Choices
from ..laws import acceptance, normalize, onehot, residual, without
from ..step import Outcome, Step


def rrs(ch: Choices, step: Step) -> Outcome:
    path, node = [0], 0
    while True:
        p = step.target_probs[node]
        q_node = step.draft_probs[node]
        for c in step.tree.children[node]:
            x = step.tokens[c]
            q = q_node or onehot(x, step.vocab, p[0])
            if ch.bernoulli(acceptance(p[x], q[x]), ("accept", c)):
                path.append(c)
                node = c
                break
            p = residual(p, q)
            if q_node is not None:
                rest = without(q_node, [x])
                q_node = normalize(rest) if sum(rest) > 0 else rest
        else:
            return Outcome(tuple(path), ch.categorical(p, ("final", 0)))
