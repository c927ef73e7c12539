"""Token-level speculative sampling on chains, batched (reference: ``rules/token.py``).

``token(draft_token_ids, draft_probs, target_probs, u_accept, u_final)`` consumes explicit
uniforms in the reference's tape layout: ``u_accept[b, c]`` is site ``("accept", c)`` of row b
(c = 1..K; column 0 is unused) and ``u_final[b]`` is site ``("final", 0)``. Given the same
uniforms it returns what :func:`specproof.reference.rules.token` returns for each row (the
coupling test: ``tests/test_optimized_coupled.py``). ``token_verifier`` draws the uniforms from
a ``torch.Generator`` and implements the chain contract; it is registered as backend
``optimized.token``. Rule: Leviathan et al. 2023, Chen et al. 2023 (proofs_notes/token.md);
coupling to the reference: proofs_notes/optimized_coupling.md.
"""

from __future__ import annotations

import torch
import triton

from .kernels.token_chain import token_chain_kernel
from .validate import check_chain, check_uniforms

BLOCK = 128


def token(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    u_accept: torch.Tensor,
    u_final: torch.Tensor,
    block: int = BLOCK,
) -> torch.Tensor:
    """``output_token_ids [B, K+1]``: accepted drafts, the corrected or bonus token, then -1."""
    B, K, V = check_chain(draft_token_ids, draft_probs, target_probs)
    check_uniforms(u_accept, "u_accept", (B, K + 1))
    check_uniforms(u_final, "u_final", (B,))
    device = target_probs.device
    out = torch.full((B, K + 1), -1, dtype=torch.int64, device=device)
    if B == 0:
        return out
    x = draft_token_ids.to(device=device, dtype=torch.int64).contiguous()
    p = target_probs.contiguous()
    q = draft_probs.contiguous() if draft_probs is not None else p  # never read without HAS_Q
    token_chain_kernel[(B,)](
        x,
        q,
        p,
        u_accept.to(device, torch.float64).contiguous(),
        u_final.to(device, torch.float64).contiguous(),
        out,
        K,
        V,
        HAS_Q=draft_probs is not None,
        KB=max(1, triton.next_power_of_2(K)),
        BLOCK=block,
    )
    return out


def token_verifier(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    """The chain contract: uniforms drawn from ``generator`` (u_accept first, then u_final)."""
    B, K = draft_token_ids.shape[0], draft_token_ids.shape[1] if draft_token_ids.dim() == 2 else 0
    u_accept = torch.rand(B, K + 1, generator=generator, dtype=torch.float64)
    u_final = torch.rand(B, generator=generator, dtype=torch.float64)
    return token(draft_token_ids, draft_probs, target_probs, u_accept, u_final)
