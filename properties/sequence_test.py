"""The statistical multi-step check: decoding runs against the target's exact law of M tokens.

Where the vocabulary is too large to enumerate the law of several speculative steps (the
16-token target of ``specproof e2e``), the decoding loop itself is sampled: R independent runs
from the same prompt, each until it has emitted at least M tokens (usually over several steps),
keep their first M tokens. Lossless decoding makes those M tokens a sample of the target's own
M-token law, which *is* computable (``V^M`` sequences from ``1 + V + .. + V^(M-1)`` forwards).

The test is Pearson's chi-square on cells fixed from that law and R before any run, as in the
audit (proofs_notes/audit_statistics.md): the prefix trie expanded best-first by mass, each
cell expected to hold at least ``min_count`` runs, at most ``max_cells`` cells; sequences too
rare to test alone are pooled by prefix. It reports the p-value at the stated alpha, the TV it
detects with power 0.99 at this R (the noncentrality bound of :func:`.stats.detectable_tv`) and
the unresolved mass (cells pooling several sequences); ``TV <= TV_cells + unresolved``.

For a rule that preserves greedy decoding the law is a point mass and the check is exact:
every run must emit the target's greedy tokens.

Checked by tests/test_sequence_test.py (an exact rule passes at seed 0, alpha 1e-6; typical
acceptance and a biased mutant are flagged; the cells' expected counts and lookup).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specproof.reference.models import LM, greedy_sequence, sequence_law

from .partition import split_children
from .stats import detectable_tv, pearson

Seq = tuple[int, ...]


@dataclass
class Cells:
    """A partition of the M-token sequences: prefix cells and pooled "rest" cells."""

    probs: np.ndarray
    labels: list[str]
    unresolved: float
    expanded: dict[Seq, int]  # expanded prefix -> its rest cell (-1: none)
    leaf: dict[Seq, int]  # unexpanded prefix (or full sequence) -> its cell

    def index(self, seq: Seq) -> int:
        """The cell of ``seq``; -1 if it has zero probability under the law."""
        node: Seq = ()
        while node in self.expanded:
            child = seq[: len(node) + 1]
            if child in self.expanded or child in self.leaf:
                node = child
                continue
            return self.expanded[node]
        return self.leaf.get(node, -1)


def trie_cells(law: dict[Seq, float], n: int, min_count: float = 10.0, max_cells: int = 128) -> Cells:
    """Cells for ``n`` samples of ``law`` (module doc); fixed before any data."""
    if n < 1:
        raise ValueError(f"n: must be at least 1, got {n}")
    if max_cells < 1:
        raise ValueError(f"max_cells: must be at least 1, got {max_cells}")
    m = max(len(s) for s in law)
    mass: dict[Seq, float] = {}
    kids: dict[Seq, set[Seq]] = {}
    for s, p in law.items():
        for d in range(m + 1):
            mass[s[:d]] = mass.get(s[:d], 0.0) + p
            if d:
                kids.setdefault(s[: d - 1], set()).add(s[:d])
    cells: list[tuple[float, str, bool]] = []
    expanded: dict[Seq, int] = {}
    leaf_nodes: list[Seq] = []
    count = 1
    frontier: list[tuple[float, Seq]] = [(-1.0, ())]
    while frontier:
        _, node = heapq.heappop(frontier)
        children = sorted(kids.get(node, ()), key=lambda c: (-mass[c], c))
        kept, pooled = split_children([(mass[c], c) for c in children], n, min_count)
        keep, rest = [c for _, c in kept], [c for _, c in pooled]
        new = len(keep) + (1 if rest else 0)
        if len(node) == m or not keep or count - 1 + new > max_cells:
            leaf_nodes.append(node)
            continue
        count += new - 1
        expanded[node] = -1
        if rest:
            expanded[node] = len(cells)
            label = " ".join(map(str, node)) + (" " if node else "") + "{" + f"{len(rest)} other}}"
            single = len(rest) == 1 and _one_sequence(rest[0], kids)
            cells.append((sum(mass[c] for c in rest), label, single))
        for c in keep:
            heapq.heappush(frontier, (-mass[c], c))
    leaf: dict[Seq, int] = {}
    for node in sorted(leaf_nodes):
        leaf[node] = len(cells)
        label = " ".join(map(str, node)) + (" *" if len(node) < m else "")
        cells.append((mass[node], label, _one_sequence(node, kids)))
    probs = np.array([c[0] for c in cells])
    probs = probs / probs.sum()
    unresolved = float(sum(p for p, c in zip(probs, cells) if not c[2]))
    return Cells(probs, [c[1] for c in cells], unresolved, expanded, leaf)


def _one_sequence(node: Seq, kids: dict[Seq, set[Seq]]) -> bool:
    while node in kids:
        if len(kids[node]) != 1:
            return False
        (node,) = kids[node]
    return True


@dataclass
class SequenceTest:
    runs: int
    horizon: int
    alpha: float
    p_value: float
    cells: int
    detectable_tv: float  # at power 0.99
    unresolved: float
    greedy: bool = False

    @property
    def lossless(self) -> bool:
        return self.p_value >= self.alpha

    def describe(self) -> str:
        if self.greedy:
            ok = "every run" if self.lossless else "NOT every run"
            return f"{ok} of {self.runs} emitted the target's greedy {self.horizon} tokens"
        return (
            f"{self.runs} runs, first {self.horizon} tokens, {self.cells} cells: p = {self.p_value:.3g} "
            f"(alpha {self.alpha:g}); detects TV >= {self.detectable_tv:.3f} on the cells with power 0.99 "
            f"(unresolved mass {self.unresolved:.3f})"
        )


def sequence_test(
    run: Callable[[int], Seq],
    target: LM,
    prompt: Seq,
    horizon: int,
    runs: int,
    alpha: float = 1e-6,
    greedy: bool = False,
    max_cells: int = 128,
) -> SequenceTest:
    """``run(r)`` decodes run r (its own seed) and returns at least ``horizon`` emitted tokens."""
    if runs < 1:
        raise ValueError(f"runs: must be at least 1, got {runs}")
    firsts = []
    for r in range(runs):
        out = run(r)
        if len(out) < horizon:
            raise ValueError(f"run {r} emitted {len(out)} tokens, fewer than the horizon {horizon}")
        firsts.append(tuple(out[:horizon]))
    if greedy:
        want = greedy_sequence(target, prompt, horizon)
        ok = all(f == want for f in firsts)
        return SequenceTest(runs, horizon, alpha, 1.0 if ok else 0.0, 1, 0.0, 0.0, greedy=True)
    law = {s: float(p) for s, p in sequence_law(target, prompt, horizon).items()}
    cells = trie_cells(law, runs, max_cells=max_cells)
    counts = np.zeros(len(cells.probs))
    for f in firsts:
        i = cells.index(f)
        if i < 0:  # a sequence the target cannot emit: lossy, no test needed
            return SequenceTest(runs, horizon, alpha, 0.0, len(cells.probs), 0.0, cells.unresolved)
        counts[i] += 1
    df = max(1, len(cells.probs) - 1)
    _, p = pearson(counts, cells.probs) if len(cells.probs) > 1 else (0.0, 1.0)
    return SequenceTest(
        runs,
        horizon,
        alpha,
        float(p),
        len(cells.probs),
        detectable_tv(runs, alpha, 0.99, df),
        cells.unresolved,
    )
