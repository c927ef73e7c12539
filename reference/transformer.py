"""A tiny causal transformer target with a KV cache and tree attention (issue 5's target model).

Pre-norm decoder blocks (RMSNorm, multi-head attention with rotary position embeddings, a
SiLU-gated MLP), a final RMSNorm and an output head tied to the embedding (scaled by
1/sqrt(width), so that an untrained model's next-token laws are spread, not one-hot). Everything is float64
and built from a seed, so forwards are reproducible and comparisons can be tight. The model
exposes every layer's hidden state (what EAGLE-3 fuses and Medusa/EAGLE read).

Two ways to run it:

* :meth:`TinyTransformer.forward` - an ordinary causal forward of ``tokens`` after the cached
  prefix, at positions ``len(cache) + 0, 1, ...``; it appends their K/V to the cache.
* :meth:`TinyTransformer.forward_tree` - one forward over a flattened draft tree: node i attends
  to the cached prefix and to its ancestors and itself only, at position ``len(cache) +
  depth(i)`` (proofs_notes/tree_attention.md, tree_positions.md). Its K/V are appended in node
  order; :meth:`KVCache.commit` then keeps only the accepted root path's, compacted behind the
  prefix (proofs_notes/kv_commit.md).

Claims (tests/test_transformer.py): for every node, ``forward_tree`` equals the ordinary causal
forward over the prefix and the node's root path (logits and every hidden state, within 1e-10);
after a commit the cache continues exactly like a cache rebuilt from the committed tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from specproof.reference.errors import UsageError
from specproof.reference.memo import Memo

from .errors import ShapeError, TokenOutOfRangeError
from .tree import DraftTree


@dataclass(frozen=True)
class Config:
    vocab: int = 32
    width: int = 32
    layers: int = 2
    heads: int = 4
    mlp: int = 64
    rope_base: float = 10000.0


@dataclass
class KVCache:
    """Per layer ``[heads, length, head_dim]`` keys and values (float64)."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.keys[0].shape[1]) if self.keys else 0

    def clone(self) -> KVCache:
        return KVCache([k.clone() for k in self.keys], [v.clone() for v in self.values])

    def commit(self, tree: DraftTree, accepted: tuple[int, ...], prefix_len: int) -> None:
        """After a tree forward appended node i at slot ``prefix_len + i``: keep only the
        accepted root path, compacted behind the prefix, and drop the rest."""
        moves, new_len = tree.kv_commit_plan(accepted, prefix_len)
        for store in (self.keys, self.values):
            for layer, t in enumerate(store):
                for src, dst in moves:
                    t[:, dst] = t[:, src]
                store[layer] = t[:, :new_len].clone()


