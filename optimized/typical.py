"""Typical acceptance (Medusa), batched (reference: ``rules/typical.py``): NOT lossless.

``typical(parents, tokens, target_probs, u_final, eps=0.09, delta=0.3)`` returns
``(accepted_nodes [B, N], next_token [B])``, equal to the reference's on the same ``u_final``
(site ``("final", 0)``; acceptance itself is deterministic). ``typical_chain`` takes the chain
contract's layout. Backends ``optimized.typical`` (chain and tree) are expected to be flagged
lossy by the audit. Rule: Cai et al. 2024, proofs_notes/typical.md; coupling:
proofs_notes/optimized_coupling.md.

The entropy uses the kernel's ``log`` and ``exp`` (the interpreter's are NumPy's, a GPU's are
libdevice's); they may differ from Python's ``math`` in the last bit, which moves a decision
only when ``P(x)`` lies within that rounding of the threshold.
"""

from __future__ import annotations

import torch

from specproof.reference.errors import BadParameterError

from ._contract import check_unread_draft
from ._device import default_block, on_kernel_device
from ._tree import f64, prepare
from .kernels.typical_tree import typical_tree_kernel


@on_kernel_device
def typical(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    target_probs: torch.Tensor,
    u_final: torch.Tensor,
    eps: float = 0.09,
    delta: float = 0.3,
    block: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    if not 0 < eps <= 1:
        raise BadParameterError("eps", f"must be in (0, 1], got {eps!r}")
    if not delta > 0:
        raise BadParameterError("delta", f"must be > 0, got {delta!r}")
    t = prepare(parents, tokens, None, target_probs, {"u_final": (u_final, "row")})
    if t.B == 0:
        return t.accepted, t.next_token
    device = t.target.device
    typical_tree_kernel[(t.B,)](
        t.parents,
        t.tokens,
        t.target,
        f64(u_final, device),
        t.accepted,
        t.next_token,
        t.N,
        t.V,
        float(eps),
        float(delta),
        NB=t.NB,
        BLOCK=block or default_block(),
    )
    return t.accepted, t.next_token


def typical_verifier(parents, tokens, draft_probs, target_probs, generator):
    """The tree contract: one uniform per row (u_final)."""
    check_unread_draft((parents, tokens, draft_probs, target_probs), chain=False)
    u_final = torch.rand(parents.shape[0], generator=generator, dtype=torch.float64)
    return typical(parents, tokens, target_probs, u_final)


def chain_as_tree(
    draft_token_ids: torch.Tensor, target_probs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A chain's parents ``[-1, 0, ..., K-1]`` and tokens (node 0's token is never read)."""
    from specproof.reference.validate import check_chain

    B, K, _ = check_chain(draft_token_ids, None, target_probs)
    parents = torch.arange(-1, K, device=target_probs.device).expand(B, K + 1)
    tokens = torch.cat(
        [torch.zeros(B, 1, dtype=torch.int64, device=draft_token_ids.device), draft_token_ids.long()], 1
    )
    return parents, tokens


def chain_output(accepted: torch.Tensor, next_token: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``output_token_ids [B, K+1]`` from a chain's accepted path and next token."""
    B, N = accepted.shape
    L = (accepted >= 0).sum(1) - 1  # accepted drafts
    cols = torch.arange(N, device=accepted.device)[None, :]
    out = torch.where(cols < L[:, None], torch.cat([tokens[:, 1:], tokens.new_zeros(B, 1)], 1), -1)
    out[torch.arange(B), L] = next_token
    return out


def typical_chain_verifier(draft_token_ids, draft_probs, target_probs, generator):
    """The chain contract: the chain verified as a tree (draft laws ignored)."""
    check_unread_draft((draft_token_ids, draft_probs, target_probs), chain=True)
    parents, tokens = chain_as_tree(draft_token_ids, target_probs)
    u_final = torch.rand(parents.shape[0], generator=generator, dtype=torch.float64)
    acc, nxt = typical(parents, tokens, target_probs, u_final)
    return chain_output(acc, nxt, tokens)
