"""A paged KV cache, as serving engines keep it: fixed-size blocks, a block table per request.

:class:`PagedKVCache` holds every layer's keys and values in ``[layers, blocks, H, BSZ, D]``
tensors. A request owns a list of blocks (its *block table*); its slot ``s`` lives in block
``table[s // BSZ]`` at offset ``s % BSZ``. Blocks come from one free list: :meth:`reserve`
takes what a request needs for its next forward, :meth:`set_length` returns the blocks past
its committed length, :meth:`release` returns all of them. Invariants (checked by
tests/test_optimized_paged.py, a hypothesis state machine of admit / step / finish): every
block is free or owned by exactly one live request; a request's table holds only its own
blocks; no kernel reads a block outside the tables of the batch's rows (with ``poison=True``
a freed block is filled with NaN, so a read of one would show in the laws).

:class:`QueryBatch` describes one forward over the flattened query tokens of several requests
(rows): each token's cache slot, position id, the prefix ``[0, vis)`` it sees in full and the
packed bitmask of the slots ``base + j`` of its row's tree region that it sees (its tree
ancestors and itself, from :func:`specproof.optimized.tree_buffers.tree_buffers`). Chains
(prompt prefill, drafted chains) have an empty tree region and ``vis = slot + 1``.

:func:`paged_attention` runs the Triton kernel of :mod:`.kernels.paged_attention` on that
description; :func:`commit` compacts each row's accepted root path behind its prefix in place,
moving only the slots whose node is not already in place (``a_j != j``), as
``DraftTree.kv_commit_plan`` prescribes (proofs_notes/kv_commit.md).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from specproof.reference.errors import ShapeError, SpecproofInputError

from ._device import interpreted, on_kernel_device
from .kernels.paged_attention import paged_attention_kernel, paged_commit_kernel
from .tree_buffers import tree_buffers, words_for


class CacheFullError(SpecproofInputError):
    """The cache has too few free blocks for what a request needs (argument ``num_blocks``)."""


class PagedKVCache:
    """Keys and values of ``layers`` layers in blocks of ``block_size`` slots (see module doc)."""

    def __init__(
        self,
        layers: int,
        heads: int,
        head_dim: int,
        *,
        block_size: int = 16,
        num_blocks: int = 256,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
        poison: bool = False,
    ) -> None:
        if block_size < 1 or block_size & (block_size - 1):
            raise ShapeError("block_size", f"must be a power of two, got {block_size}")
        if num_blocks < 1:
            raise ShapeError("num_blocks", f"must be >= 1, got {num_blocks}")
        shape = (layers, num_blocks, heads, block_size, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.layers, self.heads, self.head_dim = layers, heads, head_dim
        self.block_size, self.num_blocks = block_size, num_blocks
        self.poison = poison
        self.free: list[int] = list(range(num_blocks - 1, -1, -1))  # a stack: block 0 goes first
        self.tables: dict[Hashable, list[int]] = {}
        self.lengths: dict[Hashable, int] = {}

    # -- allocation ---------------------------------------------------------------------------

    def admit(self, rid: Hashable) -> None:
        if rid in self.tables:
            raise ShapeError("rid", f"request {rid!r} is already in the cache")
        self.tables[rid] = []
        self.lengths[rid] = 0

    def release(self, rid: Hashable) -> None:
        """Return every block of ``rid`` to the free list."""
        self._give_back(self.tables.pop(rid))
        del self.lengths[rid]

    def reserve(self, rid: Hashable, slots: int) -> None:
        """Make slots ``[0, slots)`` of ``rid`` addressable (allocating blocks as needed)."""
        table = self.tables[rid]
        need = -(-slots // self.block_size) - len(table)
        if need > len(self.free):
            raise CacheFullError(
                "num_blocks",
                f"request {rid!r} needs {need} more blocks of {self.block_size} slots; "
                f"{len(self.free)} of {self.num_blocks} are free",
            )
        for _ in range(max(0, need)):
            table.append(self.free.pop())

    def set_length(self, rid: Hashable, length: int) -> None:
        """The committed length of ``rid``; blocks wholly past it go back to the free list."""
        table = self.tables[rid]
        if length > len(table) * self.block_size:
            raise ShapeError("length", f"{length} slots exceed the {len(table)} blocks reserved")
        keep = -(-length // self.block_size)
        self._give_back(table[keep:])
        del table[keep:]
        self.lengths[rid] = length

    def _give_back(self, blocks: list[int]) -> None:
        if self.poison and blocks:
            idx = torch.tensor(blocks, device=self.k.device)
            self.k[:, idx] = float("nan")
            self.v[:, idx] = float("nan")
        self.free.extend(reversed(blocks))

    def table(self, rids: Sequence[Hashable]) -> torch.Tensor:
        """``[B, max blocks]`` block ids of the rows, -1 padded."""
        width = max([len(self.tables[r]) for r in rids] + [1])
        out = torch.full((len(rids), width), -1, dtype=torch.int64)
        for b, r in enumerate(rids):
            t = self.tables[r]
            out[b, : len(t)] = torch.tensor(t, dtype=torch.int64)
        return out.to(self.k.device)

    def owned(self) -> int:
        return sum(len(t) for t in self.tables.values())


@dataclass
class RowQueries:
    """One row's query tokens (see :class:`QueryBatch`)."""

    tokens: Sequence[int]
    slots: Sequence[int]
    positions: Sequence[int]
    vis: Sequence[int]
    base: int = 0
    ntree: int = 0
    mask: torch.Tensor | None = None  # [len(tokens), W] int32 bits over slots base + j


