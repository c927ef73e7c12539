"""EAGLE-3 (Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language Models
via Training-Time Test", sec. 3): fused low/mid/high features, direct token prediction.

Over the committed prefix the draft reads a fusion of three of the target's hidden states
(:func:`~.selfdraft.fused_features`: the embeddings, the middle layer and the top layer),
``g_i = FC_fuse([l_i ; m_i ; h_i])`` (3W -> W). Below node 0 it has no target features and feeds
back its own outputs instead: ``g_i = o_{i-1}`` (what "training-time test" trains for). Then

    z_i = FC_in([g_i ; E x_{i+1}])          (2W -> W)
    o_i = Block(z_0 .. z_i)_i
    p(x_{i+2} | ...) = softmax(Head(o_i))    (the draft's own head)

Unlike EAGLE-1 it regresses no feature: the output is a token law directly. It drafts with
EAGLE-2's dynamic tree (:mod:`specproof.reference.dynamic_tree`).

Its declared process, and why: proofs_notes/proposers.md (tests/test_proposers.py).
"""

from __future__ import annotations

import math

import torch

from ..transformer import TinyTransformer, block_forward, random_block, random_param
from .selfdraft import DraftNet, OwnHead, causal, fused_features


class Eagle3Net(DraftNet):
    def __init__(self, target: TinyTransformer, seed: int = 103) -> None:
        super().__init__(target)
        W = target.config.width
        g = torch.Generator().manual_seed(seed)
        self.fuse = random_param(g, 3 * W, W, scale=1 / math.sqrt(3 * W))
        self.fc = random_param(g, 2 * W, W, scale=1 / math.sqrt(2 * W))
        self.block = random_block(g, W, target.config.mlp)
        self.head = OwnHead(target)

    def draft_logits(
        self, target: TinyTransformer, hidden: list[torch.Tensor], tokens: torch.Tensor, n: int
    ) -> torch.Tensor:
        cfg = target.config
        g = list(fused_features(hidden)[: n - 1] @ self.fuse)  # g_0 .. g_{n-2}
        out = None
        for _ in range(len(tokens) - n + 1):
            T = len(g)
            z = torch.cat([torch.stack(g), target.embed[tokens[1 : T + 1]]], -1) @ self.fc
            out, _, _ = block_forward(self.block, z, torch.arange(T), causal(T), cfg.heads, cfg.rope_base)
            g.append(out[-1])  # below node 0 the draft's own output stands in for the features
        assert out is not None
        return self.head(out[-1])
