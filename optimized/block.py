"""Block verification of chains, batched (reference: ``rules/block.py``).

``block(draft_token_ids, draft_probs, target_probs, u_eta, u_final)``: ``u_eta[b, i]`` is the
uniform of site ``("eta", i)`` of row b (i = 1..K; column 0 unused) and ``u_final[b]`` that of
``("final", 0)``. Given the same uniforms it returns what :func:`specproof.reference.rules.block`
returns for each row (``tests/test_optimized_coupled.py``). ``block_verifier`` draws the
uniforms from a ``torch.Generator`` (the chain contract; backend ``optimized.block``).
Rule: Sun et al. 2025 (proofs_notes/block.md); coupling: proofs_notes/optimized_coupling.md.
"""

from __future__ import annotations

import torch
import triton

from ._contract import chain_verifier
from ._device import default_block, on_kernel_device
from .kernels.block_chain import block_chain_kernel
from .validate import check_chain_call


@on_kernel_device
def block(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    u_eta: torch.Tensor,
    u_final: torch.Tensor,
    block: int | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """``output_token_ids [B, K+1]``: accepted drafts X_1..X_tau, then Y, then -1."""
    # validate=False: inputs already checked by the caller (or a benchmark)
    B, K, V = check_chain_call(
        draft_token_ids, draft_probs, target_probs, ("u_eta", u_eta), u_final, validate
    )
    device = target_probs.device
    out = torch.full((B, K + 1), -1, dtype=torch.int64, device=device)
    if B == 0:
        return out
    p = target_probs.contiguous()
    q = draft_probs.contiguous() if draft_probs is not None else p  # never read without HAS_Q
    block_chain_kernel[(B,)](
        draft_token_ids.to(device=device, dtype=torch.int64).contiguous(),
        q,
        p,
        u_eta.to(device, torch.float64).contiguous(),
        u_final.to(device, torch.float64).contiguous(),
        out,
        K,
        V,
        HAS_Q=draft_probs is not None,
        KB=max(1, triton.next_power_of_2(K)),
        BLOCK=block or default_block(),
    )
    return out


block_verifier = chain_verifier(block, "u_eta")
