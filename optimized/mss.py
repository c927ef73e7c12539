"""Multi-draft speculative sampling with replacement on trees, batched (reference: ``rules/mss.py``).

``mss(parents, tokens, draft_probs, target_probs, u_accept, u_final)``: ``u_accept[b, c]`` is
the uniform of site ``("accept", c)`` of row b (column 0 unused), ``u_final[b]`` that of
``("final", 0)``. Returns ``(accepted_nodes [B, N], next_token [B])`` equal to the reference's
on the same uniforms (``tests/test_optimized_tree.py``). ``mss_verifier`` draws the uniforms
from a ``torch.Generator`` (the tree contract; backend ``optimized.mss``). Rule: SpecInfer
(Miao et al. 2024), proofs_notes/mss.md; coupling: proofs_notes/optimized_coupling.md.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._contract import tree_verifier
from ._device import on_kernel_device
from ._split import LAUNCH, block_size, choose_path, chunking, counters, multi_draft_passes, tree_shapes
from ._tree import TreeLaunch, f64, prepare
from .kernels.multi_draft import multi_draft_kernel, multi_draft_level_kernel


def launch(
    t: TreeLaunch,
    passes: int,
    without_replacement: bool,
    ua: torch.Tensor,
    uf: torch.Tensor,
    block: int,
    path: str,
    chunk: int | None,
) -> None:
    """Run mss or rrs on the prepared trees ``t``, ``ua``/``uf`` their uniforms on the kernel's
    device, ``path`` chosen: "row" (one program per row) or "split" (``passes`` launches, one per
    full-row pass of the walk, each row's pass spread over ``chunk``-sized programs)."""
    device = t.target.device
    q = t.draft if t.draft is not None else t.target  # never read without HAS_Q
    if path == "row":
        scratch = torch.empty(2, t.B, t.V, dtype=torch.float64, device=device)
        multi_draft_kernel[(t.B,)](
            t.parents, t.tokens, q, t.target, ua, uf, scratch[0], scratch[1], t.accepted, t.next_token,
            t.N, t.V, HAS_Q=t.draft is not None, WITHOUT_REPLACEMENT=without_replacement, BLOCK=block,
            **LAUNCH,
        )  # fmt: skip
        return
    chunk, C, CB = chunking(t.V, t.target.element_size(), block, chunk)
    state = torch.empty(t.B, 4, dtype=torch.int64, device=device)
    hx = torch.empty(t.B, t.NB, dtype=torch.int64, device=device)
    hz = torch.empty(t.B, t.NB, dtype=torch.float64, device=device)
    hs = torch.empty(t.B, t.NB, dtype=torch.float64, device=device)
    parts = torch.empty(2, t.B, C, dtype=torch.float64, device=device)
    cnt = counters(t.B, device)
    for level in range(passes):
        multi_draft_level_kernel[(t.B, C)](
            t.parents, t.tokens, q, t.target, ua, uf, t.accepted, t.next_token, state, hx, hz, hs,
            parts[0], parts[1], cnt, t.N, t.V, C, chunk, level,
            HAS_Q=t.draft is not None, WITHOUT_REPLACEMENT=without_replacement, NB=t.NB, CB=CB, BLOCK=block,
            **LAUNCH,
        )  # fmt: skip


Accepted = tuple[torch.Tensor, torch.Tensor]  # (accepted_nodes [B, N], next_token [B])


def multi_draft_rule(without_replacement: bool, name: str) -> Callable[..., Accepted]:
    """The rule ``name``, drafts drawn with replacement (mss) or without (rrs). ``path``: "row",
    "split" or "auto" (split on a GPU when V >= 8192), as :func:`launch` says."""

    def rule(
        parents: torch.Tensor,
        tokens: torch.Tensor,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        u_accept: torch.Tensor,
        u_final: torch.Tensor,
        block: int | None = None,
        path: str = "auto",
        chunk: int | None = None,
    ) -> Accepted:
        u = {"u_accept": (u_accept, "node"), "u_final": (u_final, "row")}
        t = prepare(parents, tokens, draft_probs, target_probs, u)
        if t.B:
            device = t.target.device
            passes = max(multi_draft_passes(s) for s in tree_shapes(parents))
            ua, uf = f64(u_accept, device), f64(u_final, device)
            launch(t, passes, without_replacement, ua, uf, block_size(block), choose_path(path, t.V), chunk)
        return t.accepted, t.next_token

    rule.__name__ = rule.__qualname__ = name
    return on_kernel_device(rule)


mss = multi_draft_rule(False, "mss")


mss_verifier = tree_verifier(mss, "u_accept")
