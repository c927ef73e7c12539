"""The third contract: tree builders (parents in; mask, position ids and leaf paths out).

A tree builder turns a draft tree into the buffers a target's tree forward and the acceptance
step need: ``builder(parents) -> TreeBuffers`` with

* ``attention_mask [N, N]``: entry (i, j) nonzero iff node j is node i or one of its ancestors
  (proofs_notes/tree_attention.md);
* ``position_ids [N]``: each node's depth, relative to the prefix (tree_positions.md);
* ``leaf_paths [L, D + 1]``: one root path per leaf (node ids, root first), padded with any
  negative id; their order is free.

Node i of the buffers is node i of ``parents``: an adapter whose package numbers nodes its own
way (a choices list sorted by depth, say) translates to and from that numbering itself. A
builder that cannot express a tree (Medusa-1 builds only dense trees) raises
:class:`Unsupported`; the case is then reported as unsupported, not as a violation.

:func:`conform` runs a builder on :func:`battery` (chains, stars, dense trees, Medusa's and
EAGLE's published choices lists, seeded random trees up to 40 nodes, a 12-deep tree) and
checks each output against the reference's :class:`~specproof.reference.tree.DraftTree`, exactly.
Violations are named (:data:`VIOLATIONS`). Checked by tests/test_buffers.py, where mutants
(a causal mask, flattened position ids, a missing leaf) are caught.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from specproof.properties.verdicts import Verdict
from specproof.reference.errors import SpecproofError
from specproof.reference.proposers.medusa import choices_to_shape
from specproof.reference.tree import DraftTree

VIOLATIONS: dict[str, str] = {
    "raised": "the builder raised an exception on a valid tree",
    "type": "an output is missing or is not a tensor",
    "shape": "an output has the wrong shape",
    "mask": "the attention mask is not 'self and ancestors'",
    "positions": "a position id is not the node's depth",
    "leaf_paths": "the leaf paths are not the tree's root-to-leaf paths",
}


class Unsupported(SpecproofError):
    """The builder cannot express this tree (not a failure: it is reported as unsupported)."""


@dataclass
class TreeBuffers:
    attention_mask: Any
    position_ids: Any
    leaf_paths: Any


TreeBuilder = Callable[[tuple[int, ...]], TreeBuffers]


def reference_builder(parents: tuple[int, ...]) -> TreeBuffers:
    """The reference's buffers (``DraftTree``)."""
    tree = DraftTree(parents)
    return TreeBuffers(
        torch.tensor(tree.attention_mask()),
        torch.tensor(tree.position_ids()),
        torch.tensor(tree.leaf_paths()),
    )


def optimized_builder(parents: tuple[int, ...]) -> TreeBuffers:
    """The Triton kernel's buffers (:mod:`specproof.optimized.tree_buffers`), one tree a batch."""
    from specproof.optimized.tree_buffers import tree_buffers, unpack_mask

    out = tree_buffers(torch.tensor([parents]))
    n = len(parents)
    return TreeBuffers(
        unpack_mask(out.mask, n)[0], out.position_ids[0], out.leaf_paths[0, : int(out.n_leaves[0])]
    )


def _tensor(x: Any, what: str) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if isinstance(x, (list, tuple)):
        x = torch.tensor(x)
    if not isinstance(x, torch.Tensor):
        raise BufferViolation("type", f"{what} is a {type(x).__name__}, expected a tensor")
    return x.detach().cpu()


