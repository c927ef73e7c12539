"""The target-only tree rule, batched (reference: ``rules/target_only.py``).

``target_only(parents, tokens, target_probs, u_coin, u_final, threshold_single=1,
threshold_acc=1)``: ``u_coin[b, v]`` is the uniform of site ``("coin", v)`` of row b,
``u_final[b]`` that of ``("final", 0)``. No draft law is read. Equal to the reference on the
same uniforms (``tests/test_optimized_tree.py``). ``target_only_verifier`` implements the tree
contract (backend ``optimized.target_only``; ``optimized.target_only[threshold_single=0.3]``
and ``[threshold_acc=0.5]`` are the lossy SGLang knobs). Rule: EAGLE / SGLang's tree sampler,
proofs_notes/target_only.md; coupling: proofs_notes/optimized_coupling.md.
"""

from __future__ import annotations

import functools

import torch

from specproof.reference.rules.target_only import check_thresholds

from ._contract import tree_verifier
from ._device import on_kernel_device
from ._split import LAUNCH, block_size, choose_path, chunking, counters
from ._tree import f64, prepare
from .kernels.target_only_tree import target_only_split_kernel, target_only_tree_kernel


@on_kernel_device
def target_only(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    target_probs: torch.Tensor,
    u_coin: torch.Tensor,
    u_final: torch.Tensor,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    block: int | None = None,
    path: str = "auto",
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``path``: "row" (one program per row), "split" (the stop node's row spread over
    ``chunk``-sized programs, one launch) or "auto" (split on a GPU when V >= 8192)."""
    check_thresholds(threshold_single, threshold_acc)
    t = prepare(
        parents, tokens, None, target_probs, {"u_coin": (u_coin, "node"), "u_final": (u_final, "row")}
    )
    if t.B == 0:
        return t.accepted, t.next_token
    device = t.target.device
    path = choose_path(path, t.V)
    block = block_size(block)
    args = (
        t.parents,
        t.tokens,
        t.target,
        f64(u_coin, device),
        f64(u_final, device),
        t.accepted,
        t.next_token,
    )
    if path == "row":
        target_only_tree_kernel[(t.B,)](
            *args, t.N, t.V, float(threshold_single), float(threshold_acc), NB=t.NB, BLOCK=block, **LAUNCH
        )
    else:
        chunk, C, CB = chunking(t.V, t.target.element_size(), block, chunk)
        parts = torch.empty(t.B, C, dtype=torch.float64, device=device)
        target_only_split_kernel[(t.B, C)](
            *args, parts, counters(t.B, device), t.N, t.V, float(threshold_single), float(threshold_acc),
            C, chunk, NB=t.NB, CB=CB, BLOCK=block, **LAUNCH,
        )  # fmt: skip
    return t.accepted, t.next_token


target_only_verifier = tree_verifier(target_only, "u_coin", reads_draft=False)
single_03_verifier = tree_verifier(
    functools.partial(target_only, threshold_single=0.3), "u_coin", reads_draft=False
)
acc_05_verifier = tree_verifier(
    functools.partial(target_only, threshold_acc=0.5), "u_coin", reads_draft=False
)
