"""The target-only tree rule (EAGLE's sampling posterior; SGLang's tree sampler).

Deterministic, distinct siblings; no draft law is used. At node i with target law p and
children ``x_1..x_k`` (in child order) one coin u is drawn. Child j is accepted if it is the
first with

    u < min(1, (p(x_1) + ... + p(x_j)) / threshold_acc)   or   p(x_j) >= threshold_single

and the step moves there. If none is, emit ``Y ~ norm(p without x_1..x_k)``. With both knobs at
1 this is inverse-CDF sampling of ``y ~ p`` in child order: the child carrying y is accepted,
and a y carried by no child is emitted, so the rule is exact for any process with distinct
siblings. Knobs below 1 accept too often: lossy (proofs_notes/target_only.md gives the witness).
Repeated sibling tokens (i.i.d. siblings) count their mass twice: lossy too.

The coin is read as one categorical draw over "child 1, ..., child k, none" whose weights are
the increments of the bounds above; the bound comparison is ``<`` where SGLang writes ``<=``,
which differs only on a set of probability 0.

Tape: ``("coin", node)`` per visited node with children, ``("final", 0)``.
Exact (knobs 1, 1) for: iid_chain, onehot_chain, wor_siblings, topk_siblings, onehot_siblings.
"""

from __future__ import annotations

from ..choices import Choices
from ..errors import BadParameterError
from ..laws import without
from ..step import Outcome, Step


def check_thresholds(threshold_single: float, threshold_acc: float) -> None:
    for name, v in (("threshold_single", threshold_single), ("threshold_acc", threshold_acc)):
        if not 0 < v <= 1:
            raise BadParameterError(name, f"must be in (0, 1], got {v!r}")


def target_only(ch: Choices, step: Step, threshold_single: float = 1, threshold_acc: float = 1) -> Outcome:
    check_thresholds(threshold_single, threshold_acc)
    path, node = [0], 0
    while True:
        p = step.target_probs[node]
        kids = step.tree.children[node]
        if not kids:
            return Outcome(tuple(path), ch.categorical(p, ("final", 0)))
        one = p[0] * 0 + 1
        weights, bound, acc = [], one * 0, one * 0
        for c in kids:
            x = step.tokens[c]
            if p[x] >= threshold_single:
                weights.append(one - bound)
                bound = one
                break
            acc = acc + p[x]
            new = acc / threshold_acc
            new = new if new < 1 else one
            weights.append(new - bound)
            bound = new
        weights.append(one - bound)  # no child accepted
        j = ch.categorical(weights, ("coin", node))
        if j < len(weights) - 1:
            path.append(kids[j])
            node = kids[j]
            continue
        rest = without(p, [step.tokens[c] for c in kids])
        return Outcome(tuple(path), ch.categorical(rest if sum(rest) > 0 else p, ("final", 0)))
