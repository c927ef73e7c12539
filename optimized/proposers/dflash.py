"""DFlash-style block drafting, batched (reference: ``reference/proposers/dflash.py``).

One pass per step: the context rows ``c_i = FC([l_i ; m_i ; h_i])`` (causal among themselves;
their K/V stay in the drafter's paged cache, so only the positions committed since the last
step are run) and the block rows (node 0's embedding, then B mask embeddings, at the positions
that follow), which see the whole context and each other. Block row j + 1 gives the law of
depth j whatever the path: :meth:`DFlash.begin` computes all of them for every row in one
forward, :meth:`DFlash.expand` looks them up.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from specproof.reference.proposers.dflash import DFlashNet
from specproof.reference.transformer import TinyTransformer

from ..paged_kv import QueryBatch, RowQueries, ancestor_masks
from .selfdraft import (
    BatchedDrafter,
    BlockNet,
    FeatureCache,
    Features,
    LawTable,
    OwnHeadWeights,
    Placement,
    fused,
    fused_layers,
    need_two,
    to_law,
)


class DFlash(LawTable, FeatureCache, BatchedDrafter):
    reads_features = True

    def __init__(self, net: DFlashNet, target: TinyTransformer, at: Placement) -> None:
        self.vocab = target.vocab
        self.max_depth = net.max_depth
        self.B = int(net.max_depth or 0)
        self.ctx = at.copy(net.ctx)
        self.mask_row = at.copy(net.mask)
        self.embed = at.copy(target.embed)
        self.net = BlockNet([net.block], target, at)
        self.head = OwnHeadWeights(net.head, at)
        self.cache = self.net.cache()
        self.features = Features(fused_layers(target))
        # block rows see each other: every bit of the block region set
        self._all = ancestor_masks([-1] + list(range(self.B)))[-1:]  # bits 0..B: the block region

    def begin(self, rids: Sequence[Hashable], contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        rows, xs = [], []
        nb = self.B + 1
        for r, c in zip(rids, contexts):
            need_two(r, len(c))
            T = len(c) - 1
            lo = self.cache.lengths[r]
            ctx_rows = fused(self.features.get(r, lo, T)) @ self.ctx
            xs.append(torch.cat([ctx_rows, self.embed[c[-1]][None], self.mask_row.expand(self.B, -1)]))
            slots = list(range(lo, T + nb))
            mask = torch.zeros(len(slots), self._all.shape[1], dtype=torch.int32)
            mask[T - lo :] = self._all
            rows.append(
                RowQueries(
                    [0] * len(slots), slots, slots, [s + 1 for s in slots[: T - lo]] + [T] * nb, T, nb, mask
                )
            )
        batch = QueryBatch.build(self.cache, rids, rows)
        out = self.net.run(torch.cat(xs), batch, self.cache)
        first = batch.start + batch.count - self.B  # block row 1 of each row
        idx = first[:, None] + torch.arange(self.B, device=first.device)[None, :]
        self._laws = to_law(self.head(out[idx]))  # [B rows, block, V]
        for r, c in zip(rids, contexts):
            self.cache.set_length(r, len(c) - 1)
        return self._laws[:, 0]
