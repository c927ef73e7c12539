"""What every kernel's wrapper shares: validated, contiguous inputs and the outputs, for trees
(:func:`prepare`) and chains (:func:`prepare_chain`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from specproof.reference.validate import check_chain_call, check_tree, check_uniforms

from ._split import choose_path


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


@dataclass
class ChainLaunch:
    B: int
    K: int
    V: int
    path: str  # "row" or "split", chosen
    x: torch.Tensor  # draft token ids [B, K] int64
    q: torch.Tensor  # the draft laws, or p where there are none (never read without has_q)
    p: torch.Tensor
    u: torch.Tensor  # the per-position uniforms [B, K + 1] float64
    u_final: torch.Tensor  # [B] float64
    out: torch.Tensor  # [B, K + 1] int64
    has_q: bool
    KB: int


def prepare_chain(
    path: str,
    validate: bool,
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    u: tuple[str, torch.Tensor],
    u_final: torch.Tensor,
) -> ChainLaunch:
    """Validate (unless ``validate`` is False) and lay a chain rule's inputs out for a launch;
    ``u`` is the per-position uniforms with their argument's name. On the "split" path the
    kernel writes every position of ``out``, padding included; on "row" it starts at -1."""
    B, K, V = check_chain_call(draft_token_ids, draft_probs, target_probs, u, u_final, validate)
    path = choose_path(path, V)
    device = target_probs.device
    if path == "split":
        out = torch.empty((B, K + 1), dtype=torch.int64, device=device)
    else:
        out = torch.full((B, K + 1), -1, dtype=torch.int64, device=device)
    p = target_probs.contiguous()
    return ChainLaunch(
        B,
        K,
        V,
        path,
        draft_token_ids.to(device=device, dtype=torch.int64).contiguous(),
        draft_probs.contiguous() if draft_probs is not None else p,
        p,
        f64(u[1], device),
        f64(u_final, device),
        out,
        draft_probs is not None,
        max(1, triton.next_power_of_2(K)),
    )
