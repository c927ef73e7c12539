"""Greedy verification on trees, batched (reference: ``rules/greedy.py``).

``greedy(parents, tokens, target_probs) -> (accepted_nodes [B, N], next_token [B])``: follow
the target's argmax (ties to the smallest id) while a child carries it. No uniform is used.
``greedy_verifier`` takes the tree contract's arguments (backend ``optimized.greedy``, law
"greedy"). Proof: proofs_notes/greedy.md; coupling: proofs_notes/optimized_coupling.md.
"""

from __future__ import annotations

import torch

from ._contract import check_unread_draft
from ._device import on_kernel_device
from ._split import LAUNCH, block_size, choose_path, chunking, counters, depth, tree_shapes
from ._tree import prepare
from .kernels.greedy_tree import greedy_level_kernel, greedy_tree_kernel


@on_kernel_device
def greedy(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    target_probs: torch.Tensor,
    block: int | None = None,
    path: str = "auto",
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``path``: "row" (one program per row), "split" (one launch per tree level, each visited
    row's argmax spread over ``chunk``-sized programs) or "auto" (split on a GPU when V >= 8192)."""
    t = prepare(parents, tokens, None, target_probs)
    if t.B == 0:
        return t.accepted, t.next_token
    path = choose_path(path, t.V)
    block = block_size(block)
    if path == "row":
        greedy_tree_kernel[(t.B,)](
            t.parents, t.tokens, t.target, t.accepted, t.next_token, t.N, t.V, NB=t.NB, BLOCK=block, **LAUNCH
        )
        return t.accepted, t.next_token
    device = t.target.device
    chunk, C, CB = chunking(t.V, t.target.element_size(), block, chunk)
    levels = max(depth(s) for s in tree_shapes(parents)) + 1
    node = torch.empty(t.B, dtype=torch.int64, device=device)
    part_v = torch.empty(t.B, C, dtype=torch.float64, device=device)
    part_i = torch.empty(t.B, C, dtype=torch.int64, device=device)
    cnt = counters(t.B, device)
    for level in range(levels):
        greedy_level_kernel[(t.B, C)](
            t.parents, t.tokens, t.target, t.accepted, t.next_token, node, part_v, part_i, cnt,
            t.N, t.V, C, chunk, level, NB=t.NB, CB=CB, BLOCK=block, **LAUNCH,
        )  # fmt: skip
    return t.accepted, t.next_token


def greedy_verifier(parents, tokens, draft_probs, target_probs, generator):
    """The tree contract; the generator is not used (greedy decoding has no randomness)."""
    check_unread_draft((parents, tokens, draft_probs, target_probs), chain=False)
    return greedy(parents, tokens, target_probs)
