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
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

from specproof.properties.audit.battery import Models, child_hash

K = TypeVar("K")


@dataclass
class Partition:
    probs: np.ndarray  # [k] expected probability of each cell
    labels: list[str]  # the prefix each cell stands for, e.g. "3 1 *" or "3 {other}"
    unresolved: float  # mass of cells holding more than one sequence
    horizon: int
    _lut: torch.Tensor  # token id -> local id (or -1)
    _base: int
    _keys: list[torch.Tensor]  # per depth d (1..M): sorted codes of kept children
    _vals: list[torch.Tensor]  # cell id, or -2 for "expanded: go deeper"
    _rest_keys: list[torch.Tensor]  # per depth d (0..M-1): codes of expanded nodes
    _rest_vals: list[torch.Tensor]  # their rest cell (or -3 when every child is kept)
    _root_cell: int  # the root's cell id if the root is not expanded, else -1

    @property
    def cells(self) -> int:
        return len(self.probs)

    def assign(self, seqs: torch.Tensor) -> torch.Tensor:
        """The cell of each completed sequence ``seqs [n, M]``; -3 for a zero-probability one."""
        n = seqs.shape[0]
        if self._root_cell >= 0:
            return torch.full((n,), self._root_cell, dtype=torch.int64)
        cell = torch.full((n,), -1, dtype=torch.int64)
        active = torch.ones(n, dtype=torch.bool)
        code = torch.zeros(n, dtype=torch.int64)
        for d in range(1, self.horizon + 1):
            loc = self._lut[seqs[:, d - 1]]
            child = code + loc.clamp(min=0) * self._base ** (d - 1)
            keys, vals = self._keys[d - 1], self._vals[d - 1]
            if len(keys):
                pos = torch.searchsorted(keys, child).clamp(max=len(keys) - 1)
                found = (keys[pos] == child) & (loc >= 0)
                val = torch.where(found, vals[pos], torch.full_like(child, -3))
            else:
                found = torch.zeros(n, dtype=torch.bool)
                val = torch.full_like(child, -3)
            rk, rv = self._rest_keys[d - 1], self._rest_vals[d - 1]
            rpos = torch.searchsorted(rk, code).clamp(max=len(rk) - 1)
            rest = torch.where(rk[rpos] == code, rv[rpos], torch.full_like(code, -3))
            val = torch.where(found, val, rest)
            done = active & (val != -2)
            cell[done] = val[done]
            active &= val == -2
            code = child
            if not active.any():
                break
        return cell


def _single_sequence(models: Models, h: int, sub: int, depth: int, horizon: int) -> bool:
    """Does the node at this depth have exactly one positive-probability completion?"""
    for _ in range(depth, horizon):
        law = models.law_py(h, sub)
        if len(law) != 1:
            return False
        h = child_hash(h, law[0][1])
    return True


def split_children(
    kids: list[tuple[float, K]], n: int, min_count: float
) -> tuple[list[tuple[float, K]], list[tuple[float, K]]]:
    """The expansion rule for one node: ``kids`` as ``(probability, key)``, most likely first.
    Children expected at least ``min_count`` times are kept as their own cells, the others
    pooled in a rest cell; while the rest is expected fewer than ``min_count`` times, the least
    likely kept child joins it. Returns ``(keep, rest)``. Shared with
    :func:`specproof.properties.audit.sequence_test.trie_cells`."""
    keep = [k for k in kids if n * k[0] >= min_count]
    rest = [k for k in kids if n * k[0] < min_count]
    while rest and keep and n * sum(k[0] for k in rest) < min_count:
        rest.append(keep.pop())
    return keep, rest


