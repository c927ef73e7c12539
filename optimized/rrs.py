"""Recursive rejection sampling (multi-draft without replacement) on trees, batched
(reference: ``rules/rrs.py``).

Same kernel and tape layout as :mod:`specproof.optimized.mss` (``u_accept[b, c]`` for site
``("accept", c)``, ``u_final[b]`` for ``("final", 0)``); after each rejection the draft law
loses the rejected token and is renormalized. Backend ``optimized.rrs``. Rule: Jeon et al.
2024, proofs_notes/rrs.md; coupling: proofs_notes/optimized_coupling.md.
"""

from __future__ import annotations

import torch

from ._contract import tree_verifier
from ._device import on_kernel_device
from .mss import multi_draft


@on_kernel_device
def rrs(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    u_accept: torch.Tensor,
    u_final: torch.Tensor,
    block: int | None = None,
    path: str = "auto",
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return multi_draft(
        parents, tokens, draft_probs, target_probs, u_accept, u_final, True, block, path, chunk
    )


rrs_verifier = tree_verifier(rrs, "u_accept")
