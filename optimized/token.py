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

from ._contract import chain_verifier
from ._device import on_kernel_device
from ._split import LAUNCH, block_size, chunking, counters
from ._tree import prepare_chain
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
    c = prepare_chain(
        path, validate, draft_token_ids, draft_probs, target_probs, ("u_accept", u_accept), u_final
    )
    if c.B == 0:
        return c.out
    block = block_size(block)
    opts = dict(LAUNCH, **({"num_warps": num_warps} if num_warps else {}))
    B, K, V = c.B, c.K, c.V
    if c.path == "row":
        token_chain_kernel[(B,)](
            c.x, c.q, c.p, c.u, c.u_final, c.out, K, V, HAS_Q=c.has_q, KB=c.KB, BLOCK=block, **opts
        )
        return c.out
    chunk, C, CB = chunking(V, c.p.element_size(), block, chunk)
    parts = torch.empty(B, C, dtype=torch.float64, device=c.p.device)
    token_split_kernel[(B, C)](
        c.x, c.q, c.p, c.u, c.u_final, c.out, parts, counters(B, c.p.device), K, V, C, chunk,
        HAS_Q=c.has_q, KB=c.KB, CB=CB, BLOCK=block, **opts,
    )  # fmt: skip
    return c.out


token_verifier = chain_verifier(token, "u_accept")
