"""What every batched drafter shares (reference: ``reference/proposers/selfdraft.py``).

A :class:`BatchedDrafter` drafts for a batch of requests (rows) at once. A step is three calls:

* :meth:`~BatchedDrafter.begin` - the draft law after each row's committed tokens (at node 0),
  after bringing the drafter's own state (its KV cache, its store of target features) up to
  date with the tokens committed since the last step;
* :meth:`~BatchedDrafter.expand` - the draft laws at new tree nodes (children of nodes already
  expanded, or of node 0), for every row at once; the proposal processes
  (:mod:`.processes`) call it depth by depth;
* :meth:`~BatchedDrafter.end` - forget the step's draft nodes (their KV slots are freed).

Self-drafting drafters read the target's hidden states over the committed tokens before node 0
(the reference's :func:`~specproof.reference.proposers.selfdraft.target_features`); the
decoding loop hands them over as it commits (:meth:`~BatchedDrafter.observe`: every layer's
states of the newly cached positions, from the prompt's prefill and each step's accepted
path), so nothing is recomputed. Laws are ``softmax(logits)`` renormalized, in the engine's
dtype, as the reference's ``law_from_logits``.

The weights are the reference networks' own (:func:`specproof.optimized.proposers.twin` reads
them from the reference proposer), cast to the engine's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from specproof.reference.errors import ShapeError
from specproof.reference.proposers.selfdraft import OwnHead
from specproof.reference.transformer import TinyTransformer, rms_norm

from ..paged_kv import PagedKVCache, QueryBatch, RowQueries, ancestor_masks
from ..transformer import BlockWeights, block_forward


@dataclass(frozen=True)
class Node:
    """A draft node of one row's tree in the current step: ``nid`` its index in the drafter's
    tree (node 0 is the row's last committed token), ``parent`` its parent's index."""

    row: int
    nid: int
    parent: int
    token: int
    depth: int


def to_law(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``softmax(logits / T)`` per row, renormalized (one-hot at the argmax for T = 0)."""
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    p = torch.softmax(logits / temperature, -1)
    return p / p.sum(-1, keepdim=True)


class BatchedDrafter:
    """The drafter interface (module doc). ``max_depth``: how many drafts in a row it can
    propose below node 0 (``None``: unlimited)."""

    vocab: int
    max_depth: int | None = None
    #: every layer's hidden states are needed (True) or none (False)
    reads_features: bool = False

    def admit(self, rid: Hashable, prompt: Sequence[int]) -> None:
        pass

    def release(self, rid: Hashable) -> None:
        pass

    def observe(self, rid: Hashable, hidden: list[torch.Tensor]) -> None:
        """Target hidden states (embeddings, then each layer) of newly committed positions."""

    def begin(self, rids: Sequence[Hashable], contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        raise NotImplementedError

    def expand(self, nodes: Sequence[Node]) -> torch.Tensor:
        raise NotImplementedError

    def end(self) -> None:
        pass

    def check_depth(self, depth: int) -> None:
        if self.max_depth is not None and depth >= self.max_depth:
            raise ShapeError(
                "shape",
                f"{type(self).__name__} proposes at most {self.max_depth} drafts in a row; "
                f"a node at depth {depth} asks for one more",
            )


class Features:
    """Per request, the target's hidden states of the committed positions before node 0, for
    the chosen layers (``[positions, width]`` each)."""

    def __init__(self, layers: Sequence[int]) -> None:
        self.layers = list(layers)
        self.store: dict[Hashable, list[torch.Tensor]] = {}

    def admit(self, rid: Hashable) -> None:
        self.store[rid] = []

    def release(self, rid: Hashable) -> None:
        self.store.pop(rid, None)

    def add(self, rid: Hashable, hidden: list[torch.Tensor]) -> None:
        new = [hidden[layer] for layer in self.layers]
        old = self.store[rid]
        self.store[rid] = new if not old else [torch.cat([a, b]) for a, b in zip(old, new)]

    def count(self, rid: Hashable) -> int:
        s = self.store[rid]
        return int(s[0].shape[0]) if s else 0

    def get(self, rid: Hashable, lo: int, hi: int) -> list[torch.Tensor]:
        return [t[lo:hi] for t in self.store[rid]]


def fused(hidden: list[torch.Tensor]) -> torch.Tensor:
    """Low, middle and high features side by side (hidden states 0, L // 2, L; the reference's
    ``fused_features``), from the three layers a :class:`Features` of ``fused_layers`` keeps."""
    return torch.cat(hidden, -1)


def fused_layers(target: TinyTransformer) -> list[int]:
    L = target.config.layers
    return [0, L // 2, L]


def need_two(rid: Hashable, n: int) -> None:
    if n < 2:
        raise ShapeError(
            "prompt", f"request {rid!r}: a self-drafting proposer needs at least two committed tokens"
        )


@dataclass(frozen=True)
class Placement:
    """Where a batched drafter lives: the engine's dtype and device for its weights, and the
    shape of its own paged KV cache (``poison`` fills freed slots with NaN, as the engine's)."""

    dtype: torch.dtype = torch.float64
    device: torch.device | None = None
    block_size: int = 16
    num_blocks: int = 512
    poison: bool = False

    def copy(self, weight: torch.Tensor) -> torch.Tensor:
        """A detached copy of a reference ``weight`` in this dtype, on this device."""
        return weight.detach().to(self.device, self.dtype).clone()


class LawTable:
    """For drafters whose law at depth d is the same whatever the path (Medusa's heads, DFlash's
    block rows): :meth:`~BatchedDrafter.begin` fills ``_laws`` ``[rows, depth, V]`` and
    :meth:`expand` only looks a node's law up."""

    _laws: torch.Tensor | None = None

    def expand(self, nodes: Sequence[Node]) -> torch.Tensor:
        assert self._laws is not None, "expand before begin"
        return self._laws[[n.row for n in nodes], [n.depth for n in nodes]]

    def end(self) -> None:
        self._laws = None


class FeatureCache:
    """For drafters that keep their own paged KV cache (``cache``) and a store of the target's
    features (``features``): a request is admitted to and released from both, and the loop's
    commits feed the store."""

    cache: PagedKVCache
    features: Features

    def admit(self, rid: Hashable, prompt: Sequence[int]) -> None:
        self.cache.admit(rid)
        self.features.admit(rid)

    def release(self, rid: Hashable) -> None:
        self.cache.release(rid)
        self.features.release(rid)

    def observe(self, rid: Hashable, hidden: list[torch.Tensor]) -> None:
        self.features.add(rid, hidden)


class OwnHeadWeights:
    """A draft network's own head (EAGLE-3, DFlash) in the engine's dtype."""

    def __init__(self, head: OwnHead, at: Placement) -> None:
        self.norm = at.copy(head.norm)
        self.weight = at.copy(head.weight)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm) @ self.weight


class TargetHead:
    """The target's own head (final RMSNorm, tied embedding / sqrt(width)) in the engine's dtype."""

    def __init__(self, target: TinyTransformer, at: Placement) -> None:
        self.norm = at.copy(target.norm)
        self.embed = at.copy(target.embed)
        self.scale = math.sqrt(target.config.width)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm) @ self.embed.T / self.scale


class StepTrees:
    """The current step's draft nodes of each row, for drafters whose network attends over
    them: node ``nid`` of row b sits at slot ``root[b] + nid`` of the drafter's cache, position
    ``root[b] + depth``, and sees the slots before the root and its ancestors (node 0, the root,
    included)."""

    def __init__(self, root_slots: Sequence[int]) -> None:
        self.root = list(root_slots)
        self.parents: list[dict[int, int]] = [{0: -1} for _ in root_slots]
        self.width = [1] * len(root_slots)

    def queries(self, nodes: Sequence[Node]) -> tuple[list[int], list[RowQueries], list[int]]:
        """Add ``nodes`` (their parents already added) and lay them out for a forward: the rows
        that have nodes, their queries, and each input node's index in the batch's layout."""
        for n in nodes:
            if n.parent not in self.parents[n.row]:
                raise ShapeError("nodes", f"node {n.nid} of row {n.row} comes before its parent {n.parent}")
            self.parents[n.row][n.nid] = n.parent
            self.width[n.row] = max(self.width[n.row], n.nid + 1)
        by_row: dict[int, list[int]] = {}
        for i, n in enumerate(nodes):
            by_row.setdefault(n.row, []).append(i)
        rows, out, index = [], [], [0] * len(nodes)
        at = 0
        for b, members in by_row.items():
            width = self.width[b]
            par = [0] * width
            par[0] = -1
            for nid, p in self.parents[b].items():
                if nid:
                    par[nid] = p  # ids not drafted (yet) stay leaves under the root
            masks = ancestor_masks(par)
            ns = [nodes[i] for i in members]
            r = self.root[b]
            rows.append(b)
            out.append(
                RowQueries(
                    [n.token for n in ns],
                    [r + n.nid for n in ns],
                    [r + n.depth for n in ns],
                    [r] * len(ns),
                    r,
                    width,
                    masks[[n.nid for n in ns]],
                )
            )
            for i in members:
                index[i] = at
                at += 1
        return rows, out, index


class BlockNet:
    """One decoder block of a draft network run over its own paged cache (one layer per block)."""

    def __init__(self, blocks: Sequence[torch.nn.Module], target: TinyTransformer, at: Placement) -> None:
        cfg = target.config
        self.device = torch.device(at.device or "cpu")
        self.w = [BlockWeights.of(b, at.dtype, self.device) for b in blocks]
        self.heads, self.rope_base = cfg.heads, cfg.rope_base
        self.width = cfg.width
        self.at = at

    def cache(self) -> PagedKVCache:
        """A paged KV cache for these blocks, shaped by the placement."""
        return PagedKVCache(
            len(self.w),
            self.heads,
            self.width // self.heads,
            block_size=self.at.block_size,
            num_blocks=self.at.num_blocks,
            dtype=self.at.dtype,
            device=self.device,
            poison=self.at.poison,
        )

    def run(self, x: torch.Tensor, batch: QueryBatch, cache: PagedKVCache, layer: int = 0) -> torch.Tensor:
        return block_forward(self.w[layer], x, batch, cache, layer, self.heads, self.rope_base)
