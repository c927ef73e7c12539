"""Token-level speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

On a chain ``X_1..X_K`` drawn from q: for i = 1..K accept ``X_i`` if ``u_i < min(1,
p_i(X_i) / q_i(X_i))``; at the first rejection emit ``Y ~ norm((p_i - q_i)+)`` and stop; if all
are accepted emit the bonus ``Y ~ p_{K+1}``. A deterministic draft (``draft_probs`` None) has
``q_i = onehot(X_i)``: accept with probability ``p_i(X_i)``, residual = p_i without ``X_i``.

On a tree this module applies the same test to each sibling in turn as if it were the only
draft, with the unmodified p and q (the naive extension). That is not exact for trees with two
or more children (proofs_notes/token.md gives the witness); use ``mss`` or ``rrs`` there.

Tape: ``("accept", node)`` for each tested draft, ``("final", 0)`` for the emitted token.
Exact for: iid_chain, onehot_chain. Proof and test: proofs_notes/token.md.
"""

from __future__ import annotations

from ..choices import Choices
from ..laws import acceptance, onehot, residual
from ..step import Outcome, Step


def token(ch: Choices, step: Step) -> Outcome:
    path, node = [0], 0
    while True:
        p = step.target_probs[node]
        kids = step.tree.children[node]
        if not kids:
            return Outcome(tuple(path), ch.categorical(p, ("final", 0)))
        for c in kids:
            x = step.tokens[c]
            q = step.draft_probs[node] or onehot(x, step.vocab, p[0])
            if ch.bernoulli(acceptance(p[x], q[x]), ("accept", c)):
                path.append(c)
                node = c
                break
        else:
            return Outcome(tuple(path), ch.categorical(residual(p, q), ("final", 0)))
