"""What every tree kernel's wrapper shares: validated, contiguous inputs and the outputs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from specproof.reference.validate import check_tree, check_uniforms


@dataclass
class TreeLaunch:
    B: int
    N: int
    V: int
    parents: torch.Tensor
    tokens: torch.Tensor
    draft: torch.Tensor | None
    target: torch.Tensor
    accepted: torch.Tensor  # [B, N] int64, -1 padded
    next_token: torch.Tensor  # [B] int64
    NB: int


def prepare(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    uniforms: dict[str, tuple[torch.Tensor, str]] | None = None,
) -> TreeLaunch:
    """Validate (raising the reference's exceptions) and lay the inputs out for a launch.

    ``uniforms`` maps an argument name to ``(tensor, kind)`` where kind is ``"node"`` for a
    [B, N] tape column per node or ``"row"`` for one [B] uniform per row.
    """
    B, N, V = check_tree(parents, tokens, draft_probs, target_probs)
    for name, (u, kind) in (uniforms or {}).items():
        check_uniforms(u, name, (B, N) if kind == "node" else (B,))
    device = target_probs.device
    return TreeLaunch(
        B,
        N,
        V,
        parents.to(device=device, dtype=torch.int64).contiguous(),
        tokens.to(device=device, dtype=torch.int64).contiguous(),
        None if draft_probs is None else draft_probs.contiguous(),
        target_probs.contiguous(),
        torch.full((B, N), -1, dtype=torch.int64, device=device),
        torch.zeros(B, dtype=torch.int64, device=device),
        max(1, triton.next_power_of_2(N)),
    )


def f64(u: torch.Tensor, device: torch.device) -> torch.Tensor:
    return u.to(device, torch.float64).contiguous()
