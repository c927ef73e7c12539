"""Medusa heads, batched (reference: ``reference/proposers/medusa.py``).

Head ``j`` on the target's final-normed top hidden state ``h`` at the last cached position:
``softmax((h + SiLU(h W_j)) U_j)``. A node at depth d drafts from head d + 1 whatever its path,
so :meth:`begin` computes every head's law for every row in one batched pass and
:meth:`expand` only looks them up. ``h`` comes from the loop's commits (:meth:`observe`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from specproof.reference.proposers.medusa import MedusaHeads
from specproof.reference.transformer import TinyTransformer, rms_norm

from .selfdraft import BatchedDrafter, LawTable, Placement, need_two, to_law


class Medusa(LawTable, BatchedDrafter):
    reads_features = True

    def __init__(self, net: MedusaHeads, target: TinyTransformer, at: Placement) -> None:
        self.vocab = target.vocab
        self.max_depth = net.max_depth
        self.res = at.copy(net.res)  # [heads, W, W]
        self.out = at.copy(net.out)  # [heads, W, V]
        self.norm = at.copy(target.norm)
        self.last: dict[Hashable, torch.Tensor] = {}

    def release(self, rid: Hashable) -> None:
        self.last.pop(rid, None)

    def observe(self, rid: Hashable, hidden: list[torch.Tensor]) -> None:
        if hidden[-1].shape[0]:
            self.last[rid] = hidden[-1][-1]

    def begin(self, rids: Sequence[Hashable], contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        for r, c in zip(rids, contexts):
            need_two(r, len(c))
        h = rms_norm(torch.stack([self.last[r] for r in rids]), self.norm)  # [B, W]
        z = h[None] + torch.nn.functional.silu(torch.einsum("bw,jwv->jbv", h, self.res))  # [heads, B, W]
        self._laws = to_law(torch.einsum("jbw,jwv->bjv", z, self.out))  # [B, heads, V]
        return self._laws[:, 0]
