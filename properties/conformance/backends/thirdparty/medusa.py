"""Medusa-1 (FasterDecoding's ``medusa-llm``): typical acceptance and the tree buffers.

* ``medusa.evaluate_posterior`` - ``medusa.model.utils.evaluate_posterior`` with sampling
  (temperature 1, ``posterior_threshold`` 0.09, ``posterior_alpha`` 0.3, Medusa's defaults), as
  a tree verifier. Medusa evaluates *candidates*: the root paths of its tree, each with the
  target's logits along it. The adapter builds them from the tree's leaf paths; shorter paths
  are padded with an extra token id V whose logit is ``-inf`` at every position, so a padded
  position is never accepted. The function returns the best candidate and how many of its
  drafts are accepted; the token after them is, in Medusa, the argmax of the target's logits
  there (``generate_candidates`` puts it at the root of the next step's tree), which the
  adapter returns as the next token. Typical acceptance does not preserve the target's law
  (proofs_notes/typical.md): the expected verdict is lossy.
* ``medusa.generate_medusa_buffers`` - the attention mask, position ids and retrieve indices
  (leaf paths) of Medusa-1's dense tree: ``medusa_choices = [1, c_1, .., c_D]`` means every node
  at depth d - 1 has c_d children, numbered level by level with siblings together. The adapter
  accepts such trees and reports any other as unsupported.
"""

from __future__ import annotations

from typing import Any

import torch

from specproof.properties.conformance.buffers import TreeBuffers, Unsupported, dense_tree
from specproof.reference.tree import DraftTree


def evaluate_posterior(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    from medusa.model.utils import evaluate_posterior as medusa_posterior

    B, N = parents.shape
    V = target_probs.shape[-1]
    accepted = torch.full((B, N), -1, dtype=torch.long)
    nxt = torch.zeros(B, dtype=torch.long)
    logp = torch.log(target_probs.double()).float()
    for b in range(B):
        tree = DraftTree(parents[b].tolist())
        paths = [tuple(v for v in p if v >= 0) for p in tree.leaf_paths()]
        L = max(len(p) for p in paths)
        cand = torch.full((len(paths), L), V, dtype=torch.long)
        logits = torch.full((len(paths), L, V + 1), float("-inf"))
        for j, path in enumerate(paths):
            idx = torch.tensor(path)
            cand[j, : len(path)] = tokens[b, idx].long()
            logits[j, : len(path), :V] = logp[b, idx]
            logits[j, len(path) :, :V] = logp[b, idx[-1]]  # finite rows; their candidates are id V
        best, length = medusa_posterior(logits, cand, 1.0, 0.09, 0.3)
        path = paths[int(best)][: int(length) + 1]
        accepted[b, : len(path)] = torch.tensor(path)
        nxt[b] = int(torch.argmax(target_probs[b, path[-1]]))
    return accepted, nxt


def medusa_choices(parents: tuple[int, ...]) -> list[int]:
    """``[1, c_1, .., c_D]`` if the tree is Medusa-1's dense tree in its node order."""
    tree = DraftTree(parents)
    sizes, level = [1], [0]
    while any(tree.children[i] for i in level):
        kids = {len(tree.children[i]) for i in level}
        if len(kids) != 1:
            raise Unsupported("a dense tree needs the same number of children at every node of a depth")
        sizes.append(kids.pop())
        level = [c for i in level for c in tree.children[i]]
    if dense_tree(tuple(sizes[1:])) != tuple(parents):
        raise Unsupported("nodes are not numbered level by level with siblings together")
    return sizes


def generate_buffers(parents: tuple[int, ...]) -> TreeBuffers:
    from medusa.model.utils import generate_medusa_buffers

    buf: dict[str, Any] = generate_medusa_buffers(medusa_choices(parents), device="cpu")
    return TreeBuffers(
        attention_mask=buf["medusa_attn_mask"][0, 0],
        position_ids=buf["medusa_position_ids"],
        leaf_paths=buf["retrieve_indices"],
    )


def backends() -> list[dict[str, object]]:
    return [
        dict(
            name="medusa.evaluate_posterior",
            kind="tree",
            fn=evaluate_posterior,
            processes=("onehot_siblings", "topk_siblings"),
            expect="lossy",
            doc="medusa.model.utils.evaluate_posterior: typical acceptance, greedy next token",
        )
    ]


def builders() -> list[dict[str, object]]:
    return [
        dict(name="medusa.generate_medusa_buffers", fn=generate_buffers, doc="Medusa-1's dense tree buffers")
    ]
