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

from specproof.reference.validate import check_chain_call

from ._contract import chain_verifier
from ._device import on_kernel_device
from ._split import LAUNCH, block_size, choose_path, chunking, counters
from .kernels.token_chain import token_chain_kernel
from .kernels.token_split import token_split_kernel


@on_kernel_device
def token(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    u_accept: torch.Tensor,
    u_final: torch.Tensor,
    block: int | None = None,
    path: str = "auto",
    chunk: int | None = None,
    validate: bool = True,
    num_warps: int | None = None,
) -> torch.Tensor:
    """``output_token_ids [B, K+1]``: accepted drafts, the corrected or bonus token, then -1.

    ``path``: "row" (one program per row, bit-identical to the reference under the
    interpreter), "split" (the stop row split over ``chunk``-sized programs, one pass over its
    bytes and one launch; see :mod:`.kernels.token_split`) or "auto" (split on a GPU when
    V >= 8192). ``validate=False`` skips the input checks (a caller that has validated once,
    or a benchmark of the kernels alone); malformed input then gives undefined tokens.
    ``num_warps`` is a GPU tuning knob (Triton's default when None).
    """
    B, K, V = check_chain_call(
        draft_token_ids, draft_probs, target_probs, ("u_accept", u_accept), u_final, validate
    )
    path = choose_path(path, V)
    block = block_size(block)
    device = target_probs.device
    if path == "split":  # its kernel writes every position, padding included
        out = torch.empty((B, K + 1), dtype=torch.int64, device=device)
    else:
        out = torch.full((B, K + 1), -1, dtype=torch.int64, device=device)
    if B == 0:
        return out
    x = draft_token_ids.to(device=device, dtype=torch.int64).contiguous()
    p = target_probs.contiguous()
    q = draft_probs.contiguous() if draft_probs is not None else p  # never read without HAS_Q
    ua = u_accept.to(device, torch.float64).contiguous()
    uf = u_final.to(device, torch.float64).contiguous()
    KB = max(1, triton.next_power_of_2(K))
    has_q = draft_probs is not None
    opts = dict(LAUNCH, **({"num_warps": num_warps} if num_warps else {}))
    if path == "row":
        token_chain_kernel[(B,)](x, q, p, ua, uf, out, K, V, HAS_Q=has_q, KB=KB, BLOCK=block, **opts)
        return out
    chunk, C, CB = chunking(V, target_probs.element_size(), block, chunk)
    parts = torch.empty(B, C, dtype=torch.float64, device=device)
    token_split_kernel[(B, C)](
        x, q, p, ua, uf, out, parts, counters(B, device), K, V, C, chunk,
        HAS_Q=has_q, KB=KB, CB=CB, BLOCK=block, **opts,
    )  # fmt: skip
    return out


token_verifier = chain_verifier(token, "u_accept")
