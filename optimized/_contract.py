"""Generator-based wrappers: the black-box contracts over the explicit-uniform kernels.

Each kernel takes one uniform per tape site (a ``[B, K+1]`` or ``[B, N]`` column block, then
``u_final [B]``); these wrappers draw them from the contract's ``torch.Generator`` in that order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from specproof.reference.validate import check_chain, check_tree


def _name(fn: Callable[..., Any]) -> str:
    if isinstance(fn, functools.partial):
        return fn.func.__name__
    return fn.__name__


def chain_verifier(kernel: Callable[..., torch.Tensor], sites: str) -> Callable[..., torch.Tensor]:
    """The chain contract over ``kernel(x, q, p, u_sites [B, K+1], u_final [B])``."""

    def verify(
        draft_token_ids: torch.Tensor,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        generator: torch.Generator,
    ) -> torch.Tensor:
        B = draft_token_ids.shape[0]
        K = draft_token_ids.shape[1] if draft_token_ids.dim() == 2 else 0
        u = torch.rand(B, K + 1, generator=generator, dtype=torch.float64)
        u_final = torch.rand(B, generator=generator, dtype=torch.float64)
        return kernel(draft_token_ids, draft_probs, target_probs, u, u_final)

    verify.__name__ = f"{_name(kernel)}_verifier"
    verify.__doc__ = f"The chain contract: {sites} [B, K+1], then u_final [B], drawn from ``generator``."
    return verify


def tree_verifier(kernel: Callable[..., Any], sites: str, reads_draft: bool = True) -> Callable[..., Any]:
    """The tree contract over ``kernel(parents, tokens, [q,] p, u_sites [B, N], u_final [B])``."""

    def verify(
        parents: torch.Tensor,
        tokens: torch.Tensor,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        B, N = parents.shape
        u = torch.rand(B, N, generator=generator, dtype=torch.float64)
        u_final = torch.rand(B, generator=generator, dtype=torch.float64)
        if reads_draft:
            return kernel(parents, tokens, draft_probs, target_probs, u, u_final)
        check_tree(parents, tokens, draft_probs, target_probs)  # the kernel never sees q: check it here
        return kernel(parents, tokens, target_probs, u, u_final)

    verify.__name__ = f"{_name(kernel)}_verifier"
    verify.__doc__ = f"The tree contract: {sites} [B, N], then u_final [B], drawn from ``generator``."
    return verify


def check_unread_draft(args: tuple[Any, ...], chain: bool) -> None:
    """Validate the contract's inputs, ``draft_probs`` included, for a rule whose kernel does not
    read the draft laws: the reference refuses a malformed ``draft_probs`` whether or not its rule
    reads it, so the optimized contract does too."""
    if chain:
        check_chain(*args)
    else:
        check_tree(*args)