class BufferViolation(SpecproofError):
    """A builder's output that differs from the reference's buffers; ``kind`` is one of
    :data:`VIOLATIONS`."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind, self.detail = kind, detail
        super().__init__(f"{kind}: {detail}")


def check(parents: tuple[int, ...], out: TreeBuffers) -> None:
    """Raise :class:`BufferViolation` unless ``out`` equals the reference's buffers."""
    tree = DraftTree(parents)
    n = tree.n
    if not isinstance(out, TreeBuffers):
        raise BufferViolation("type", f"the builder returned a {type(out).__name__}, expected TreeBuffers")
    mask = _tensor(out.attention_mask, "attention_mask")
    if tuple(mask.shape) != (n, n):
        raise BufferViolation("shape", f"attention_mask has shape {tuple(mask.shape)}, expected ({n}, {n})")
    want = torch.tensor(tree.attention_mask())
    bad = (mask != 0) != want
    if bad.any():
        i, j = (int(v) for v in bad.nonzero()[0])
        seen = "sees" if mask[i, j] else "does not see"
        raise BufferViolation("mask", f"node {i} {seen} node {j}; its root path is {tree.ancestors(i)}")
    pos = _tensor(out.position_ids, "position_ids").reshape(-1)
    if len(pos) != n:
        raise BufferViolation("shape", f"position_ids has {len(pos)} entries, expected {n}")
    depth = torch.tensor(tree.depth)
    if not torch.equal(pos.long(), depth):
        i = int((pos.long() != depth).nonzero()[0])
        raise BufferViolation(
            "positions", f"node {i} has position {int(pos[i])}, its depth is {tree.depth[i]}"
        )
    paths = _tensor(out.leaf_paths, "leaf_paths")
    if paths.dim() != 2:
        raise BufferViolation("shape", f"leaf_paths has {paths.dim()} dimensions, expected 2")
    got = sorted(tuple(int(v) for v in row if v >= 0) for row in paths.long())
    want_paths = sorted(tuple(v for v in p if v >= 0) for p in tree.leaf_paths())
    if got != want_paths:
        extra = sorted(set(got) - set(want_paths))[:2]
        missing = sorted(set(want_paths) - set(got))[:2]
        raise BufferViolation(
            "leaf_paths", f"unexpected {extra}, missing {missing} (of {len(want_paths)} leaves)"
        )


