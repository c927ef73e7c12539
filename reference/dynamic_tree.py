"""EAGLE-2's dynamic draft tree (Li et al. 2024, "EAGLE-2: Faster Inference of Language Models
with Dynamic Draft Trees", sec. 4): expand a beam by cumulative draft probability, then keep the
globally best N nodes.

With ``v(x)`` the *value* of a node, the product of the draft probabilities along its root path
(the draft's estimate that the whole path is accepted):

1. **Expand.** Depth 1: the root's ``k`` most likely tokens. At each further depth, the ``k``
   nodes of the previous depth with the largest value (the beam) each get their ``k`` most
   likely tokens as children, up to the shape's depth ``D``. The candidates are every node so
   created: ``k + (D - 1) k^2`` of them.
2. **Rerank.** Keep the ``N`` candidates of largest value.

Ties are broken by depth, then by creation order (beam rank, then token rank, then token id):
a child's value is its parent's times a probability <= 1, so it never exceeds its parent's
(floating-point products are monotone too), and on a tie the shallower parent ranks first. The
kept set is therefore *ancestor-closed*: every kept node's parent is kept (the root is always
kept), and the result is a valid tree of exactly ``N`` draft nodes whenever ``N`` does not
exceed the number of candidates. Checked on hypothesis-drawn laws by tests/test_proposers.py
(ties and zero probabilities included).

The tree is a deterministic function of the step's context and the draft model, so for the
rules the tree is fixed and the drafts are the one-hot drafts of ``onehot_siblings``: every rule
exact for ``onehot_siblings`` is exact for it (proofs_notes/processes.md, "deterministic
trees"). The verifier is not given draft laws (``draft_probs = None``); the draft laws are
rescaled and truncated by the top-k, so handing them over as q would not be a law the drafts
were sampled from.

The shape argument of :meth:`DynamicTree.propose` is a chain whose length is the depth ``D``
(the horizon of the step); ``k`` and ``N`` are the process's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specproof.reference.errors import UsageError

from .choices import Choices
from .errors import NotAChainError
from .laws import Law
from .models import LM
from .processes import Chooser, Process, Proposal
from .tree import DraftTree


def _top(q: Law, k: int) -> list[int]:
    """The k most likely tokens of q, ties to the smaller id (zero-probability ones included)."""
    return sorted(range(len(q)), key=lambda x: (-q[x], x))[:k]


def _top_chooser(ch: Choices, q: Law, sites: tuple[int, ...]) -> list[int]:
    return _top(q, len(sites))


def candidates(depth: int, top_k: int) -> int:
    """How many nodes the expansion creates: k at depth 1, k^2 at each further depth."""
    return top_k + (depth - 1) * top_k * top_k


@dataclass(frozen=True)
class DynamicTree(Process):
    """The EAGLE-2 dynamic tree as a proposal process named ``dynamic_tree``."""

    top_k: int = 2
    nodes: int = 4
    choose: Chooser = field(default=_top_chooser, repr=False)  # unused: propose is overridden
    gives_draft_probs: bool = False
    chain: bool = False
    name: str = "dynamic_tree"
    doc: str = "EAGLE-2: beam of k by cumulative draft probability per depth, then the global top N"

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise UsageError(f"top_k: must be >= 1, got {self.top_k}")
        if self.nodes < 1:
            raise UsageError(f"nodes: must be >= 1, got {self.nodes}")

    def propose(self, ch: Choices, shape: DraftTree, prefix: tuple[int, ...], draft: LM) -> Proposal:
        if not shape.is_chain:
            raise NotAChainError("shape", "the dynamic tree takes a chain of its depth D as its shape")
        if not prefix:
            raise UsageError("prefix: must hold at least the last committed token")
        depth, k = shape.max_depth, self.top_k
        if self.nodes > candidates(depth, k) or k > draft.vocab:
            raise UsageError(
                f"nodes: {self.nodes} exceed the {candidates(depth, k)} candidates of depth {depth}, "
                f"top_k {k} (or top_k exceeds the vocabulary {draft.vocab})"
            )
        return select(expand(prefix, draft, depth, k), self.nodes, prefix[-1])


@dataclass(frozen=True)
class Candidate:
    parent: int  # index into the candidate list, -1 for the root
    token: int
    depth: int
    log_value: float  # log of the product of draft probabilities along the root path
    context: tuple[int, ...]


def expand(prefix: tuple[int, ...], draft: LM, depth: int, k: int) -> list[Candidate]:
    """Step 1: every candidate, in creation order (depth, beam rank, token rank)."""
    out: list[Candidate] = []
    beam = [Candidate(-1, prefix[-1], 0, 0.0, prefix)]
    beam_index = [-1]
    for d in range(1, depth + 1):
        layer: list[tuple[Candidate, int]] = []
        for b, parent in zip(beam_index, beam):
            q = draft.law(parent.context)
            for x in _top(q, k):
                lv = parent.log_value + (math.log(q[x]) if q[x] > 0 else -math.inf)
                layer.append((Candidate(b, x, d, lv, parent.context + (x,)), len(out) + len(layer)))
        out.extend(c for c, _ in layer)
        ranked = sorted(layer, key=lambda ci: (-ci[0].log_value, ci[1]))[:k]
        beam = [c for c, _ in ranked]
        beam_index = [i for _, i in ranked]
    return out


def select(cands: list[Candidate], n: int, root_token: int) -> Proposal:
    """Step 2: the top-N candidates by value (ties: shallower, then earlier), as a tree whose
    nodes are in (depth, creation) order so that parents precede children."""
    order = sorted(range(len(cands)), key=lambda i: (-cands[i].log_value, cands[i].depth, i))[:n]
    kept = sorted(order, key=lambda i: (cands[i].depth, i))
    node_of = {-1: 0}
    parents, tokens = [-1], [root_token]
    for i in kept:
        c = cands[i]
        if c.parent not in node_of:  # pragma: no cover - excluded by the tie order (module doc)
            raise AssertionError(f"candidate {i} kept without its parent {c.parent}")
        node_of[i] = len(parents)
        parents.append(node_of[c.parent])
        tokens.append(c.token)
    return Proposal(tuple(parents), tuple(tokens), tuple(range(len(parents))))
