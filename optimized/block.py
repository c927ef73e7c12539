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
from ._device import on_kernel_device
from ._split import LAUNCH, block_size, chunking, counters
from ._tree import prepare_chain
from .kernels.block_chain import block_chain_kernel
from .kernels.block_split import block_level_kernel


@on_kernel_device
def block(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    u_eta: torch.Tensor,
    u_final: torch.Tensor,
    block: int | None = None,
    validate: bool = True,
    path: str = "auto",
    chunk: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """``output_token_ids [B, K+1]``: accepted drafts X_1..X_tau, then Y, then -1.

    ``path``: "row" (one program per row, bit-identical to the reference under the
    interpreter), "split" (each level's row split over ``chunk``-sized programs, K + 1
    launches; see :mod:`.kernels.block_split`) or "auto" (split on a GPU when V >= 8192).
    ``validate=False``: inputs already checked by the caller (or a benchmark).
    """
    c = prepare_chain(path, validate, draft_token_ids, draft_probs, target_probs, ("u_eta", u_eta), u_final)
    if c.B == 0:
        return c.out  # on "split" the deciding program writes the whole row
    block = block_size(block)
    opts = dict(LAUNCH, **({"num_warps": num_warps} if num_warps else {}))
    B, K, V, device = c.B, c.K, c.V, c.p.device
    if c.path == "row":
        block_chain_kernel[(B,)](
            c.x, c.q, c.p, c.u, c.u_final, c.out, K, V, HAS_Q=c.has_q, KB=c.KB, BLOCK=block, **opts
        )
        return c.out
    chunk, C, CB = chunking(V, c.p.element_size(), block, chunk)
    pw = torch.empty(B, K + 1, dtype=torch.float64, device=device)
    state = torch.empty(B, dtype=torch.int32, device=device)  # written at LEVEL = K
    parts = torch.empty(B, C, dtype=torch.float64, device=device)
    cnt = counters(B, device)
    KB1 = triton.next_power_of_2(K + 1)
    for level in range(K, -1, -1):
        block_level_kernel[(B, C)](
            c.x, c.q, c.p, c.u, c.u_final, c.out, pw, state, parts, cnt, K, V, C, chunk, level,
            HAS_Q=c.has_q, KB=c.KB, KB1=KB1, CB=CB, BLOCK=block, **opts,
        )  # fmt: skip
    return c.out


block_verifier = chain_verifier(block, "u_eta")
