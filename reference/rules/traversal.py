"""Traversal verification (Weng et al. 2025, arXiv 2505.12398), for i.i.d. sibling trees.

Each node carries a path weight ``a`` (the p_alpha of the paper), a current target law P and
its draft law Q (one-hot per child for deterministic children). Initially ``a(root) = 1`` and
``a(c) = min(1, a(parent) P_parent(x_c) / Q(x_c))`` down the tree. Then repeat:

* take the first leaf X in post-order (from the root, always the first remaining child);
* if X is the root, emit ``Y ~ P_root``;
* else accept the root path to X if ``u_X < a(X)`` and emit ``Y ~ P_X``;
* else delete X; at its parent V set ``w = (a(V) P_V - Q_X)+``, ``Z = sum w``,
  ``P_V <- norm(w)``, ``a(V) <- Z / (Z + 1 - a(V))`` (1 if that denominator is 0), and recompute
  the weights of V's remaining subtrees from the new ``a(V)`` and ``P_V``.

On a chain this is block verification read from the leaf upwards (the deleted leaf's parent gets
exactly block's h_i and residual). On a depth-1 tree the root keeps ``a = 1`` and the rule is
multi-draft sampling with replacement. The paper's theorem: lossless for trees whose siblings are
drawn i.i.d. from q. This module is our reading of the paper's algorithm; exactness is checked by
enumeration (proofs_notes/traversal.md, tests/test_rules_exact.py).

Tape: ``("accept", node)`` per tested node (each node at most once), ``("final", 0)``.
"""

from __future__ import annotations

from ..choices import Choices
from ..laws import Law, normalize, onehot, positive_part
from ..step import Outcome, Step


def traversal(ch: Choices, step: Step) -> Outcome:
    tree, X = step.tree, step.tokens
    P: list[Law] = list(step.target_probs)
    one = P[0][0] * 0 + 1
    alive = [list(k) for k in tree.children]

    def Q(c: int) -> Law:
        return step.draft_probs[tree.parents[c]] or onehot(X[c], step.vocab, one)

    a = [one] * tree.n

    def reweigh(v: int) -> None:  # weights of v's remaining subtrees, top-down
        stack = list(alive[v])
        while stack:
            c = stack.pop()
            r = a[tree.parents[c]] * P[tree.parents[c]][X[c]] / Q(c)[X[c]]
            a[c] = r if r < 1 else one
            stack.extend(alive[c])

    reweigh(0)
    while True:
        path = [0]
        while alive[path[-1]]:
            path.append(alive[path[-1]][0])
        leaf = path[-1]
        if leaf == 0 or ch.bernoulli(a[leaf], ("accept", leaf)):
            return Outcome(tuple(path), ch.categorical(P[leaf], ("final", 0)))
        v = tree.parents[leaf]
        alive[v].remove(leaf)
        w = positive_part([a[v] * pv - qx for pv, qx in zip(P[v], Q(leaf))])
        Z = sum(w)
        if Z > 0:
            P[v] = normalize(w)
        den = Z + 1 - a[v]
        r = Z / den if den > 0 else one
        a[v] = r if r < 1 else one  # <= 1 exactly; the clamp only absorbs float rounding
        reweigh(v)