def rope_tables(
    positions: torch.Tensor, half: int, base: float, device: torch.device | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary angles' ``cos`` and ``sin`` (float64, ``[..., 1, T, half]``) at ``positions
    [..., T]``: what :func:`rope` rotates by. A forward computes them once, for every layer and
    for queries and keys alike (the same numbers as computing them each time)."""
    inv = _inverse_frequencies(half, base, positions.device if device is None else device)
    ang = positions.to(torch.float64)[..., None, :, None] * inv  # [..., 1, T, half]
    return ang.cos(), ang.sin()


_INVERSE: dict[tuple[int, float, str], torch.Tensor] = {}


def _inverse_frequencies(half: int, base: float, device: torch.device) -> torch.Tensor:
    """``base ** (-i / half)`` for i < half (float64), computed once per (half, base, device)."""
    key = (half, base, str(device))
    if key not in _INVERSE:
        _INVERSE[key] = base ** (-torch.arange(half, dtype=torch.float64, device=device) / half)
    return _INVERSE[key]


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary embedding of ``x [..., heads, T, d]`` by :func:`rope_tables`' ``cos``
    and ``sin``, computed in float64 and returned in x's dtype; an odd last feature passes
    through unrotated."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].double(), x[..., half : 2 * half].double()
    out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, x[..., 2 * half :].double()], -1)
    return out.to(x.dtype)


def rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary embedding (rotate-half layout) of ``x [..., heads, T, d]`` at integer
    ``positions [..., T]``, computed in float64 and returned in x's dtype; an odd last feature
    passes through unrotated. Shared by this model and the optimized tree attention."""
    return rotate(x, *rope_tables(positions, x.shape[-1] // 2, base, x.device))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class Block(torch.nn.Module):
    """One pre-norm decoder block's weights."""

    def __init__(
        self,
        qkv: torch.nn.Parameter,
        out: torch.nn.Parameter,
        gate: torch.nn.Parameter,
        up: torch.nn.Parameter,
        down: torch.nn.Parameter,
    ) -> None:
        super().__init__()
        W = qkv.shape[0]
        self.norm1 = torch.nn.Parameter(torch.ones(W, dtype=torch.float64))
        self.qkv: torch.Tensor = qkv
        self.out: torch.Tensor = out
        self.norm2 = torch.nn.Parameter(torch.ones(W, dtype=torch.float64))
        self.gate: torch.Tensor = gate
        self.up: torch.Tensor = up
        self.down: torch.Tensor = down


def random_param(g: torch.Generator, *shape: int, scale: float) -> torch.nn.Parameter:
    """A float64 Gaussian parameter of the given scale, drawn from ``g``."""
    return torch.nn.Parameter(torch.randn(*shape, generator=g, dtype=torch.float64) * scale)


def random_block(g: torch.Generator, width: int, mlp: int) -> Block:
    """A block with 1/sqrt(fan-in) Gaussian weights and unit norms."""
    s, m = 1 / math.sqrt(width), 1 / math.sqrt(mlp)
    return Block(
        qkv=random_param(g, width, 3 * width, scale=s),
        out=random_param(g, width, width, scale=s),
        gate=random_param(g, width, mlp, scale=s),
        up=random_param(g, width, mlp, scale=s),
        down=random_param(g, mlp, width, scale=m),
    )


def block_forward(
    blk: Block,
    x: torch.Tensor,
    positions: torch.Tensor,
    visible: torch.Tensor,
    heads: int,
    rope_base: float,
    past_k: torch.Tensor | None = None,
    past_v: torch.Tensor | None = None,
    tables: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One pre-norm block on ``x [T, width]`` at ``positions [T]``: token t attends to every
    past key (``past_k/past_v [heads, P, d]``) and to the new tokens ``visible[t]`` allows.
    Returns the block's output and the keys/values, past and new (``[heads, P + T, d]``).
    ``tables``: :func:`rope_tables` at ``positions``, where the caller computed them once for
    several blocks. Shared by the target and the proposers' draft networks."""
    T, width = x.shape
    d = width // heads
    if past_k is None or past_v is None:
        past_k = past_v = torch.zeros(heads, 0, d, dtype=x.dtype)
    prefix = past_k.shape[1]
    h = rms_norm(x, blk.norm1)
    q, k, v = (h @ blk.qkv).split(width, dim=-1)
    q, k, v = (t.reshape(T, heads, d).transpose(0, 1) for t in (q, k, v))  # [H, T, d]
    cos, sin = tables if tables is not None else rope_tables(positions, d // 2, rope_base, x.device)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    keys, values = torch.cat([past_k, k], 1), torch.cat([past_v, v], 1)
    mask = torch.cat([torch.ones(T, prefix, dtype=torch.bool), visible], 1)  # [T, prefix+T]
    scores = (q @ keys.transpose(1, 2)) / math.sqrt(d)
    att = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ values  # [H, T, d]
    x = x + att.transpose(0, 1).reshape(T, width) @ blk.out
    h = rms_norm(x, blk.norm2)
    x = x + (torch.nn.functional.silu(h @ blk.gate) * (h @ blk.up)) @ blk.down
    return x, keys, values


class TinyTransformer(torch.nn.Module):
    def __init__(self, config: Config = Config(), seed: int = 0) -> None:
        super().__init__()
        if config.width % config.heads or (config.width // config.heads) % 2:
            raise UsageError("config: width must split into heads of even size")
        self.config = config
        g = torch.Generator().manual_seed(seed)
        W, M = config.width, config.mlp

        self.embed = random_param(g, config.vocab, W, scale=1.0)
        self.blocks = torch.nn.ModuleList(random_block(g, W, M) for _ in range(config.layers))
        self.norm = torch.nn.Parameter(torch.ones(W, dtype=torch.float64))
        self.requires_grad_(False)  # the target is built, not trained

    @property
    def vocab(self) -> int:
        return self.config.vocab

    def _check_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        t = torch.as_tensor(tokens)
        if t.dim() != 1 or t.dtype.is_floating_point:
            raise ShapeError("tokens", "expected a 1-d tensor of integer token ids")
        bad = (t < 0) | (t >= self.vocab)
        if bad.any():
            i = int(bad.nonzero()[0])
            raise TokenOutOfRangeError(f"tokens[{i}]", f"is {int(t[i])}, outside [0, {self.vocab})")
        return t.long()

    def _run(
        self, tokens: torch.Tensor, cache: KVCache, positions: torch.Tensor, visible: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Shared body: ``visible [T, T]`` says which new tokens each new token sees (besides
        the whole cached prefix); K/V of the new tokens are appended to ``cache``."""
        cfg = self.config
        x = self.embed[tokens]
        hidden = [x]
        blocks: list[Block] = list(self.blocks)  # type: ignore[arg-type]
        tables = rope_tables(positions, cfg.width // cfg.heads // 2, cfg.rope_base, x.device)
        for layer, blk in enumerate(blocks):
            if len(cache.keys) <= layer:
                d = cfg.width // cfg.heads
                cache.keys.append(torch.zeros(cfg.heads, 0, d, dtype=torch.float64))
                cache.values.append(torch.zeros(cfg.heads, 0, d, dtype=torch.float64))
            past = cache.keys[layer], cache.values[layer]
            x, cache.keys[layer], cache.values[layer] = block_forward(
                blk, x, positions, visible, cfg.heads, cfg.rope_base, *past, tables
            )
            hidden.append(x)
        return self.head(x), hidden

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """The output head on top-layer hidden states: final RMSNorm, then the tied embedding,
        scaled by 1/sqrt(width) so that logits are O(1)."""
        return rms_norm(x, self.norm) @ self.embed.T / math.sqrt(self.config.width)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, cache: KVCache) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Causal forward of ``tokens [T]`` after ``cache``; returns logits ``[T, V]`` and the
        hidden states ``[T, width]`` of the embedding and of every layer (layers + 1 of them)."""
        t = self._check_tokens(tokens)
        T = len(t)
        positions = len(cache) + torch.arange(T)
        return self._run(t, cache, positions, torch.ones(T, T, dtype=torch.bool).tril())

    @torch.no_grad()
    def forward_tree(
        self, tree: DraftTree, tokens: torch.Tensor, cache: KVCache
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One forward over the flattened tree: ``tokens[i]`` is node i's token (node 0, the
        last committed token, is not in the cache yet). Node i sees the prefix and its root
        path, at position ``len(cache) + depth(i)``."""
        t = self._check_tokens(tokens)
        if len(t) != tree.n:
            raise ShapeError("tokens", f"has {len(t)} entries, expected one per tree node ({tree.n})")
        positions = len(cache) + torch.tensor(tree.depth)
        visible = torch.tensor(tree.attention_mask(), dtype=torch.bool)
        return self._run(t, cache, positions, visible)

    def next_token_probs(self, logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """``softmax(logits / T)`` per row; T = 0 gives the one-hot law at the argmax."""
        if temperature == 0:
            return torch.nn.functional.one_hot(logits.argmax(-1), self.vocab).to(torch.float64)
        return torch.softmax(logits / temperature, -1)

    def law_from_logits(self, logits: torch.Tensor, temperature: float = 1.0) -> tuple[float, ...]:
        """One row of logits ``[V]`` as a reference law: float64, renormalized to sum 1."""
        probs = self.next_token_probs(logits[None], temperature)[0]
        return tuple(float(v) for v in probs / probs.sum())


class TransformerLM:
    """A :class:`TinyTransformer` as a reference :class:`~specproof.reference.models.LM`: the
    float64 law of the next token after a context, ``softmax(logits / temperature)`` (one-hot
    at the argmax for temperature 0). Laws are memoized per context (the most recent
    :data:`.memo.LIMIT`), so the exact oracle and the proposal processes can run on a real
    transformer target or draft model."""

    def __init__(self, model: TinyTransformer, temperature: float = 1.0) -> None:
        if not temperature >= 0:
            raise UsageError(f"temperature: must be >= 0, got {temperature!r}")
        self.model = model
        self.temperature = temperature
        self.vocab = model.vocab
        self._laws: Memo[tuple[int, ...], tuple[float, ...]] = Memo()
        self._logits: Memo[tuple[int, ...], torch.Tensor] = Memo()

    def logits(self, context: tuple[int, ...]) -> tuple[float, ...]:
        """The raw logits after ``context`` (before any temperature), for the request parameters
        that read logits rather than laws (:mod:`.sampling`)."""
        return tuple(float(v) for v in self._row(context))

    def _row(self, context: tuple[int, ...]) -> torch.Tensor:
        if not context:
            raise ShapeError("context", "needs at least one token (the last committed token)")
        context = tuple(context)

        def last() -> torch.Tensor:  # a copy of the last row: a view would hold the whole forward
            logits, _ = self.model.forward(torch.tensor(context), KVCache())
            return logits[-1].clone()

        return self._logits.get(context, last)

    def law(self, context: tuple[int, ...]) -> tuple[float, ...]:
        context = tuple(context)

        def law() -> tuple[float, ...]:
            return self.model.law_from_logits(self._row(context), self.temperature)

        return self._laws.get(context, law)
