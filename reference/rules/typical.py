"""Typical acceptance (Medusa, Cai et al. 2024): fast, and NOT distribution-preserving.

With P the target law at a node (temperature already applied) and
``H = -sum_x P(x) log(P(x) + 1e-5)``, a drafted token x is accepted if
``P(x) > min(eps, delta * exp(-H))``. A node is accepted if every node on its root path is;
the deepest accepted node wins (ties: larger sum of log P along the path, then the smaller
index). The next token is drawn from P truncated to ``{x : P(x) >= threshold}`` at that node.
Medusa's code uses eps = 0.09, delta = 0.3.

Exact for: nothing. The rule is flagged lossy with a witness (proofs_notes/typical.md).
Tape: ``("final", 0)`` only; acceptance is deterministic.
"""

from __future__ import annotations

import math

from ..choices import Choices
from ..errors import BadParameterError
from ..laws import Law, argmax, onehot
from ..step import Outcome, Step


def typical_threshold(P: Law, eps: float, delta: float) -> float:
    H = -sum(float(v) * math.log(float(v) + 1e-5) for v in P)
    return min(eps, delta * math.exp(-H))


def typical(ch: Choices, step: Step, eps: float = 0.09, delta: float = 0.3) -> Outcome:
    if not 0 < eps <= 1:
        raise BadParameterError("eps", f"must be in (0, 1], got {eps!r}")
    if not delta > 0:
        raise BadParameterError("delta", f"must be > 0, got {delta!r}")
    tree, X, P = step.tree, step.tokens, step.target_probs
    thr = [typical_threshold(p, eps, delta) for p in P]
    ok = [True] * tree.n
    score = [0.0] * tree.n
    for c in range(1, tree.n):
        v = tree.parents[c]
        ok[c] = ok[v] and P[v][X[c]] > thr[v]
        score[c] = score[v] + (math.log(float(P[v][X[c]])) if ok[c] else 0.0)
    best = max((i for i in range(tree.n) if ok[i]), key=lambda i: (tree.depth[i], score[i], -i))
    kept = [v if v >= thr[best] else v * 0 for v in P[best]]
    if not sum(kept) > 0:  # only with delta > 1 can the typical set be empty: keep the argmax
        kept = list(onehot(argmax(P[best]), step.vocab, P[best][0]))
    return Outcome(tree.ancestors(best), ch.categorical(kept, ("final", 0)))
