"""EAGLE-1's draft network, batched (reference: ``reference/proposers/eagle1.py``); EAGLE-2 is
the same network drafting the dynamic tree (:func:`.processes.propose_dynamic`).

The draft block's input at position i is ``a_i = FC([f_i ; E x_{i+1}])``; its output ``o_i``
is the predicted feature of position i + 1, and ``LMHead(o_i)`` the law of ``x_{i+2}``. Over
the committed positions ``f_i`` is the target's top-layer feature, so those inputs never change:
their K/V stay in the drafter's paged cache, and :meth:`FeatureDraft.begin` runs only the
positions committed since the last step (one ragged chain per row), the last of which
(position n - 2, paired with node 0's token) gives the root law. Below node 0 the draft feeds
back its own output: a node's input is ``FC([o_parent ; E token])``, run as a tree over the
cache (node ``nid`` at slot ``n - 2 + nid``, position ``n - 2 + depth``, seeing the committed
positions and its ancestors), one batched forward per depth.

:class:`FeatureDraft` is shared with EAGLE-3 (:mod:`.eagle3`), which differs in the feature
(fused low/mid/high through its own FC) and the head (its own).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch

from specproof.reference.errors import InternalError
from specproof.reference.proposers.eagle1 import Eagle1Net
from specproof.reference.transformer import Block, TinyTransformer

from ..paged_kv import QueryBatch, chain_rows
from .selfdraft import (
    BatchedDrafter,
    BlockNet,
    FeatureCache,
    Features,
    Node,
    Placement,
    StepTrees,
    TargetHead,
    need_two,
    to_law,
)


class FeatureDraft(FeatureCache, BatchedDrafter):
    """A feature-level autoregressive draft (module doc)."""

    reads_features = True

    def __init__(
        self,
        target: TinyTransformer,
        block: Block,
        fc: torch.Tensor,
        layers: Sequence[int],
        feature: Callable[[list[torch.Tensor]], torch.Tensor],
        head: Callable[[torch.Tensor], torch.Tensor],
        at: Placement,
    ) -> None:
        self.vocab = target.vocab
        self.embed = at.copy(target.embed)
        self.fc = at.copy(fc)
        self.net = BlockNet([block], target, at)
        self.cache = self.net.cache()
        self.features = Features(layers)
        self.feature, self.head = feature, head
        self._rids: list[Hashable] = []
        self._tree: StepTrees | None = None
        self._out: dict[tuple[int, int], torch.Tensor] = {}

    def _inputs(self, feats: torch.Tensor, tokens: Sequence[int]) -> torch.Tensor:
        return torch.cat([feats, self.embed[list(tokens)]], -1) @ self.fc

    def begin(self, rids: Sequence[Hashable], contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        starts, xs, chains = [], [], []
        for r, c in zip(rids, contexts):
            n = len(c)
            need_two(r, n)
            lo = self.cache.lengths[r]
            if self.features.count(r) < n - 1:
                raise InternalError(f"request {r!r}: target features of {n - 1} positions expected")
            starts.append(lo)
            xs.append(self._inputs(self.feature(self.features.get(r, lo, n - 1)), c[lo + 1 : n]))
            chains.append([0] * (n - 1 - lo))
        batch = QueryBatch.build(self.cache, rids, chain_rows(starts, chains))
        out = self.net.run(torch.cat(xs), batch, self.cache)
        last = out[batch.start + batch.count - 1]
        for r, c in zip(rids, contexts):
            self.cache.set_length(r, len(c) - 1)
        self._rids = list(rids)
        self._tree = StepTrees([len(c) - 2 for c in contexts])
        self._out = {(b, 0): last[b] for b in range(len(rids))}
        return to_law(self.head(last))

    def expand(self, nodes: Sequence[Node]) -> torch.Tensor:
        assert self._tree is not None, "expand before begin"
        rows, queries, index = self._tree.queries(nodes)
        parents = torch.stack([self._out[(n.row, n.parent)] for n in nodes])
        x = self._inputs(parents, [n.token for n in nodes])
        x_batch = torch.empty_like(x)
        x_batch[index] = x
        batch = QueryBatch.build(self.cache, [self._rids[b] for b in rows], queries)
        out = self.net.run(x_batch, batch, self.cache)[index]
        for n, o in zip(nodes, out):
            self._out[(n.row, n.nid)] = o
        return to_law(self.head(out))

    def end(self) -> None:
        if self._tree is not None:
            for r, root in zip(self._rids, self._tree.root):
                self.cache.set_length(r, root + 1)
        self._tree = None
        self._out = {}


class Eagle1(FeatureDraft):
    def __init__(self, net: Eagle1Net, target: TinyTransformer, at: Placement) -> None:
        layers = [target.config.layers]
        super().__init__(target, net.block, net.fc, layers, lambda h: h[0], TargetHead(target, at), at)
