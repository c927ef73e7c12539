"""An independent draft model, batched (reference: ``reference/proposers/draft_model.py``).

The draft transformer's weights run as a :class:`~specproof.optimized.transformer.PagedTransformer`
on a paged cache of its own holding the committed tokens. :meth:`begin` runs the tokens
committed since the last step as one ragged causal chain per row (node 0 last, whose logits
give the root law); :meth:`expand` runs the new draft nodes as a tree over that cache (node
``nid`` at slot ``n - 1 + nid``, seeing the committed tokens and its ancestors), so a chain is
drafted one batched forward per depth. The reference recomputes each law with a full forward
of the context; the two agree within float64 rounding (tests/test_optimized_decode.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from specproof.reference.transformer import TransformerLM

from ..paged_kv import QueryBatch, chain_rows
from ..transformer import PagedTransformer
from .selfdraft import BatchedDrafter, Node, Placement, StepTrees, to_law


class DraftModel(BatchedDrafter):
    def __init__(self, lm: TransformerLM, at: Placement) -> None:
        self.model = PagedTransformer(lm.model, at.dtype, at.device)
        self.temperature = lm.temperature
        self.vocab = lm.vocab
        self.cache = self.model.new_cache(at.num_blocks, at.block_size, at.poison)
        self._rids: list[Hashable] = []
        self._tree: StepTrees | None = None

    def admit(self, rid: Hashable, prompt: Sequence[int]) -> None:
        self.cache.admit(rid)

    def release(self, rid: Hashable) -> None:
        self.cache.release(rid)

    def begin(self, rids: Sequence[Hashable], contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        starts = [self.cache.lengths[r] for r in rids]
        chains = [list(c[s:]) for s, c in zip(starts, contexts)]
        batch = QueryBatch.build(self.cache, rids, chain_rows(starts, chains))
        logits, _ = self.model.forward(batch, self.cache)
        for r, c in zip(rids, contexts):
            self.cache.set_length(r, len(c))
        self._rids = list(rids)
        self._tree = StepTrees([len(c) - 1 for c in contexts])
        return to_law(logits[batch.start + batch.count - 1], self.temperature)

    def expand(self, nodes: Sequence[Node]) -> torch.Tensor:
        assert self._tree is not None, "expand before begin"
        rows, queries, index = self._tree.queries(nodes)
        batch = QueryBatch.build(self.cache, [self._rids[b] for b in rows], queries)
        logits, _ = self.model.forward(batch, self.cache)
        return to_law(logits[index], self.temperature)

    def end(self) -> None:
        if self._tree is not None:
            for r, root in zip(self._rids, self._tree.root):
                self.cache.set_length(r, root + 1)
        self._tree = None
