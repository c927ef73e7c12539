"""Proposal processes: how the drafts of a step were produced.

Whether a rule is exact depends on this (proofs_notes/processes.md). A process grows a concrete
draft tree from a *shape* (a :class:`DraftTree` giving each node's number of children) and a
draft model, drawing through the choice interface at sites ``("draft", shape_node)``:

================  ===================================================  ===================
name              children of a node                                    draft_probs given
================  ===================================================  ===================
iid_chain         a chain sampled autoregressively from q               q at every node
onehot_chain      a chain of argmax q tokens (greedy draft, n-gram)      None
iid_siblings      k children i.i.d. from q (duplicates possible)        q at every node
wor_siblings      k children from q without replacement                 q at every node
topk_siblings     the k most likely tokens under q (EAGLE-2, SGLang)    q at every node
onehot_siblings   the k most likely tokens under q, passed as drafts    None
================  ===================================================  ===================

Ties in top-k go to the smaller id. When q has fewer usable tokens than the shape asks for
(without replacement, or top-k within q's support), the missing children and their subtrees
are dropped, so every process always yields a valid tree. The chain processes take chain
shapes only. See proofs_notes/processes.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specproof.reference.errors import UsageError

from .choices import Choices
from .errors import NotAChainError
from .laws import Law
from .models import LM
from .tree import DraftTree


@dataclass(frozen=True)
class Proposal:
    """A concrete tree: parents, tokens (``tokens[0]`` the last committed token)."""

    parents: tuple[int, ...]
    tokens: tuple[int, ...]
    shape_nodes: tuple[int, ...]  # the shape node each concrete node came from


def node_contexts(prefix: tuple[int, ...], proposal: Proposal) -> list[tuple[int, ...]]:
    """The context after the root path to each node (the prefix ends with ``tokens[0]``)."""
    ctx: list[tuple[int, ...]] = []
    for i, parent in enumerate(proposal.parents):
        ctx.append(prefix if parent == -1 else ctx[parent] + (proposal.tokens[i],))
    return ctx


Chooser = Callable[[Choices, Law, tuple[int, ...]], list[int]]


def _grow(ch: Choices, shape: DraftTree, prefix: tuple[int, ...], draft: LM, choose: Chooser) -> Proposal:
    parents, tokens, origin, ctx = [-1], [prefix[-1]], [0], [prefix]
    i = 0
    while i < len(parents):
        s = origin[i]
        kids = shape.children[s]
        if kids:
            picked = choose(ch, draft.law(ctx[i]), kids)
            for s_child, x in zip(kids, picked):
                parents.append(i)
                tokens.append(x)
                origin.append(s_child)
                ctx.append(ctx[i] + (x,))
        i += 1
    return Proposal(tuple(parents), tuple(tokens), tuple(origin))


def _iid(ch: Choices, q: Law, sites: tuple[int, ...]) -> list[int]:
    return [ch.categorical(q, ("draft", s)) for s in sites]


def _wor(ch: Choices, q: Law, sites: tuple[int, ...]) -> list[int]:
    out: list[int] = []
    w = list(q)
    for s in sites:
        if not sum(w) > 0:
            break
        x = ch.categorical(w, ("draft", s))
        out.append(x)
        w[x] = w[x] * 0
    return out


def _ranked(q: Law) -> list[int]:
    return sorted(range(len(q)), key=lambda x: (-q[x], x))


def _topk_support(ch: Choices, q: Law, sites: tuple[int, ...]) -> list[int]:
    return [x for x in _ranked(q) if q[x] > 0][: len(sites)]


def _topk_any(ch: Choices, q: Law, sites: tuple[int, ...]) -> list[int]:
    return _ranked(q)[: len(sites)]


@dataclass(frozen=True)
class Process:
    name: str
    choose: Chooser
    gives_draft_probs: bool
    chain: bool
    doc: str

    def propose(self, ch: Choices, shape: DraftTree, prefix: tuple[int, ...], draft: LM) -> Proposal:
        if self.chain and not shape.is_chain:
            raise NotAChainError("shape", f"process {self.name} drafts chains; this shape branches")
        if not prefix:
            raise UsageError("prefix: must hold at least the last committed token")
        return _grow(ch, shape, prefix, draft, self.choose)

    def draft_probs(self, prefix: tuple[int, ...], proposal: Proposal, draft: LM) -> list[Law | None] | None:
        """What the verifier is given as ``draft_probs`` for this proposal: the draft law at
        every node with children (a leaf's is never drafted from, and a draft with a bounded
        depth, like Medusa's heads, has none there)."""
        if not self.gives_draft_probs:
            return None
        has_kids = set(proposal.parents)
        contexts = node_contexts(prefix, proposal)
        return [draft.law(c) if i in has_kids else None for i, c in enumerate(contexts)]


PROCESSES: dict[str, Process] = {
    p.name: p
    for p in [
        Process("iid_chain", _iid, True, True, "a chain sampled from the draft model"),
        Process("onehot_chain", _topk_any, False, True, "a greedy (argmax) draft chain, one-hot"),
        Process("iid_siblings", _iid, True, False, "children i.i.d. from q (with replacement)"),
        Process("wor_siblings", _wor, True, False, "children from q without replacement"),
        Process("topk_siblings", _topk_support, True, False, "top-k of q, verifier given q"),
        Process("onehot_siblings", _topk_any, False, False, "top-k of q, passed as one-hot drafts"),
    ]
}
