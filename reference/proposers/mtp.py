"""Multi-token prediction modules (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", sec. 2.2),
used as a draft: K sequential modules, module k predicting the token k + 1 positions ahead.

With ``h^0_i`` the target's top-layer hidden state at position i, module k (k = 1..K) computes,
for every position i of the committed features,

    h'^k_i = M_k [RMSNorm(h^{k-1}_i) ; RMSNorm(Emb(x_{i+k}))]      (2W -> W)
    h^k_{0..i} = TRM_k(h'^k_{0..i})                                  (one causal block)
    p(x_{i+k+1} | ...) = softmax(OutHead(h^k_i))                     (the target's head, shared)

The embedding and the output head are the target's. At the last committed feature (i = n - 2),
module 1 reads node 0's token and predicts depth 1; module k reads the depth k - 1 draft and
predicts depth k, so the chain's laws condition on the drafts before them: an ordinary sampled
chain (process ``iid_chain``, token-level verification exact; proofs_notes/token.md), at most K
drafts long.

Its declared process, and why: proofs_notes/proposers.md (tests/test_proposers.py).
"""

from __future__ import annotations

import math

import torch

from specproof.reference.errors import UsageError

from ..transformer import Block, TinyTransformer, block_forward, random_block, random_param, rms_norm
from .selfdraft import DraftNet, causal


class MTPModules(DraftNet):
    def __init__(self, target: TinyTransformer, modules: int = 3, seed: int = 105) -> None:
        super().__init__(target)
        if modules < 1:
            raise UsageError(f"modules: must be >= 1, got {modules}")
        W = target.config.width
        g = torch.Generator().manual_seed(seed)
        self.max_depth = modules
        self.proj = torch.nn.ParameterList(
            random_param(g, 2 * W, W, scale=1 / math.sqrt(2 * W)) for _ in range(modules)
        )
        self.blocks = torch.nn.ModuleList(random_block(g, W, target.config.mlp) for _ in range(modules))
        self.norm_h = torch.nn.Parameter(torch.ones(modules, W, dtype=torch.float64))
        self.norm_e = torch.nn.Parameter(torch.ones(modules, W, dtype=torch.float64))

    def draft_logits(
        self, target: TinyTransformer, hidden: list[torch.Tensor], tokens: torch.Tensor, n: int
    ) -> torch.Tensor:
        cfg = target.config
        T = n - 1  # committed features h^0_0 .. h^0_{n-2}
        h = hidden[-1][:T]
        for k in range(1, len(tokens) - n + 2):  # modules 1 .. depth + 1
            e = target.embed[tokens[k : T + k]]  # x_{i+k} for i = 0 .. T-1
            x = torch.cat([rms_norm(h, self.norm_h[k - 1]), rms_norm(e, self.norm_e[k - 1])], -1)
            blk: Block = self.blocks[k - 1]  # type: ignore[assignment]
            h, _, _ = block_forward(
                blk,
                x @ self.proj[k - 1],
                torch.arange(T),
                causal(T),
                cfg.heads,
                cfg.rope_base,
            )
        return target.head(h[-1:])[0]
