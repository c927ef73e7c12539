"""EAGLE-1 (SafeAILab's ``eagle-llm``): the tree buffers and the sampling posterior.

EAGLE describes its tree by a *choices list*: node ``(r_1, .., r_d)`` is the r_d-th most likely
draft after the path ``(r_1, .., r_{d-1})``. Its nodes are numbered in the order of the sorted
list (by depth, then by path). The adapters translate a tree given by ``parents`` (node i's
rank = its position among its parent's children) into that list and EAGLE's node ids back into
ours, so the contract's numbering holds.

* ``eagle.generate_tree_buffers`` - ``eagle.model.utils.generate_tree_buffers``: attention
  mask, position ids and retrieve indices (leaf paths). Ranks must stay below EAGLE's TOPK (10).
* ``eagle.evaluate_posterior`` - ``eagle.model.utils.evaluate_posterior`` with a logits
  processor (the sampling branch; identity processor = temperature 1): for each depth it tries
  the children of the accepted node in rank order, accepting child x with probability
  ``p(x) / q(x)``; after a rejection p becomes ``norm((p - q')+)`` with q' the parent's draft
  law without the children already tried. Its inputs are built as EAGLE builds them: the
  candidates and their draft probabilities along every retrieve path come from EAGLE's own
  ``generate_candidates``, fed one row of top-k tokens and probabilities per expanded node as
  its drafting loop ``topK_genrate`` lays them out; the target's logits at each node; and
  ``op``, the draft law of every expanded node grouped by depth in the order of the choices
  list. It draws from Python's ``random`` (seeded here from the contract's generator,
  the caller's state restored); the next token is sampled from the law it returns, as EAGLE's
  ``update_inference_inputs`` does. EAGLE drafts the top-k tokens of q and hands q to this
  rule: the process ``topk_siblings`` (expected lossy: the matrix's ``rrs x topk_siblings``);
  under ``wor_siblings`` (children sampled without replacement) the rule is meant to be RRS.
"""

from __future__ import annotations

import functools
import random
from typing import Any

import torch

from specproof.properties.conformance.buffers import TreeBuffers, Unsupported
from specproof.properties.conformance.contracts import draw_seeds
from specproof.reference.errors import UsageError
from specproof.reference.tree import DraftTree

TOPK = 10  # eagle.model.utils.TOPK: ranks at or above it collide in its tree indices


def choices_of(parents: tuple[int, ...]) -> tuple[list[tuple[int, ...]], list[int]]:
    """EAGLE's choices list for a tree, and EAGLE's node id of each of our nodes."""
    tree = DraftTree(parents)
    path: list[tuple[int, ...]] = [()]
    for i in range(1, tree.n):
        rank = tree.children[parents[i]].index(i)
        if rank >= TOPK:
            raise Unsupported(
                f"node {i} is child number {rank} of its parent; EAGLE's ranks stop at {TOPK - 1}"
            )
        path.append(path[parents[i]] + (rank,))
    ordered = sorted(path[1:], key=lambda c: (len(c), c))
    eagle_id = {c: k + 1 for k, c in enumerate(ordered)}
    eagle_id[()] = 0
    return ordered, [eagle_id[c] for c in path]


@functools.lru_cache(maxsize=256)
def _buffers(parents: tuple[int, ...]) -> tuple[dict[str, Any], list[int]]:
    """EAGLE's buffers for a tree (cached: the audit calls with few distinct trees; read only)."""
    from eagle.model.utils import generate_tree_buffers

    choices, ids = choices_of(parents)
    if not choices:
        raise Unsupported("EAGLE's builder needs at least one draft node")
    return generate_tree_buffers([list(c) for c in choices], device="cpu"), ids


def generate_buffers(parents: tuple[int, ...]) -> TreeBuffers:
    buf, ids = _buffers(parents)
    back = {e: ours for ours, e in enumerate(ids)}  # EAGLE id -> our node
    perm = torch.tensor(ids)
    mask = buf["tree_attn_mask"][0, 0][perm][:, perm]
    pos = buf["tree_position_ids"][perm]
    paths = [[back[int(v)] if v >= 0 else -1 for v in row] for row in buf["retrieve_indices"]]
    return TreeBuffers(mask, pos, torch.tensor(paths))


