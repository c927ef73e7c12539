"""The tiny transformer target, batched over a paged KV cache (reference: ``reference/transformer.py``).

:class:`PagedTransformer` holds a :class:`~specproof.reference.transformer.TinyTransformer`'s
weights (the same tensors, cast to the engine's dtype: float64 to couple with the reference,
float32 to run as an engine would) and runs one forward over a :class:`~.paged_kv.QueryBatch`:
the flattened query tokens of several requests, prompt chains or draft trees, each request's
K/V written to its own blocks and read back by the paged tree attention kernel
(:mod:`.kernels.paged_attention`). Positions are the batch's position ids (``prefix_len +
depth`` for tree nodes), rotated as the reference rotates them (:func:`rope`).

:func:`block_forward` is one pre-norm decoder block over a batch; the draft networks of the
optimized proposers (:mod:`specproof.optimized.proposers`) run their blocks through it, on
caches of their own.

Claim (tests/test_optimized_decode.py): a tree forward's logits and every hidden state equal
the reference's tree forward (and so the causal forward over each root path) within 1e-12 in
float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from specproof.reference.errors import BadParameterError, UsageError
from specproof.reference.transformer import Block, TinyTransformer, rms_norm, rope

from .paged_kv import PagedKVCache, QueryBatch, paged_attention, write_kv


@dataclass
class BlockWeights:
    """One decoder block's weights in a given dtype."""

    norm1: torch.Tensor
    qkv: torch.Tensor
    out: torch.Tensor
    norm2: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor

    @classmethod
    def of(cls, blk: torch.nn.Module, dtype: torch.dtype, device: torch.device | None = None) -> BlockWeights:
        """``blk`` is a :class:`Block` (typed as a Module: what iterating a ModuleList yields)."""
        if not isinstance(blk, Block):
            raise BadParameterError("blk", f"expected a reference Block, got {type(blk).__name__}")

        def w(t: torch.Tensor) -> torch.Tensor:
            return t.detach().to(device or t.device, dtype).clone()

        return cls(w(blk.norm1), w(blk.qkv), w(blk.out), w(blk.norm2), w(blk.gate), w(blk.up), w(blk.down))


def block_forward(
    w: BlockWeights,
    x: torch.Tensor,
    batch: QueryBatch,
    cache: PagedKVCache,
    layer: int,
    heads: int,
    rope_base: float,
) -> torch.Tensor:
    """One pre-norm block on ``x [T, width]``: the new K/V go to the batch's slots of ``layer``,
    then each token attends to what its row lets it see (reference: ``transformer.block_forward``)."""
    T, width = x.shape
    d = width // heads
    h = rms_norm(x, w.norm1)
    q, k, v = (h @ w.qkv).split(width, dim=-1)
    pos = batch.positions
    q = rope(q.reshape(T, heads, d).transpose(0, 1), pos, rope_base).transpose(0, 1)
    k = rope(k.reshape(T, heads, d).transpose(0, 1), pos, rope_base).transpose(0, 1)
    v = v.reshape(T, heads, d)
    write_kv(cache, layer, batch, k, v)
    att = paged_attention(q.contiguous(), cache, layer, batch)
    x = x + att.reshape(T, width) @ w.out
    h = rms_norm(x, w.norm2)
    return x + (torch.nn.functional.silu(h @ w.gate) * (h @ w.up)) @ w.down


class PagedTransformer:
    """A TinyTransformer's weights run batched over a paged cache (module doc)."""

    def __init__(
        self, model: TinyTransformer, dtype: torch.dtype = torch.float64, device: torch.device | None = None
    ) -> None:
        if dtype not in (torch.float64, torch.float32):
            raise UsageError(f"dtype: float64 or float32, got {dtype}")
        self.model = model
        self.config = model.config
        self.dtype = dtype
        self.device = torch.device(device or "cpu")
        self.embed = model.embed.detach().to(self.device, dtype).clone()
        self.blocks = [BlockWeights.of(b, dtype, self.device) for b in model.blocks]
        self.norm = model.norm.detach().to(self.device, dtype).clone()

    @property
    def vocab(self) -> int:
        return self.config.vocab

    def new_cache(self, num_blocks: int, block_size: int = 16, poison: bool = False) -> PagedKVCache:
        cfg = self.config
        return PagedKVCache(
            cfg.layers,
            cfg.heads,
            cfg.width // cfg.heads,
            block_size=block_size,
            num_blocks=num_blocks,
            dtype=self.dtype,
            device=self.device,
            poison=poison,
        )

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Final RMSNorm and the tied embedding, scaled by 1/sqrt(width) (the reference's head)."""
        return rms_norm(x, self.norm) @ self.embed.T / math.sqrt(self.config.width)

    @torch.no_grad()
    def forward(self, batch: QueryBatch, cache: PagedKVCache) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits ``[T, V]`` of every query token and the hidden states ``[T, width]`` of the
        embedding and of every layer; the tokens' K/V are left in the cache at their slots."""
        cfg = self.config
        x = self.embed[batch.tokens]
        hidden = [x]
        for layer, w in enumerate(self.blocks):
            x = block_forward(w, x, batch, cache, layer, cfg.heads, cfg.rope_base)
            hidden.append(x)
        return self.head(x), hidden

    def laws(self, logits: torch.Tensor, temperature: float) -> torch.Tensor:
        """``softmax(logits / T)`` renormalized per row (one-hot at the argmax for T = 0), as the
        reference loop turns the tree forward's logits into the verifier's target laws."""
        if temperature == 0:
            return torch.nn.functional.one_hot(logits.argmax(-1), self.vocab).to(logits.dtype)
        p = torch.softmax(logits / temperature, -1)
        return p / p.sum(-1, keepdim=True)
