"""Multi-draft speculative sampling with replacement on trees, batched (reference: ``rules/mss.py``).

``mss(parents, tokens, draft_probs, target_probs, u_accept, u_final)``: ``u_accept[b, c]`` is
the uniform of site ``("accept", c)`` of row b (column 0 unused), ``u_final[b]`` that of
``("final", 0)``. Returns ``(accepted_nodes [B, N], next_token [B])`` equal to the reference's
on the same uniforms (``tests/test_optimized_tree.py``). ``mss_verifier`` draws the uniforms
from a ``torch.Generator`` (the tree contract; backend ``optimized.mss``). Rule: SpecInfer
(Miao et al. 2024), proofs_notes/mss.md; coupling: proofs_notes/optimized_coupling.md.
"""

from __future__ import annotations

import torch

from ._contract import tree_verifier
from ._device import default_block, on_kernel_device
from ._tree import f64, prepare
from .kernels.multi_draft import multi_draft_kernel


def multi_draft(parents, tokens, draft_probs, target_probs, u_accept, u_final, without_replacement, block):
    t = prepare(
        parents,
        tokens,
        draft_probs,
        target_probs,
        {"u_accept": (u_accept, "node"), "u_final": (u_final, "row")},
    )
    if t.B == 0:
        return t.accepted, t.next_token
    device = t.target.device
    scratch = torch.empty(2, t.B, t.V, dtype=torch.float64, device=device)
    multi_draft_kernel[(t.B,)](
        t.parents,
        t.tokens,
        t.draft if t.draft is not None else t.target,  # never read without HAS_Q
        t.target,
        f64(u_accept, device),
        f64(u_final, device),
        scratch[0],
        scratch[1],
        t.accepted,
        t.next_token,
        t.N,
        t.V,
        HAS_Q=t.draft is not None,
        WITHOUT_REPLACEMENT=without_replacement,
        BLOCK=block or default_block(),
    )
    return t.accepted, t.next_token


@on_kernel_device
def mss(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    u_accept: torch.Tensor,
    u_final: torch.Tensor,
    block: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return multi_draft(parents, tokens, draft_probs, target_probs, u_accept, u_final, False, block)


mss_verifier = tree_verifier(mss, "u_accept")