def draft_rows(parents: tuple[int, ...]) -> list[int]:
    """EAGLE's drafting order: the nodes with children, by depth, then in choices-list order (the
    rows of ``tree_logits`` and, per depth, of ``op``)."""
    tree = DraftTree(parents)
    _, ids = choices_of(parents)
    back = {e: ours for ours, e in enumerate(ids)}
    rows: list[int] = []
    for e in range(1, tree.n):
        u = parents[back[e]]
        if u not in rows:
            rows.append(u)
    return rows


def _candidates(
    parents: tuple[int, ...], tok: torch.Tensor, q: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """EAGLE's ``generate_candidates`` on the draft as EAGLE's ``topK_genrate`` lays it out: one
    row of TOPK tokens and draft probabilities per expanded node (child of rank r at column r;
    unused columns hold token 0 at probability 0), the root's token as ``sample_token``.
    Returns its candidates, their probabilities, its tree candidates, and ``op`` (per depth, the
    draft laws of the expanded nodes)."""
    from eagle.model.utils import generate_candidates

    tree = DraftTree(parents)
    buf, _ = _buffers(parents)
    rows = draft_rows(parents)
    tokens = torch.zeros(len(rows), TOPK, dtype=torch.long)
    probs = torch.zeros(len(rows), TOPK)
    for r, u in enumerate(rows):
        for rank, c in enumerate(tree.children[u]):
            tokens[r, rank] = tok[c]
            probs[r, rank] = q[u, tok[c]]
    cart, cart_prob, tree_candidates = generate_candidates(
        (tokens, probs), buf["tree_indices"], buf["retrieve_indices"], tok[:1][None], lambda _ids, x: x
    )
    op = [torch.stack([q[u] for u in rows if tree.depth[u] == d - 1]) for d in range(1, tree.max_depth + 1)]
    return cart, cart_prob, tree_candidates, op


def evaluate_posterior(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    from eagle.model.utils import evaluate_posterior as eagle_posterior

    if draft_probs is None:
        raise UsageError(
            "draft_probs: EAGLE's posterior needs the draft laws (processes topk_siblings, wor_siblings)"
        )
    B, N = parents.shape
    accepted = torch.full((B, N), -1, dtype=torch.long)
    nxt = torch.zeros(B, dtype=torch.long)
    for b in range(B):
        par = tuple(int(v) for v in parents[b])
        buf, ids = _buffers(par)
        back = {e: ours for ours, e in enumerate(ids)}
        order = [back[e] for e in range(N)]  # our node at each EAGLE id
        tok = tokens[b].long()
        candidates, cand_prob, tree_candidates, op = _candidates(par, tok, draft_probs[b].float())
        retrieve = buf["retrieve_indices"]
        logp = torch.log(target_probs[b].double()).float()
        ext_logits = torch.cat([logp[order], torch.zeros(1, logp.shape[1])])
        logits = ext_logits[retrieve]
        state = random.getstate()
        try:
            random.seed(draw_seeds(generator)[0])
            best, n_acc, sample_p = eagle_posterior(
                logits,
                candidates,
                lambda _ids, x: x,
                cand_prob,
                op,
                buf["p_indices"],
                tree_candidates,
                buf["b_indices"],
            )
        finally:
            random.setstate(state)
        path = [back[int(e)] for e in retrieve[int(best), : int(n_acc) + 1]]
        accepted[b, : len(path)] = torch.tensor(path)
        nxt[b] = int(torch.multinomial(sample_p.double(), 1, generator=generator))
    return accepted, nxt


def backends() -> list[dict[str, object]]:
    return [
        dict(
            name="eagle.evaluate_posterior",
            kind="tree",
            fn=evaluate_posterior,
            processes=("wor_siblings", "topk_siblings"),
            expect="pass",
            expect_by_process=(("wor_siblings", "pass"), ("topk_siblings", "lossy")),
            doc="eagle.model.utils.evaluate_posterior, sampling branch (multi-round speculative sampling)",
        )
    ]


def builders() -> list[dict[str, object]]:
    return [
        dict(name="eagle.generate_tree_buffers", fn=generate_buffers, doc="EAGLE-1's sparse tree buffers")
    ]
