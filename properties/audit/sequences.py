"""The statistical multi-step check: decoding runs against the target's exact law of M tokens.

Where the vocabulary is too large to enumerate the law of several speculative steps (the
16-token target of ``specproof e2e``), the decoding loop itself is sampled: R independent runs
from the same prompt, each until it has emitted at least M tokens (usually over several steps),
keep their first M tokens. Lossless decoding makes those M tokens a sample of the target's own
M-token law, which *is* computable (``V^M`` sequences from ``1 + V + .. + V^(M-1)`` forwards).

Two tests, combined by Bonferroni (:func:`check_sequences`, also the engine audit's statistics):

* Pearson's chi-square on cells fixed from that law and R before any run, as in the audit
  (proofs_notes/audit_statistics.md): the prefix trie expanded best-first by mass, each cell
  expected to hold at least ``min_count`` runs, at most ``max_cells`` cells; sequences too rare
  to test alone are pooled by prefix. It reports the TV it detects with power 0.99 at this R
  (the noncentrality bound of :func:`.stats.detectable_tv`) and the unresolved mass (cells
  pooling several sequences); ``TV <= TV_cells + unresolved``.
* The per-position tests of :mod:`.conditional`: the next-token law at every prefix reached by
  enough runs, summed per position, so a deviation deep in the sequence is seen even where the
  cells pool it; they report the share of runs with a position left untested.

The law is read through ``next_law(prefix)`` only where needed, so it need not be enumerable.

For a rule that preserves greedy decoding the law is a point mass and the check is exact:
every run must emit the target's greedy tokens.

Checked by tests/check_sequences.py (an exact rule passes at seed 0, alpha 1e-6; typical
acceptance and a biased mutant are flagged; the cells' expected counts and lookup).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specproof.properties.audit.conditional import ConditionalResult, sequence_tests
from specproof.properties.audit.partition import TrieCells, expand_trie
from specproof.properties.audit.stats import TVInterval, detectable_tv, pearson, plugin_floor, tv_interval
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError
from specproof.reference.models import LM, greedy_sequence

Seq = tuple[int, ...]


Cells = TrieCells  # the joint law's cells: prefix cells and pooled "rest" cells, with ``index``


def trie_cells(law: dict[Seq, float], n: int, min_count: float = 10.0, max_cells: int = 128) -> Cells:
    """Cells for ``n`` samples of ``law`` (module doc); fixed before any data."""
    if not law:
        raise UsageError("law: empty")
    m = max(len(s) for s in law)
    mass: dict[Seq, float] = {}
    for s, p in law.items():
        for d in range(m + 1):
            mass[s[:d]] = mass.get(s[:d], 0.0) + p
    vocab = 1 + max((max(s) for s in law if s), default=0)

    def next_law(prefix: Seq) -> list[float]:
        total = mass.get(prefix, 0.0)
        return [mass.get(prefix + (x,), 0.0) / total if total > 0 else 0.0 for x in range(vocab)]

    return prefix_cells(next_law, m, n, min_count, max_cells)


def prefix_cells(
    next_law: Callable[[Seq], Sequence[float]],
    horizon: int,
    n: int,
    min_count: float = 10.0,
    max_cells: int = 128,
) -> Cells:
    """Cells for ``n`` samples of the M-token law whose next-token law after a prefix is
    ``next_law(prefix)`` (a row over the vocabulary, normalized here), expanded best-first by
    the audit's engine (:func:`.partition.expand_trie`, ties by prefix); ``next_law`` is called
    only on expanded prefixes (and along single continuations, to tell resolved cells), so the
    law need not be enumerable."""

    def law(node: Seq) -> list[tuple[float, int]]:
        row = [float(v) for v in next_law(node)]
        total = sum(row)
        return [(v / total, x) for x, v in enumerate(row) if v > 0]

    return expand_trie(law, horizon, n, min_count, max_cells, ties="prefix")


@dataclass(kw_only=True)
class SequenceTest:
    """The verdict on sampled M-token sequences against their exact law.

    Two families, combined by Bonferroni: Pearson's test on the prefix cells (the joint law;
    its power against TV on the cells is planned) and the per-position tests of
    :mod:`.conditional` (every next-token law with enough samples, so deep positions are seen).
    ``verdict`` is ``pass`` or ``lossy``; ``summary()`` says so in a line, ``to_json()`` in full.
    """

    runs: int
    horizon: int
    alpha: float
    pvalue: float
    cells: int
    detectable_tv: float  # on the cells, at power 0.99
    unresolved: float  # mass of cells holding several sequences
    greedy: bool = False
    p_joint: float = 1.0
    conditional: ConditionalResult | None = None
    worst: list[dict[str, Any]] = field(default_factory=list)  # most deviating cells
    zero: dict[str, Any] | None = None  # a sequence the law gives probability 0
    #: the size of what was seen: the plug-in TV on the cells with its 95% interval, and the
    #: plug-in TV an exact sampler shows at this size (:func:`.stats.plugin_floor`)
    seen: TVInterval | None = None
    floor: float | None = None

    def size_text(self) -> str:
        """The deviation's size on the cells in a phrase (empty where it was not measured)."""
        if self.seen is None or self.floor is None:
            return ""
        s = self.seen
        return (
            f"plug-in TV {s.estimate:.3f} on the cells (95% interval [{s.low:.3f}, {s.high:.3f}]; an "
            f"exact engine shows about {self.floor:.3f} at {self.runs} samples)"
        )

    @property
    def lossless(self) -> bool:
        return self.pvalue >= self.alpha

    @property
    def verdict(self) -> Verdict:
        return Verdict.PASS if self.lossless else Verdict.LOSSY

    @property
    def uncovered(self) -> float:
        """Share of sampled sequences with a position no per-position test covered."""
        return 1.0 if self.conditional is None else self.conditional.uncovered

    def summary(self) -> str:
        if self.greedy:
            ok = "every run" if self.lossless else "NOT every run"
            return f"{ok} of {self.runs} emitted the target's greedy {self.horizon} tokens"
        if self.zero is not None:
            return f"run {self.zero['run']} emitted {self.zero['sequence']}, which the target cannot emit"
        text = (
            f"{self.runs} runs, first {self.horizon} tokens, {self.cells} cells: p = {self.pvalue:.3g} "
            f"(alpha {self.alpha:g}); detects TV >= {self.detectable_tv:.3f} on the cells with power 0.99 "
            f"(unresolved mass {self.unresolved:.3f})"
        )
        c = self.conditional
        if c is not None:
            text += (
                f"; per position: {c.tested}/{self.horizon} positions tested, "
                f"{self.uncovered:.3f} of runs not covered"
            )
            w = c.witness()
            if not self.lossless and w is not None and w.worst is not None and w.pvalue <= self.p_joint:
                g = w.worst
                cells = ", ".join(
                    f"{lab}: {o} vs {e:.1f}" for lab, o, e in zip(g.labels, g.observed, g.expected)
                )
                text += f"; deviates at position {w.position} after {g.label} ({cells})"
        return text

    def describe(self) -> str:
        """:meth:`summary` (its earlier name)."""
        return self.summary()

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "runs": self.runs,
            "horizon": self.horizon,
            "alpha": self.alpha,
            "pvalue": self.pvalue,
            "p_joint": self.p_joint,
            "cells": self.cells,
            "detectable_tv": self.detectable_tv,
            "unresolved_mass": self.unresolved,
            "worst_cells": self.worst,
            "zero": self.zero,
            "plugin_tv": None if self.seen is None else self.seen.to_json(),
            "plugin_floor": self.floor,
            "per_position": None if self.conditional is None else self.conditional.to_json(),
        }