@dataclass
class QueryBatch:
    """The flattened query tokens of one forward; tokens of a row are contiguous."""

    rids: list[Hashable]
    tokens: torch.Tensor  # [T] int64
    row: torch.Tensor  # [T] row index of each token
    start: torch.Tensor  # [B] first token of each row
    count: torch.Tensor  # [B] tokens of each row
    slots: torch.Tensor  # [T] cache slot of each token's K/V
    positions: torch.Tensor  # [T] position ids (RoPE)
    vis: torch.Tensor  # [T] slots [0, vis) are visible in full
    base: torch.Tensor  # [B] first slot of each row's tree region
    ntree: torch.Tensor  # [B] slots in each row's tree region
    mask: torch.Tensor  # [T, W] int32 packed bits over the tree region
    table: torch.Tensor  # [B, max blocks] block ids

    @property
    def T(self) -> int:
        return int(self.tokens.shape[0])

    @classmethod
    def build(cls, cache: PagedKVCache, rids: Sequence[Hashable], rows: Sequence[RowQueries]) -> QueryBatch:
        """Reserve every slot the rows write and lay their queries out for a launch."""
        if len(rids) != len(rows):
            raise ShapeError("rows", f"has {len(rows)} entries for {len(rids)} requests")
        W = max([1] + [r.mask.shape[1] for r in rows if r.mask is not None])
        tokens: list[int] = []
        row: list[int] = []
        slots: list[int] = []
        pos: list[int] = []
        vis: list[int] = []
        masks: list[torch.Tensor] = []
        start: list[int] = []
        count: list[int] = []
        base: list[int] = []
        ntree: list[int] = []
        for b, (rid, r) in enumerate(zip(rids, rows)):
            n = len(r.tokens)
            if not len(r.slots) == len(r.positions) == len(r.vis) == n:
                raise ShapeError("rows", f"row {b}: tokens, slots, positions and vis differ in length")
            cache.reserve(rid, max([s + 1 for s in r.slots] + list(r.vis) + [r.base + r.ntree]))
            start.append(len(tokens))
            count.append(n)
            base.append(r.base)
            ntree.append(r.ntree)
            tokens += list(r.tokens)
            row += [b] * n
            slots += list(r.slots)
            pos += list(r.positions)
            vis += list(r.vis)
            m = torch.zeros(n, W, dtype=torch.int32)
            if r.mask is not None:
                m[:, : r.mask.shape[1]] = r.mask
            masks.append(m)
        dev = cache.k.device

        def t(x: list[int]) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.int64, device=dev)

        return cls(
            list(rids),
            t(tokens),
            t(row),
            t(start),
            t(count),
            t(slots),
            t(pos),
            t(vis),
            t(base),
            t(ntree),
            torch.cat(masks).to(dev) if masks else torch.zeros(0, W, dtype=torch.int32, device=dev),
            cache.table(rids),
        )


def chain_rows(starts: Sequence[int], chains: Sequence[Sequence[int]]) -> list[RowQueries]:
    """Causal chains: row b's tokens at slots (and positions) ``starts[b] + 0, 1, ...``, each
    seeing every slot up to its own."""
    out = []
    for s, toks in zip(starts, chains):
        slots = list(range(s, s + len(toks)))
        out.append(RowQueries(list(toks), slots, slots, [x + 1 for x in slots]))
    return out


