"""EAGLE-1 (Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature
Uncertainty", sec. 3): autoregression at the feature level, one token ahead.

The draft network reads, at each position i, the target's top-layer feature ``f_i`` together
with the embedding of the token one step ahead, ``x_{i+1}`` (which resolves the feature's
uncertainty about which token was sampled):

    a_i = FC([f_i ; E x_{i+1}])            (2W -> W)
    f^_{i+1} = Block(a_0 .. a_i)_i          (one causal decoder block)
    p(x_{i+2} | ...) = softmax(LMHead(f^_{i+1}))   (the target's own head, frozen)

Over the committed prefix the features are the target's; below node 0 the draft feeds back its
own predicted features: the child of a node at depth d uses ``f^`` at the positions of the
path. Drafting is autoregressive, so the network proposes to any depth. EAGLE-1 drafts a static
tree of top-k tokens (the ``topk_siblings`` / ``onehot_siblings`` processes); its sampling rule
is multi-round speculative sampling, which is RRS here, exact on the one-hot drafts
(proofs_notes/processes.md) and not on top-k drafts judged against q (the matrix's
``rrs x topk_siblings`` cell).

Its declared process, and why: proofs_notes/proposers.md (tests/test_proposers.py).
"""

from __future__ import annotations

import math

import torch

from ..transformer import TinyTransformer, block_forward, random_block, random_param
from .selfdraft import DraftNet, causal


class Eagle1Net(DraftNet):
    def __init__(self, target: TinyTransformer, seed: int = 101) -> None:
        super().__init__(target)
        cfg = target.config
        g = torch.Generator().manual_seed(seed)
        self.fc = random_param(g, 2 * cfg.width, cfg.width, scale=1 / math.sqrt(2 * cfg.width))
        self.block = random_block(g, cfg.width, cfg.mlp)

    def features(self, target: TinyTransformer, hidden: list[torch.Tensor], tokens: torch.Tensor, n: int):
        """The predicted feature after the last token of ``tokens`` (feeding back predictions
        along the draft path)."""
        cfg = target.config
        feats = list(hidden[-1][: n - 1])  # f_0 .. f_{n-2}: the target's
        out = None
        for _ in range(len(tokens) - n + 1):
            T = len(feats)  # inputs a_0 .. a_{T-1} pair f_i with x_{i+1}
            a = torch.cat([torch.stack(feats), target.embed[tokens[1 : T + 1]]], -1) @ self.fc
            out, _, _ = block_forward(self.block, a, torch.arange(T), causal(T), cfg.heads, cfg.rope_base)
            feats.append(out[-1])  # f^_T, the feature of position T
        assert out is not None
        return out[-1]

    def draft_logits(
        self, target: TinyTransformer, hidden: list[torch.Tensor], tokens: torch.Tensor, n: int
    ) -> torch.Tensor:
        return target.head(self.features(target, hidden, tokens, n)[None])[0]