def check_sequences(
    seqs: Sequence[Sequence[int]],
    next_law: Callable[[Seq], Sequence[float] | np.ndarray],
    vocab: int,
    horizon: int,
    alpha: float = 1e-6,
    max_cells: int = 128,
    min_count: float = 10.0,
    power: float = 0.99,
    group: Callable[[Seq], Any] | None = None,
) -> SequenceTest:
    """Test sampled sequences (their first ``horizon`` tokens) against the law whose next-token
    law after a prefix of the M tokens is ``next_law(prefix)``: the cells of the joint law and
    the per-position tests, Bonferroni-combined. A sequence the law cannot emit is a hard failure
    (p = 0). ``next_law`` is called on the prefixes the cells expand and the samples reach."""
    if not seqs:
        raise UsageError("seqs: no samples")
    firsts = [tuple(int(x) for x in s[:horizon]) for s in seqs]
    for r, f in enumerate(firsts):
        if len(f) < horizon:
            raise UsageError(f"run {r} emitted {len(f)} tokens, fewer than the horizon {horizon}")
    memo: dict[Seq, list[float]] = {}

    def law(prefix: Seq) -> list[float]:
        if prefix not in memo:
            memo[prefix] = [float(v) for v in next_law(prefix)]
        return memo[prefix]

    runs = len(firsts)
    cond = sequence_tests(firsts, law, vocab, horizon, min_count, group)
    if cond.zero is not None:
        r = cond.zero[0]
        return SequenceTest(
            runs=runs,
            horizon=horizon,
            alpha=alpha,
            pvalue=0.0,
            cells=0,
            detectable_tv=0.0,
            unresolved=0.0,
            p_joint=0.0,
            conditional=cond,
            zero={"run": r, "sequence": list(firsts[r]), "position": cond.zero[1]},
        )
    cells = prefix_cells(law, horizon, runs, min_count, max_cells)
    counts = np.zeros(len(cells.probs))
    for f in firsts:
        counts[cells.index(f)] += 1
    df = max(1, len(cells.probs) - 1)
    _, p_joint = pearson(counts, cells.probs) if len(cells.probs) > 1 else (0.0, 1.0)
    z = (counts - runs * cells.probs) / np.sqrt(np.maximum(runs * cells.probs, 1e-300))
    worst = [
        {"cell": cells.labels[j], "observed": int(counts[j]), "expected": float(runs * cells.probs[j])}
        for j in np.argsort(-np.abs(z))[:5]
    ]
    return SequenceTest(
        runs=runs,
        horizon=horizon,
        alpha=alpha,
        pvalue=float(min(1.0, 2 * min(p_joint, cond.pvalue))),
        cells=len(cells.probs),
        detectable_tv=detectable_tv(runs, alpha / 2, power, df),
        unresolved=cells.unresolved,
        p_joint=float(p_joint),
        conditional=cond,
        worst=worst,
        seen=tv_interval(counts, cells.probs),
        floor=plugin_floor(cells.probs, runs),
    )


def check_runs(
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
        raise UsageError(f"runs: must be at least 1, got {runs}")
    firsts = []
    for r in range(runs):
        out = run(r)
        if len(out) < horizon:
            raise UsageError(f"run {r} emitted {len(out)} tokens, fewer than the horizon {horizon}")
        firsts.append(tuple(out[:horizon]))
    if greedy:
        want = greedy_sequence(target, prompt, horizon)
        ok = all(f == want for f in firsts)
        return SequenceTest(
            runs=runs,
            horizon=horizon,
            alpha=alpha,
            pvalue=1.0 if ok else 0.0,
            cells=1,
            detectable_tv=0.0,
            unresolved=0.0,
            greedy=True,
        )
    return check_sequences(
        firsts, lambda prefix: target.law(prompt + prefix), target.vocab, horizon, alpha, max_cells
    )
