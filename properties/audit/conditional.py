"""Deep positions: tests of the next-token law at every prefix, combined per position.

The law of a completed M-token sequence factorizes into next-token laws,
``P(y) = prod_d law(y_{d+1} | y_1..y_d)``. A cell test on the joint law (:mod:`.partition`)
resolves the first tokens well but sees a deep position only through prefix cells that pool
everything after them: at K = 8 its unresolved mass is close to 1. This module tests the
factors instead.

**The test at one position.** For position ``d + 1`` (d = 0..M-1) the sampled sequences are
grouped by their prefix ``y_1..y_d``; prefixes whose next-token law is the same may share a group
(the audit's battery draws every context's law from a small pool, so all prefixes with the same
pool entry form one group; a transformer target gives every prefix its own). Within a group of
``N`` sequences the next tokens are counted against ``N * law``: children expected at least
``min_count`` times are cells of their own, the others are pooled (:func:`.partition.split_children`);
a group with fewer than two cells is not tested. Pearson's statistics of the tested groups are
summed, with their degrees of freedom, into one chi-square statistic for the position.

**Why it is valid.** Under the null hypothesis, *given* the first ``d`` tokens of every sequence,
the next tokens of a group are a multinomial sample of ``N`` draws from its law (a sum of
independent multinomials with one law), independently across groups. Which groups are tested and
how their children are pooled depends only on those first ``d`` tokens. So, conditionally on
them, the position's statistic is a sum of independent chi-square variables (asymptotically, each
cell expected ``min_count`` or more) and its p-value ``p_d`` is uniform; ``p_d`` is uniform given
every earlier position's data, so the M p-values are independent uniforms and Bonferroni over
the M positions (a count fixed in advance) gives a valid combined p-value
(proofs_notes/audit_statistics.md, "Deep positions").

**What it does not see.** A deviation that cancels inside a group (two prefixes of one group
deviating in opposite directions) or that lives only in prefixes too rare to be tested. The
*uncovered* fraction reports the second: the share of sampled sequences with some position whose
group was not tested.

Measured calibration and power: ``specproof calibrate --deep`` (docs/verifier-audit.md, "Deep positions").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats as st

from specproof.properties.audit.partition import split_children
from specproof.properties.audit.stats import plugin_floor
from specproof.reference.errors import UsageError


@dataclass
class GroupTest:
    """One tested group at one position: its cells, observed and expected."""

    label: str  # the prefix (or the group) the counts are conditioned on
    n: int
    labels: list[str]
    observed: list[int]
    expected: list[float]
    statistic: float

    def size(self) -> tuple[float, float]:
        """The plug-in TV of the next-token counts against the law at this prefix, and the one an
        exact sampler shows at this many samples (:func:`.stats.plugin_floor`)."""
        n = max(1, self.n)
        p = np.asarray(self.expected, dtype=float) / n
        return 0.5 * float(np.abs(np.asarray(self.observed) / n - p).sum()), plugin_floor(p, n)

    def to_json(self) -> dict[str, Any]:
        return {
            "given": self.label,
            "n": self.n,
            "cells": [
                {"next": lab, "observed": o, "expected": e}
                for lab, o, e in zip(self.labels, self.observed, self.expected)
            ],
            "chi2": self.statistic,
        }


@dataclass
class PositionTest:
    position: int  # 1-based: the law of y_position given y_1..y_{position-1}
    groups: int
    statistic: float
    df: int
    pvalue: float
    samples: int  # sequences that entered a tested group at this position
    worst: GroupTest | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "groups": self.groups,
            "chi2": self.statistic,
            "df": self.df,
            "pvalue": self.pvalue,
            "samples": self.samples,
            "worst_group": None if self.worst is None else self.worst.to_json(),
        }


@dataclass
class ConditionalResult:
    """The per-position tests of one sample of M-token sequences."""

    horizon: int
    positions: list[PositionTest] = field(default_factory=list)
    pvalue: float = 1.0  # Bonferroni over the horizon's positions
    uncovered: float = 0.0  # share of sequences with some position not tested
    zero: tuple[int, int] | None = None  # (sequence index, position) of a zero-probability token

    @property
    def tested(self) -> int:
        return sum(1 for p in self.positions if p.df > 0)

    def witness(self) -> PositionTest | None:
        """The position with the smallest p-value (where the deviation shows most)."""
        live = [p for p in self.positions if p.df > 0]
        return min(live, key=lambda p: p.pvalue) if live else None

    def to_json(self) -> dict[str, Any]:
        return {
            "pvalue": self.pvalue,
            "uncovered": self.uncovered,
            "positions": [p.to_json() for p in self.positions],
        }


def _group_test(
    counts: np.ndarray, law: np.ndarray, min_count: float, names: Sequence[str]
) -> tuple[float, int, list[str], list[int], list[float]] | None:
    """Pearson's statistic of one group (counts and law over the same ids), or None if fewer
    than two cells can be formed. Zero-probability children must have been ruled out."""
    n = int(counts.sum())
    if n == 0:
        return None
    order = [int(j) for j in np.argsort(-law, kind="stable") if law[j] > 0]
    keep, rest = split_children([(float(law[j]), j) for j in order], n, min_count)
    cells = [[j] for _, j in keep] + ([[j for _, j in rest]] if rest else [])
    if len(cells) < 2:
        return None
    obs = [int(counts[c].sum()) for c in cells]
    exp = [float(n * law[c].sum()) for c in cells]
    stat = float(sum((o - e) ** 2 / e for o, e in zip(obs, exp)))
    labels = [names[c[0]] if len(c) == 1 else "{" + f"{len(c)} other" + "}" for c in cells]
    return stat, len(cells) - 1, labels, obs, exp


def combine(
    per_position: list[list[tuple[str, np.ndarray, np.ndarray]]],
    names: Sequence[str],
    min_count: float = 10.0,
) -> tuple[list[PositionTest], float]:
    """``per_position[d]``: the groups at position ``d + 1`` as ``(label, counts, law)``.

    Returns the position tests and the Bonferroni p-value over ``len(per_position)`` positions.
    """
    out: list[PositionTest] = []
    for d, groups in enumerate(per_position):
        total, df, samples, worst, worst_z = 0.0, 0, 0, None, -1.0
        tested = 0
        for label, counts, law in groups:
            t = _group_test(counts, law, min_count, names)
            if t is None:
                continue
            stat, g_df, labels, obs, exp = t
            tested += 1
            total += stat
            df += g_df
            samples += int(counts.sum())
            z = (stat - g_df) / np.sqrt(2.0 * g_df)  # how far this group is from its null mean
            if z > worst_z:
                worst_z = z
                worst = GroupTest(label, int(counts.sum()), labels, obs, exp, stat)
        p = float(st.chi2.sf(total, df)) if df > 0 else 1.0
        out.append(PositionTest(d + 1, tested, total, df, p, samples, worst))
    m = max(1, len(per_position))
    pmin = min((p.pvalue for p in out), default=1.0)
    return out, float(min(1.0, m * pmin))


def sequence_tests(
    seqs: Sequence[Sequence[int]],
    law: Callable[[tuple[int, ...]], Sequence[float]],
    vocab: int,
    horizon: int,
    min_count: float = 10.0,
    group: Callable[[tuple[int, ...]], Hashable] | None = None,
) -> ConditionalResult:
    """Per-position tests of sampled sequences (each at least ``horizon`` long; the first
    ``horizon`` tokens are used) against ``law(prefix)``, the next-token law after a prefix of
    the M tokens. ``group(prefix)`` gives prefixes that share a law one key (default: every
    prefix is its own group). ``law`` is called once per distinct prefix seen in the sample."""
    if horizon < 1:
        raise UsageError(f"horizon: must be at least 1, got {horizon}")
    firsts = [tuple(int(x) for x in s[:horizon]) for s in seqs]
    for i, s in enumerate(firsts):
        if len(s) < horizon:
            raise UsageError(f"seqs[{i}]: {len(s)} tokens, fewer than the horizon {horizon}")
    names = [str(x) for x in range(vocab)]
    result = ConditionalResult(horizon)
    cache: dict[tuple[int, ...], np.ndarray] = {}

    def law_of(prefix: tuple[int, ...]) -> np.ndarray:
        if prefix not in cache:
            row = np.asarray([float(v) for v in law(prefix)], dtype=np.float64)
            if row.shape != (vocab,):
                raise UsageError(f"law{prefix}: {row.shape[0]} entries, expected {vocab}")
            cache[prefix] = row / row.sum()
        return cache[prefix]

    per_position: list[list[tuple[str, np.ndarray, np.ndarray]]] = []
    covered = np.ones(len(firsts), dtype=bool)
    for d in range(horizon):
        members: dict[Hashable, list[int]] = defaultdict(list)
        for i, s in enumerate(firsts):
            members[s[:d] if group is None else group(s[:d])].append(i)
        groups = []
        for _key, rows in members.items():
            prefix = firsts[rows[0]][:d]
            p = law_of(prefix)
            counts = np.bincount([firsts[i][d] for i in rows], minlength=vocab).astype(np.int64)
            bad = np.flatnonzero((counts > 0) & (p <= 0))
            if len(bad):
                i = next(i for i in rows if firsts[i][d] == int(bad[0]))
                result.zero = (i, d + 1)
                result.pvalue = 0.0
                return result
            label = " ".join(map(str, prefix)) or "(start)"
            if group is not None and len(rows) > 1:
                label += f" and {len(members[_key]) - 1} more prefixes with its law"
            if _group_test(counts, p, min_count, names) is None and np.count_nonzero(p) > 1:
                covered[rows] = False  # too few to test; a one-token law needs no test
            groups.append((label, counts, p))
        per_position.append(groups)
    result.positions, result.pvalue = combine(per_position, names, min_count)
    result.uncovered = float(1.0 - covered.mean()) if len(firsts) else 1.0
    return result


def battery_tests(models: Any, seqs: Any, subs: Any, min_count: float = 10.0) -> ConditionalResult:
    """Per-position tests of an audit case's completed sequences ``seqs [n, M]`` (torch int64;
    ``subs [n]`` the model pair of each row). Prefixes are grouped by the pool entry their
    context hash selects (:mod:`.battery`): every prefix of a group has the same law.
    Zero-probability tokens must have been ruled out (the audit's hard failure)."""
    import torch

    from specproof.properties.audit.battery import child_hash_t

    n, M = seqs.shape
    result = ConditionalResult(M)
    if n == 0:
        result.uncovered = 1.0
        return result
    G = models.preserve_s.shape[0]
    S = len(models.support)
    names = [str(int(t)) for t in models.support]
    roots = torch.tensor(models.roots, dtype=torch.int64)[subs]
    h = roots.clone()
    covered = torch.ones(n, dtype=torch.bool)
    per_position = []
    for d in range(M):
        g = models.index(h, subs)
        local = models.lut[seqs[:, d]].clamp(min=0)
        counts = torch.bincount(g * S + local, minlength=G * S).reshape(G, S).numpy()
        groups = []
        for j in np.flatnonzero(counts.sum(axis=1)):
            law = models.preserve_s[j].numpy()
            example = int((g == int(j)).nonzero()[0])
            prefix = " ".join(str(int(x)) for x in seqs[example, :d]) or "(start)"
            members = int((g == int(j)).sum())
            label = f"pool law {j}, e.g. after {prefix} ({members} sequences)"
            if _group_test(counts[j], law, min_count, names) is None and np.count_nonzero(law) > 1:
                covered &= g != int(j)
            groups.append((label, counts[j], law))
        per_position.append(groups)
        h = child_hash_t(h, seqs[:, d])
    result.positions, result.pvalue = combine(per_position, names, min_count)
    result.uncovered = float(1.0 - covered.double().mean())
    return result
