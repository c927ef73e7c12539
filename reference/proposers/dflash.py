"""DFlash-style block drafting (Chen et al. 2026, "DFlash: Block Diffusion for Flash Speculative
Decoding"): one parallel pass proposes a whole block, each position's law conditioned on the
context only, never on the other drafts.

The draft is one transformer block over two parts:

* the context: ``c_i = FC([l_i ; m_i ; h_i])`` (3W -> W) for every committed feature (the
  target's embeddings, middle and top hidden states), causal among themselves;
* the block: node 0's embedding, then B copies of a learned mask embedding, at the positions
  that follow; every block row sees the whole context and the whole block (bidirectional).

The draft law of depth ``j`` (j = 1..B) is ``softmax(Head(o_j))`` at block row j: a function of
the committed prefix and of j alone. Sampling the B drafts independently from these laws is the
``iid_chain`` process with a draft model that ignores the path (q at a node is the law the
node's child was drawn from), so token-level verification of the chain is exact
(proofs_notes/token.md).

Its declared process, and why: proofs_notes/proposers.md (tests/test_proposers.py).
"""

from __future__ import annotations

import math

import torch

from specproof.reference.errors import UsageError

from ..transformer import TinyTransformer, block_forward, random_block, random_param
from .selfdraft import DraftNet, OwnHead, fused_features


class DFlashNet(DraftNet):
    def __init__(self, target: TinyTransformer, block: int = 3, seed: int = 107) -> None:
        super().__init__(target)
        if block < 1:
            raise UsageError(f"block: must be >= 1, got {block}")
        W = target.config.width
        g = torch.Generator().manual_seed(seed)
        self.max_depth = block
        self.ctx = random_param(g, 3 * W, W, scale=1 / math.sqrt(3 * W))
        self.mask = random_param(g, W, scale=1.0)
        self.block = random_block(g, W, target.config.mlp)
        self.head = OwnHead(target)

    def block_laws_logits(self, target: TinyTransformer, hidden: list[torch.Tensor], last: torch.Tensor):
        """Logits ``[B, V]`` of block rows 1..B (one pass)."""
        cfg = target.config
        c = fused_features(hidden) @ self.ctx  # [T, W]
        T, B = c.shape[0], self.max_depth or 0
        rows = torch.cat([c, target.embed[last][None], self.mask.expand(B, -1)])
        visible = torch.zeros(T + B + 1, T + B + 1, dtype=torch.bool)
        visible[:T, :T] = torch.ones(T, T, dtype=torch.bool).tril()
        visible[T:, :] = True
        out, _, _ = block_forward(
            self.block, rows, torch.arange(T + B + 1), visible, cfg.heads, cfg.rope_base
        )
        return self.head(out[T + 1 :])

    def draft_logits(
        self, target: TinyTransformer, hidden: list[torch.Tensor], tokens: torch.Tensor, n: int
    ) -> torch.Tensor:
        depth = len(tokens) - n  # the path's tokens are not read: only its length
        return self.block_laws_logits(target, hidden, tokens[n - 1])[depth]
