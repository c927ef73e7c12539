"""Draft trees: validation, ancestry, tree attention, positions, leaf paths, KV commit.

Convention (proofs_notes/tree_validation.md): ``parents[0] == -1`` and ``parents[i] < i``. Node 0 is the last
committed token; nodes 1..N-1 are drafts. A chain is ``[-1, 0, 1, 2, ...]``.

* A node's attention row holds exactly its ancestors and itself: it never sees a sibling
  branch (proofs_notes/tree_attention.md).
* Its position id is ``prefix_len + depth``: siblings share a position, unlike the flattened
  index (proofs_notes/tree_positions.md).
* After verification only the accepted root path's KV entries are kept, compacted right
  behind the prefix (proofs_notes/kv_commit.md).

Checked by tests/test_tree.py.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field

from specproof.reference.errors import UsageError

from .errors import (
    CycleError,
    DTypeError,
    EmptyTreeError,
    ForwardParentError,
    MultipleRootsError,
    ParentOutOfRangeError,
    RootError,
    ShapeError,
)


def validate_parents(parents: object, argument: str = "parents") -> tuple[int, ...]:
    """Check that ``parents`` is a draft tree in our convention; return it as a tuple.

    Raises (all subclasses of NotATreeError except the first two): ShapeError (not a
    sequence), DTypeError (a non-integer entry), EmptyTreeError, RootError, ParentOutOfRangeError,
    MultipleRootsError, CycleError, ForwardParentError. The walk that looks for cycles is bounded
    by the number of nodes, so a malformed array can never hang it.
    """
    if hasattr(parents, "tolist") and callable(parents.tolist):
        parents = parents.tolist()
    if isinstance(parents, (str, bytes)) or not isinstance(parents, Sequence):
        raise ShapeError(argument, f"expected a sequence of parent indices, got {type(parents).__name__}")
    out = []
    for i, v in enumerate(parents):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise DTypeError(f"{argument}[{i}]", f"expected an integer node index, got {v!r}")
        out.append(int(v))
    n = len(out)
    if n == 0:
        raise EmptyTreeError(argument, "is empty; a tree has at least its root, node 0")
    if out[0] != -1:
        raise RootError(f"{argument}[0]", f"is {out[0]}; node 0 is the root and its parent must be -1")
    for i, v in enumerate(out):
        if v < -1 or v >= n:
            raise ParentOutOfRangeError(f"{argument}[{i}]", f"is {v}, outside [-1, {n - 1}]")
    for i in range(1, n):
        if out[i] == -1:
            raise MultipleRootsError(f"{argument}[{i}]", "is -1: only node 0 may be a root")
    for i in range(1, n):
        seen = {i}
        j = out[i]
        for _ in range(n):
            if j == -1:
                break
            if j in seen:
                raise CycleError(f"{argument}[{i}]", f"following parents from node {i} returns to node {j}")
            seen.add(j)
            j = out[j]
    for i in range(1, n):
        if out[i] > i:
            raise ForwardParentError(
                f"{argument}[{i}]", f"is {out[i]} > {i}: a parent must come before its child"
            )
    return tuple(out)


@dataclass(frozen=True)
class DraftTree:
    """A validated draft tree. Construct with ``DraftTree(parents)``."""

    parents: tuple[int, ...]
    depth: tuple[int, ...] = field(init=False, repr=False, compare=False)
    children: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __init__(self, parents: object, argument: str = "parents") -> None:
        ps = validate_parents(parents, argument)
        object.__setattr__(self, "parents", ps)
        depth = [0] * len(ps)
        kids: list[list[int]] = [[] for _ in ps]
        for i in range(1, len(ps)):
            depth[i] = depth[ps[i]] + 1
            kids[ps[i]].append(i)
        object.__setattr__(self, "depth", tuple(depth))
        object.__setattr__(self, "children", tuple(tuple(k) for k in kids))

    @classmethod
    def chain(cls, k: int) -> DraftTree:
        """The chain of ``k`` drafts after the root: ``[-1, 0, 1, ..., k-1]``."""
        return cls([-1] + list(range(k)))

    @property
    def n(self) -> int:
        return len(self.parents)

    @property
    def max_depth(self) -> int:
        return max(self.depth)

    @property
    def is_chain(self) -> bool:
        return all(len(c) <= 1 for c in self.children)

    def ancestors(self, i: int) -> tuple[int, ...]:
        """The root path to ``i``: ``(0, ..., parent(i), i)``."""
        path = []
        while i != -1:
            path.append(i)
            i = self.parents[i]
        return tuple(reversed(path))

    def leaves(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.n) if not self.children[i])

    def attention_mask(self) -> tuple[tuple[bool, ...], ...]:
        """``mask[i][j]`` is True iff node ``j`` is an ancestor of node ``i`` or ``i`` itself."""
        rows = []
        for i in range(self.n):
            anc = set(self.ancestors(i))
            rows.append(tuple(j in anc for j in range(self.n)))
        return tuple(rows)

    def position_ids(self, prefix_len: int = 0) -> tuple[int, ...]:
        """Position of each node: ``prefix_len + depth`` (node 0 sits at ``prefix_len``)."""
        if prefix_len < 0:
            raise UsageError(f"prefix_len: must be >= 0, got {prefix_len}")
        return tuple(prefix_len + d for d in self.depth)

    def leaf_paths(self) -> tuple[tuple[int, ...], ...]:
        """Retrieve indices: one root path per leaf, in leaf order, padded with -1 to max depth + 1."""
        width = self.max_depth + 1
        return tuple(self.ancestors(leaf) + (-1,) * (width - self.depth[leaf] - 1) for leaf in self.leaves())

    def is_root_path(self, nodes: Sequence[int]) -> bool:
        """True iff ``nodes`` is ``(0, c1, c2, ...)`` with each node a child of the one before."""
        if len(nodes) == 0 or nodes[0] != 0:
            return False
        for a, b in zip(nodes, nodes[1:]):
            if not (0 <= b < self.n) or self.parents[b] != a:
                return False
        return True

    def kv_commit_plan(
        self, accepted: Sequence[int], prefix_len: int
    ) -> tuple[tuple[tuple[int, int], ...], int]:
        """Cache moves that keep only the accepted path's KV, compacted behind the prefix.

        During verification node ``i`` occupies cache slot ``prefix_len + i``. After accepting
        the root path ``accepted = (0, a1, ..., ak)`` slot ``prefix_len + a_j`` moves to
        ``prefix_len + j``. Returns ``(moves, new_length)`` with only the moves where source and
        destination differ, in increasing destination order (safe in place since
        ``a_j >= j``); ``new_length = prefix_len + k + 1``.
        """
        if not self.is_root_path(accepted):
            raise UsageError(f"accepted: {tuple(accepted)} is not a root path of this tree")
        if prefix_len < 0:
            raise UsageError(f"prefix_len: must be >= 0, got {prefix_len}")
        moves = tuple((prefix_len + a, prefix_len + j) for j, a in enumerate(accepted) if a != j)
        return moves, prefix_len + len(accepted)