def tree_rows(
    prefix_lens: Sequence[int], parents: Sequence[Sequence[int]], tokens: Sequence[Sequence[int]]
) -> list[RowQueries]:
    """Draft trees: row b's node i at slot ``prefix + i``, position ``prefix + depth(i)``,
    seeing the prefix and its ancestors (masks and positions from the optimized tree_buffers;
    trees of different sizes are padded with leaves under the root that no query reads)."""
    B = len(parents)
    if B == 0:
        return []
    N = max(len(p) for p in parents)
    par = torch.zeros(B, N, dtype=torch.int64)
    for b, p in enumerate(parents):
        par[b, : len(p)] = torch.tensor(p, dtype=torch.int64)
    buf = tree_buffers(par, torch.tensor(list(prefix_lens), dtype=torch.int64))
    out = []
    for b, p in enumerate(parents):
        n, pre = len(p), int(prefix_lens[b])
        out.append(
            RowQueries(
                list(tokens[b]),
                list(range(pre, pre + n)),
                buf.position_ids[b, :n].tolist(),
                [pre] * n,
                pre,
                n,
                buf.mask[b, :n].cpu(),
            )
        )
    return out


def ancestor_masks(parents: Sequence[int]) -> torch.Tensor:
    """``[N, W]`` packed ancestor-or-self bits of a tree given by its parents (parents first)."""
    N = len(parents)
    W = words_for(N)
    bits = [0] * N
    for i, p in enumerate(parents):
        bits[i] = (bits[p] if p >= 0 else 0) | (1 << i)
    words = [[(bits[i] >> (32 * w)) & 0xFFFFFFFF for w in range(W)] for i in range(N)]
    t = torch.tensor(words, dtype=torch.int64)
    return torch.where(t >= 2**31, t - 2**32, t).to(torch.int32)