def build_partition(
    models: Models, n: int, sub: int = 0, min_count: float = 10.0, max_cells: int = 128
) -> Partition:
    """The trie partition of the completed law of ``models`` for ``n`` samples (see module doc)."""
    if n < 1:
        raise ValueError(f"n: must be at least 1, got {n}")
    if max_cells < 1:
        raise ValueError(f"max_cells: must be at least 1, got {max_cells}")
    M = models.case.horizon
    support = np.asarray(models.support)
    base = len(support)
    if base**M >= 2**62:
        raise ValueError(
            f"case {models.case.name}: {base} support ids over {M} positions overflow the cell codes"
        )
    lut = models.lut
    local = {int(t): i for i, t in enumerate(support)}

    # A node: (code, h, depth, prob, prefix). Cells are created as nodes are split.
    root = (0, models.roots[sub], 0, 1.0, ())
    cells: list[tuple[float, str, bool]] = []  # (prob, label, resolved)
    kept: list[dict[int, int]] = [dict() for _ in range(M)]  # depth d-1 -> code -> cell id or -2
    rests: list[dict[int, int]] = [dict() for _ in range(M)]
    n_cells = 1
    expanded_root = False
    frontier: list[tuple[float, int, tuple]] = [(-1.0, 0, root)]
    pending: dict[int, tuple] = {}  # tie counter -> node, for nodes that stay as cells
    counter = 1
    while frontier:
        negp, tie, node = heapq.heappop(frontier)
        code, h, depth, prob, prefix = node
        if depth >= M:
            pending[tie] = node
            continue
        kids = [(prob * px, x) for px, x in models.law_py(h, sub)]
        kids.sort(key=lambda t: (-t[0], t[1]))
        keep, rest = split_children(kids, n, min_count)
        new_cells = len(keep) + (1 if rest else 0)
        if not keep or n_cells - 1 + new_cells > max_cells:
            pending[tie] = node
            continue
        n_cells += new_cells - 1
        if depth == 0:
            expanded_root = True
        scale = base**depth
        for kp, x in keep:
            ccode = code + local[x] * scale
            child = (ccode, child_hash(h, x), depth + 1, kp, prefix + (x,))
            heapq.heappush(frontier, (-kp, counter, child))
            kept[depth][ccode] = -(10**9) - counter  # placeholder: resolved when the child settles
            counter += 1
        if rest:
            rp = float(sum(k[0] for k in rest))
            resolved = len(rest) == 1 and _single_sequence(
                models, child_hash(h, rest[0][1]), sub, depth + 1, M
            )
            rests[depth][code] = len(cells)
            label = " ".join(map(str, prefix)) + (" " if prefix else "") + "{" + f"{len(rest)} other}}"
            cells.append((rp, label, resolved))
        else:
            rests[depth][code] = -3
    # Settle the nodes that stayed unexpanded as cells (and mark expanded ones).
    settled: dict[int, int] = {}
    for tie, (_code, h, depth, prob, prefix) in sorted(pending.items()):
        settled[tie] = len(cells)
        label = " ".join(map(str, prefix)) + (" *" if depth < M else "")
        cells.append((prob, label, _single_sequence(models, h, sub, depth, M)))
    for d in range(M):
        for c, v in list(kept[d].items()):
            tie = -(v + 10**9)
            kept[d][c] = settled.get(tie, -2)
    root_cell = -1 if expanded_root else settled[0]

    def table(d: dict[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        items = sorted(d.items())
        return (
            torch.tensor([k for k, _ in items], dtype=torch.int64),
            torch.tensor([v for _, v in items], dtype=torch.int64),
        )

    keys: list[torch.Tensor] = []
    vals: list[torch.Tensor] = []
    rkeys: list[torch.Tensor] = []
    rvals: list[torch.Tensor] = []
    for d in range(M):
        kt, vt = table(kept[d])
        keys.append(kt)
        vals.append(vt)
        rk, rv = table(rests[d])
        if len(rk) == 0:
            rk, rv = torch.tensor([-1]), torch.tensor([-3])
        rkeys.append(rk)
        rvals.append(rv)
    probs = np.array([c[0] for c in cells])
    probs = probs / probs.sum()
    unresolved = float(sum(p for p, (_, _, r) in zip(probs, cells) if not r))
    return Partition(
        probs, [c[1] for c in cells], unresolved, M, lut, base, keys, vals, rkeys, rvals, root_cell
    )
