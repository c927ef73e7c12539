"""Cells for the goodness-of-fit test of a completed step's law.

The completed output of a step is a sequence of M tokens; under the null hypothesis it has the
law ``P(y) = prod_m law(y_m | y_<m)``. There are far too many sequences to test one by one, so
the test runs on a partition fixed *before* looking at the data, from ``P`` and the sample
size ``n`` alone: the prefix trie, expanded best-first by expected count.

* The root (the empty prefix) is a cell. Expanding a node replaces it by its children whose
  expected count ``n * P(prefix)`` is at least ``min_count`` and one "rest" cell pooling the
  others (so every cell keeps at least ``min_count`` expected; the chi-square approximation
  needs it).
* Nodes are expanded in order of expected count until no node can be expanded without going
  over ``max_cells``.

A cell holding more than one positive-probability sequence is *unresolved*; their total mass
``w`` bounds what the partition cannot see: for any law Q, ``TV(Q, P) <= TV_cells(Q, P) + w``
(proofs_notes/audit_statistics.md). The audit reports ``w`` with every case.

One engine, :func:`expand_trie`, builds these cells for every caller: it reads a next-token law
as a function of the prefix (``prefix -> (probability, token)`` pairs, positive mass only)
through a small adapter, here :func:`battery_law` (the battery's context-hash pool) and in
:func:`.sequences.prefix_cells` a model's ``next_law(prefix)``. It returns the cells with
the per-sequence lookup :meth:`TrieCells.index`; :func:`build_partition` adds the vectorized
lookup :meth:`Partition.assign` the audit bins millions of completed sequences with.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np
import torch

from specproof.properties.audit.battery import Models, child_hash
from specproof.reference.errors import SpecproofInputError

K = TypeVar("K")
Prefix = tuple[int, ...]
NextLaw = Callable[[Prefix], Sequence[tuple[float, int]]]  # prefix -> positive (probability, token)
Ties = Literal["creation", "prefix"]

NO_CELL = -1  # a lookup's answer for a sequence no cell holds (it has probability 0), and an
# expanded prefix's rest cell when it has none
DEEPER = -2  # in Partition's tables: the prefix is expanded, read the next token
_NO_CODE = -1  # a key no prefix has (codes are >= 0), for a depth with no expanded prefix


@dataclass
class TrieCells:
    """The cells of :func:`expand_trie`: cell ``i`` has probability ``probs[i]`` (normalized),
    stands for the prefix ``labels[i]`` and is resolved (holds one positive-probability
    sequence) when ``resolved[i]``. The trie itself, for the lookups: every expanded prefix with
    its rest cell (``NO_CELL`` when every child was kept), every unexpanded one with its cell."""

    probs: np.ndarray
    labels: list[str]
    resolved: list[bool]
    unresolved: float  # mass of the cells holding more than one sequence
    horizon: int
    expanded: dict[Prefix, int]  # expanded prefix -> its rest cell, or NO_CELL
    leaf: dict[Prefix, int]  # unexpanded prefix (or whole sequence) -> its cell

    def index(self, seq: Prefix) -> int:
        """The cell of ``seq``; ``NO_CELL`` if it has zero probability under the law (its first
        token off the trie after an expanded prefix without a rest cell)."""
        node: Prefix = ()
        while node in self.expanded:
            child = seq[: len(node) + 1]
            if child in self.expanded or child in self.leaf:
                node = child
                continue
            return self.expanded[node]
        return self.leaf.get(node, NO_CELL)


def split_children(
    kids: list[tuple[float, K]], n: int, min_count: float
) -> tuple[list[tuple[float, K]], list[tuple[float, K]]]:
    """The expansion rule for one node: ``kids`` as ``(probability, key)``, most likely first.
    Children expected at least ``min_count`` times are kept as their own cells, the others
    pooled in a rest cell; while the rest is expected fewer than ``min_count`` times, the least
    likely kept child joins it. Returns ``(keep, rest)``. Shared with the per-position tests
    (:mod:`.conditional`)."""
    keep = [k for k in kids if n * k[0] >= min_count]
    rest = [k for k in kids if n * k[0] < min_count]
    while rest and keep and n * sum(k[0] for k in rest) < min_count:
        rest.append(keep.pop())
    return keep, rest


def _check_sizes(n: int, max_cells: int) -> None:
    if n < 1:
        raise SpecproofInputError("n", f"must be at least 1, got {n}")
    if max_cells < 1:
        raise SpecproofInputError("max_cells", f"must be at least 1, got {max_cells}")


def expand_trie(
    law: NextLaw, horizon: int, n: int, min_count: float, max_cells: int, ties: Ties
) -> TrieCells:
    """The cells for ``n`` samples of the ``horizon``-token law whose next-token law after a
    prefix is ``law(prefix)`` (module doc), fixed before any data. ``law`` is called once per
    prefix, on the expanded ones and along single continuations (to tell resolved cells), so the
    law need not be enumerable.

    ``ties`` fixes how equal masses are ordered, and with it the cells' numbering:
    ``"creation"`` (the audit's) orders a node's children by mass then token and the frontier
    and the unexpanded cells by when a node was created; ``"prefix"`` (the sequence test's)
    orders children by next-token probability then token, frontier and cells by prefix."""
    _check_sizes(n, max_cells)
    memo: dict[Prefix, list[tuple[float, int]]] = {}

    def next_law(node: Prefix) -> list[tuple[float, int]]:
        if node not in memo:
            memo[node] = list(law(node))
        return memo[node]

    def single(node: Prefix) -> bool:
        """Does ``node`` have exactly one positive-probability completion?"""
        while len(node) < horizon:
            kids = next_law(node)
            if len(kids) != 1:
                return False
            node = node + (kids[0][1],)
        return True

    by_prefix = ties == "prefix"
    cells: list[tuple[float, str, bool]] = []  # (probability, label, resolved)
    expanded: dict[Prefix, int] = {}
    stay: list[tuple[int | Prefix, Prefix, float]] = []  # (order key, prefix, mass): unexpanded
    count = 1  # cells the partition has now
    created = 1  # the root was node 0
    frontier: list[tuple[float, int | Prefix, Prefix]] = [(-1.0, () if by_prefix else 0, ())]
    while frontier:
        negp, key, node = heapq.heappop(frontier)
        mass = -negp
        if len(node) < horizon:
            kids = [(mass * p, x, p) for p, x in next_law(node)]
            kids.sort(key=(lambda t: (-t[2], t[1])) if by_prefix else (lambda t: (-t[0], t[1])))
            keep, rest = split_children([(m, x) for m, x, _ in kids], n, min_count)
            new = len(keep) + (1 if rest else 0)
            if keep and count - 1 + new <= max_cells:
                count += new - 1
                expanded[node] = NO_CELL
                if rest:
                    expanded[node] = len(cells)
                    label = " ".join(map(str, node)) + (" " if node else "") + "{" + f"{len(rest)} other}}"
                    resolved = len(rest) == 1 and single(node + (rest[0][1],))
                    cells.append((float(sum(m for m, _ in rest)), label, resolved))
                for m, x in keep:
                    child = node + (x,)
                    heapq.heappush(frontier, (-m, child if by_prefix else created, child))
                    created += 1
                continue
        stay.append((key, node, mass))
    leaf: dict[Prefix, int] = {}
    for _, node, mass in sorted(stay, key=lambda t: t[0]):
        leaf[node] = len(cells)
        label = " ".join(map(str, node)) + (" *" if len(node) < horizon else "")
        cells.append((mass, label, single(node)))
    probs = np.array([c[0] for c in cells])
    probs = probs / probs.sum()
    unresolved = float(sum(p for p, c in zip(probs, cells) if not c[2]))
    return TrieCells(probs, [c[1] for c in cells], [c[2] for c in cells], unresolved, horizon, expanded, leaf)


def battery_law(models: Models, sub: int = 0) -> NextLaw:
    """The adapter for the battery: the preserved law after a prefix, read from the model pool
    through the prefix's context hash (``child_hash`` from sub-case ``sub``'s root)."""
    hashes: dict[Prefix, int] = {(): models.roots[sub]}

    def context(prefix: Prefix) -> int:
        if prefix not in hashes:
            hashes[prefix] = child_hash(context(prefix[:-1]), prefix[-1])
        return hashes[prefix]

    return lambda prefix: models.law_py(context(prefix), sub)


@dataclass
class Partition:
    """The audit's cells (:func:`build_partition`) and their vectorized lookup."""

    trie: TrieCells
    _lut: torch.Tensor  # token id -> local id (or -1)
    _base: int
    _keys: list[torch.Tensor]  # per depth d (1..M): sorted codes of kept children (or _NO_CODE)
    _vals: list[torch.Tensor]  # their cell id, or DEEPER when the child is expanded
    _rest_keys: list[torch.Tensor]  # per depth d (0..M-1): codes of expanded nodes (or _NO_CODE)
    _rest_vals: list[torch.Tensor]  # their rest cell, or NO_CELL when every child is kept
    _root_cell: int  # the root's cell if the root is not expanded, else NO_CELL

    @property
    def probs(self) -> np.ndarray:  # [k] expected probability of each cell
        return self.trie.probs

    @property
    def labels(self) -> list[str]:  # the prefix each cell stands for, e.g. "3 1 *" or "3 {2 other}"
        return self.trie.labels

    @property
    def unresolved(self) -> float:  # mass of cells holding more than one sequence
        return self.trie.unresolved

    @property
    def horizon(self) -> int:
        return self.trie.horizon

    @property
    def cells(self) -> int:
        return len(self.trie.probs)

    def assign(self, seqs: torch.Tensor) -> torch.Tensor:
        """The cell of each completed sequence ``seqs [n, M]`` (as :meth:`TrieCells.index` of
        each row), ``NO_CELL`` for some zero-probability ones."""
        n = seqs.shape[0]
        if self._root_cell != NO_CELL:
            return torch.full((n,), self._root_cell, dtype=torch.int64)
        cell = torch.full((n,), NO_CELL, dtype=torch.int64)
        active = torch.ones(n, dtype=torch.bool)
        code = torch.zeros(n, dtype=torch.int64)
        for d in range(1, self.horizon + 1):
            loc = self._lut[seqs[:, d - 1]]
            child = code + loc.clamp(min=0) * self._base ** (d - 1)
            keys, vals = self._keys[d - 1], self._vals[d - 1]
            pos = torch.searchsorted(keys, child).clamp(max=len(keys) - 1)
            found = (keys[pos] == child) & (loc >= 0)
            val = torch.where(found, vals[pos], torch.full_like(child, NO_CELL))
            rk, rv = self._rest_keys[d - 1], self._rest_vals[d - 1]
            rpos = torch.searchsorted(rk, code).clamp(max=len(rk) - 1)
            rest = torch.where(rk[rpos] == code, rv[rpos], torch.full_like(code, NO_CELL))
            val = torch.where(found, val, rest)
            done = active & (val != DEEPER)
            cell[done] = val[done]
            active &= val == DEEPER
            code = child
            if not active.any():
                break
        return cell


def build_partition(
    models: Models, n: int, sub: int = 0, min_count: float = 10.0, max_cells: int = 128
) -> Partition:
    """The trie partition of the completed law of ``models`` (sub-case ``sub``) for ``n``
    samples (module doc), with the tables of its vectorized lookup: a prefix of depth ``d`` is
    coded ``sum_i local(y_i) * S**i`` over the ``S`` support ids."""
    _check_sizes(n, max_cells)
    M = models.case.horizon
    support = np.asarray(models.support)
    base = len(support)
    if base**M >= 2**62:
        raise SpecproofInputError(
            "models",
            f"case {models.case.name}: {base} support ids over {M} positions overflow the cell codes",
        )
    trie = expand_trie(battery_law(models, sub), M, n, min_count, max_cells, ties="creation")
    local = {int(t): i for i, t in enumerate(support)}
    codes: dict[Prefix, int] = {(): 0}

    def code(node: Prefix) -> int:
        if node not in codes:
            codes[node] = code(node[:-1]) + local[node[-1]] * base ** (len(node) - 1)
        return codes[node]

    kept: list[dict[int, int]] = [{} for _ in range(M)]  # depth - 1 -> child code -> cell or DEEPER
    rests: list[dict[int, int]] = [{} for _ in range(M)]  # depth -> node code -> rest cell or NO_CELL
    for node, rest in trie.expanded.items():
        rests[len(node)][code(node)] = rest
        if node:
            kept[len(node) - 1][code(node)] = DEEPER
    for node, cell in trie.leaf.items():
        if node:
            kept[len(node) - 1][code(node)] = cell

    def table(d: dict[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        items = sorted(d.items()) or [(_NO_CODE, NO_CELL)]
        return (
            torch.tensor([k for k, _ in items], dtype=torch.int64),
            torch.tensor([v for _, v in items], dtype=torch.int64),
        )

    keys, vals = zip(*(table(kept[d]) for d in range(M)))
    rkeys, rvals = zip(*(table(rests[d]) for d in range(M)))
    return Partition(
        trie, models.lut, base, list(keys), list(vals), list(rkeys), list(rvals), trie.leaf.get((), NO_CELL)
    )