def write_kv(cache: PagedKVCache, layer: int, batch: QueryBatch, k: torch.Tensor, v: torch.Tensor) -> None:
    """Store the batch's new keys and values ``[T, H, D]`` at their slots."""
    bs = cache.block_size
    blk = batch.table[batch.row, batch.slots // bs]
    off = batch.slots % bs
    cache.k[layer][blk, :, off, :] = k.to(cache.k.dtype)
    cache.v[layer][blk, :, off, :] = v.to(cache.v.dtype)


@on_kernel_device
def paged_attention(q: torch.Tensor, cache: PagedKVCache, layer: int, batch: QueryBatch) -> torch.Tensor:
    """``[T, H, D]``: each query token's attention over the slots it sees (module doc). The
    batch's own K/V must have been written (:func:`write_kv`) first."""
    T, H, D = q.shape
    if T != batch.T or H != cache.heads or D != cache.head_dim:
        raise ShapeError(
            "q", f"has shape {tuple(q.shape)}, expected {(batch.T, cache.heads, cache.head_dim)}"
        )
    out = torch.empty_like(q)
    R = T * H
    if R == 0:
        return out
    QB = max(2, min(512 if interpreted() else 8, triton.next_power_of_2(R)))
    NB = max(2, triton.next_power_of_2(int(batch.ntree.max())))
    bs = cache.block_size
    KT = max(bs, min(256, triton.next_power_of_2(int(batch.vis.max())))) if interpreted() else bs
    paged_attention_kernel[(triton.cdiv(R, QB),)](
        q.contiguous(),
        cache.k[layer],
        cache.v[layer],
        out,
        batch.table,
        batch.row,
        batch.base,
        batch.ntree,
        batch.vis,
        batch.mask,
        R,
        H,
        D,
        batch.table.shape[1],
        1.0 / math.sqrt(D),
        W=batch.mask.shape[1],
        DB=max(2, triton.next_power_of_2(D)),
        QB=QB,
        BSZ=bs,
        KT=KT,
        NB=NB,
        ACC=tl.float64 if q.dtype == torch.float64 else tl.float32,
    )
    return out


def commit_moves(accepted: Sequence[int]) -> list[tuple[int, int]]:
    """The (source node, destination index) pairs a commit moves: ``a_j != j`` only."""
    return [(a, j) for j, a in enumerate(accepted) if a != j]


@on_kernel_device
def commit(
    cache: PagedKVCache, rids: Sequence[Hashable], paths: Sequence[Sequence[int]], bases: Sequence[int]
) -> None:
    """Compact each row's accepted root path (node 0 first) behind its prefix ``bases[b]`` in
    every layer, then set the row's length to ``base + len(path)`` (freeing the blocks past it)."""
    B = len(rids)
    if B == 0:
        return
    N = max(len(p) for p in paths)
    acc = torch.full((B, N), -1, dtype=torch.int64)
    for b, p in enumerate(paths):
        if not p or p[0] != 0:
            raise ShapeError(f"paths[{b}]", "an accepted path starts at node 0")
        acc[b, : len(p)] = torch.tensor(list(p), dtype=torch.int64)
    if any(commit_moves(p) for p in paths):
        dev = cache.k.device
        LH = cache.layers * cache.heads
        RB = max(2, triton.next_power_of_2(B)) if interpreted() else 1
        table = cache.table(rids)
        paged_commit_kernel[(triton.cdiv(B, RB),)](
            cache.k,
            cache.v,
            table,
            torch.tensor(list(bases), dtype=torch.int64, device=dev),
            acc.to(dev),
            B,
            N,
            LH,
            cache.heads,
            cache.num_blocks,
            table.shape[1],
            cache.head_dim,
            RB=RB,
            LHB=max(2, triton.next_power_of_2(LH)),
            DB=max(2, triton.next_power_of_2(cache.head_dim)),
            BSZ=cache.block_size,
        )
    for rid, p, base in zip(rids, paths, bases):
        cache.set_length(rid, base + len(p))


def reference_paged_attention(
    q: torch.Tensor, cache: PagedKVCache, layer: int, batch: QueryBatch
) -> torch.Tensor:
    """The same attention, one query at a time in float64 from the blocks (for tests)."""
    T, H, D = q.shape
    out = torch.empty(T, H, D, dtype=torch.float64)
    bs = cache.block_size
    for t in range(T):
        b = int(batch.row[t])
        seen = list(range(int(batch.vis[t])))
        base = int(batch.base[b])
        for j in range(int(batch.ntree[b])):
            if (int(batch.mask[t, j // 32]) >> (j % 32)) & 1:
                seen.append(base + j)
        blocks = [int(batch.table[b, s // bs]) for s in seen]
        offs = [s % bs for s in seen]
        k = cache.k[layer][blocks, :, offs, :].double()  # [S, H, D]
        v = cache.v[layer][blocks, :, offs, :].double()
        w = torch.softmax((k * q[t].double()[None]).sum(-1) / math.sqrt(D), 0)  # [S, H]
        out[t] = (w[:, :, None] * v).sum(0)
    return out


def compile_specs() -> list[tuple[str, object, dict[str, str], dict[str, object]]]:
    """The kernels' signatures for :mod:`specproof.properties.bench.compile_check` (via tree_attention)."""
    specs: list[tuple[str, object, dict[str, str], dict[str, object]]] = []
    for dt, acc in (("fp32", tl.float32), ("fp64", tl.float64)):
        consts: dict[str, object] = {"W": 1, "DB": 64, "QB": 8, "BSZ": 16, "KT": 16, "NB": 16, "ACC": acc}
        sig = {
            **{n: f"*{dt}" for n in ("q_ptr", "k_ptr", "v_ptr", "out_ptr")},
            **{n: "*i64" for n in ("table_ptr", "row_ptr", "base_ptr", "ntree_ptr", "vis_ptr")},
            "mask_ptr": "*i32",
            "R": "i32",
            "H": "i32",
            "D": "i32",
            "MAXB": "i32",
            "scale": "fp32",
            **dict.fromkeys(consts, "constexpr"),
        }
        specs.append((f"paged_attention[{dt}]", paged_attention_kernel, sig, consts))
        consts2: dict[str, object] = {"RB": 1, "LHB": 64, "DB": 64, "BSZ": 16}
        sig2 = {
            "k_ptr": f"*{dt}",
            "v_ptr": f"*{dt}",
            "table_ptr": "*i64",
            "base_ptr": "*i64",
            "acc_ptr": "*i64",
            **dict.fromkeys(("B", "N", "LH", "H", "NBLK", "MAXB", "D"), "i32"),
            **dict.fromkeys(consts2, "constexpr"),
        }
        specs.append((f"paged_commit[{dt}]", paged_commit_kernel, sig2, consts2))
    return specs