def dense_tree(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Parents of the dense tree where every node at depth d - 1 has ``sizes[d - 1]`` children,
    numbered level by level with siblings together (Medusa-1's trees)."""
    parents, level = [-1], [0]
    for k in sizes:
        nxt = []
        for i in level:
            for _ in range(k):
                parents.append(i)
                nxt.append(len(parents) - 1)
        level = nxt
    return tuple(parents)


def _random_tree(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    """A tree whose nodes are numbered by depth with siblings together (choices-list order)."""
    parents, depth = [-1], [0]
    for _ in range(1, n):
        parents.append(int(rng.integers(len(parents))))
        depth.append(depth[parents[-1]] + 1)
    tree = DraftTree(tuple(parents))
    order = sorted(range(n), key=lambda i: (depth[i], tree.ancestors(i)))
    new = {old: k for k, old in enumerate(order)}
    return tuple(-1 if i == 0 else new[parents[i]] for i in order)


#: Medusa's and EAGLE's published sparse trees (their "mc_sim_7b_63" choices lists).
MEDUSA_MC_SIM_7B_63 = [(0,), (0, 0), (1,), (0, 1), (2,), (0, 0, 0), (1, 0), (0, 2), (3,), (0, 3), (4,), (0, 4), (2, 0), (0, 5), (0, 0, 1), (5,), (0, 6), (6,), (0, 7), (0, 1, 0), (1, 1), (7,), (0, 8), (0, 0, 2), (3, 0), (0, 9), (8,), (9,), (1, 0, 0), (0, 2, 0), (1, 2), (0, 0, 3), (4, 0), (2, 1), (0, 0, 4), (0, 0, 5), (0, 0, 0, 0), (0, 1, 1), (0, 0, 6), (0, 3, 0), (5, 0), (1, 3), (0, 0, 7), (0, 0, 8), (0, 0, 9), (6, 0), (0, 4, 0), (1, 4), (7, 0), (0, 1, 2), (2, 0, 0), (3, 1), (2, 2), (8, 0), (0, 5, 0), (1, 5), (1, 0, 1), (0, 2, 1), (9, 0), (0, 6, 0), (0, 0, 0, 1), (1, 6), (0, 7, 0)]  # fmt: skip  # noqa: E501
EAGLE_MC_SIM_7B_63 = [(0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0), (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1)]  # fmt: skip  # noqa: E501


def battery(seed: int = 0) -> list[tuple[str, tuple[int, ...]]]:
    """The trees every builder is checked on (named)."""
    cases: list[tuple[str, tuple[int, ...]]] = [("root only", (-1,))]
    cases += [(f"chain of {k}", tuple(range(-1, k))) for k in (1, 2, 5, 8)]
    cases += [(f"star of {k}", (-1,) + (0,) * k) for k in (2, 6)]
    for sizes in ((2, 2), (3, 2), (2, 2, 2), (4, 3, 2)):
        cases.append((f"dense {'x'.join(map(str, sizes))}", dense_tree(sizes)))
    cases.append(("Medusa mc_sim_7b_63", choices_to_shape(MEDUSA_MC_SIM_7B_63)))
    cases.append(("EAGLE mc_sim_7b_63", choices_to_shape(EAGLE_MC_SIM_7B_63)))
    rng = np.random.default_rng(seed)
    for n in (6, 12, 25, 40):
        cases.append((f"random {n} nodes (seed {seed})", _random_tree(rng, n)))
    cases.append(
        ("12 deep, branching at the root and at depth 6", (-1, 0, 0, 1, 3, 4, 5, 6, 6, 7, 9, 10, 11))
    )
    return cases


@dataclass
class CaseOutcome:
    name: str
    nodes: int
    status: str  # "pass", "unsupported" or a violation kind
    detail: str = ""


@dataclass
class BuilderResult:
    """A builder on the battery. ``verdict``: ``contract_violation`` if some output differs from
    the reference's (or the builder raised), ``pass`` if every tree it can express is right,
    ``not_applicable`` if it can express none of them."""

    name: str
    outcomes: list[CaseOutcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def verdict(self) -> Verdict:
        statuses = {o.status for o in self.outcomes}
        if statuses - {"pass", "unsupported"}:
            return Verdict.CONTRACT_VIOLATION
        return Verdict.PASS if "pass" in statuses else Verdict.NOT_APPLICABLE

    @property
    def checked(self) -> int:
        return sum(o.status == "pass" for o in self.outcomes)

    def summary(self) -> str:
        unsup = sum(o.status == "unsupported" for o in self.outcomes)
        head = f"{self.name} (tree builder): {self.verdict.value.upper()}: "
        head += f"{self.checked} trees equal the reference"
        lines = [head + (f", {unsup} not expressible by the builder" if unsup else "")]
        lines += [
            f"  {o.name} ({o.nodes} nodes): {o.status}: {o.detail}"
            for o in self.outcomes
            if o.status != "pass"
        ]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "kind": "tree_builder",
            "verdict": self.verdict.value,
            "seconds": self.seconds,
            "cases": [o.__dict__ for o in self.outcomes],
        }


def conform(name: str, builder: TreeBuilder, seed: int = 0) -> BuilderResult:
    """Run ``builder`` on every tree of the battery and check each output."""
    start = time.perf_counter()
    result = BuilderResult(name)
    for case, parents in battery(seed):
        try:
            out = builder(parents)
        except Unsupported as e:
            outcome = CaseOutcome(name=case, nodes=len(parents), status="unsupported", detail=str(e))
            result.outcomes.append(outcome)
            continue
        except Exception as e:
            detail = f"{type(e).__name__}: {e}"
            result.outcomes.append(CaseOutcome(name=case, nodes=len(parents), status="raised", detail=detail))
            continue
        try:
            check(parents, out)
        except BufferViolation as e:
            result.outcomes.append(CaseOutcome(name=case, nodes=len(parents), status=e.kind, detail=e.detail))
            continue
        result.outcomes.append(CaseOutcome(name=case, nodes=len(parents), status="pass"))
    result.seconds = time.perf_counter() - start
    return result


def builtin_builders() -> dict[str, TreeBuilder]:
    return {"reference.tree_buffers": reference_builder, "optimized.tree_buffers": optimized_builder}
