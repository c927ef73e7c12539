"""Greedy verification on trees, batched (reference: ``rules/greedy.py``).

``greedy(parents, tokens, target_probs) -> (accepted_nodes [B, N], next_token [B])``: follow
the target's argmax (ties to the smallest id) while a child carries it. No uniform is used.
``greedy_verifier`` takes the tree contract's arguments (backend ``optimized.greedy``, law
"greedy"). Proof: proofs_notes/greedy.md; coupling: proofs_notes/optimized_coupling.md.
"""

from __future__ import annotations

import torch

from ._device import default_block, on_kernel_device
from ._tree import prepare
from .kernels.greedy_tree import greedy_tree_kernel


@on_kernel_device
def greedy(
    parents: torch.Tensor, tokens: torch.Tensor, target_probs: torch.Tensor, block: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    t = prepare(parents, tokens, None, target_probs)
    if t.B == 0:
        return t.accepted, t.next_token
    greedy_tree_kernel[(t.B,)](
        t.parents,
        t.tokens,
        t.target,
        t.accepted,
        t.next_token,
        t.N,
        t.V,
        NB=t.NB,
        BLOCK=block or default_block(),
    )
    return t.accepted, t.next_token


def greedy_verifier(parents, tokens, draft_probs, target_probs, generator):
    """The tree contract; the generator is not used (greedy decoding has no randomness)."""
    return greedy(parents, tokens, target_probs)
