"""Testing one verifier case: its completed sequences binned on the cells of its joint law (fixed
by the law and the sample size before any data), Pearson's and the exact cell test, the per-position
tests, and the power stated at the case's planned TV (proofs_notes/audit_statistics.md)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from specproof.properties.audit import stats
from specproof.properties.audit.conditional import battery_tests
from specproof.properties.audit.config import AuditConfig
from specproof.properties.audit.partition import Partition, build_partition
from specproof.properties.audit.results import CaseResult

if TYPE_CHECKING:
    from specproof.properties.audit.stages import Runner

#: the tests combined per case by Bonferroni: Pearson's on the cells, the exact cells test, the
#: per-position tests
TESTS_PER_CASE = 3


def _partitions(runner: Runner, n: int, config: AuditConfig) -> list[Partition]:
    m = runner.models
    if not runner.case.paired:
        return [build_partition(m, n, 0, config.min_count, config.max_cells)]
    pairs = max(1, n // 2)
    side = max(2, int(math.isqrt(config.max_cells)))
    mc = math.sqrt(config.min_count * pairs)
    return [build_partition(m, pairs, s, mc, side) for s in (0, 1)]


def _cell_probs(parts: list[Partition]) -> tuple[np.ndarray, list[str]]:
    if len(parts) == 1:
        return parts[0].probs, parts[0].labels
    a, b = parts
    probs = np.outer(a.probs, b.probs).ravel()
    labels = [f"A[{la}] B[{lb}]" for la in a.labels for lb in b.labels]
    return probs, labels


def _assign(parts: list[Partition], completed: torch.Tensor, sub: torch.Tensor) -> torch.Tensor:
    if len(parts) == 1:
        return parts[0].assign(completed)
    a = parts[0].assign(completed[sub == 0])
    b = parts[1].assign(completed[sub == 1])
    m = min(len(a), len(b))
    return a[:m] * parts[1].cells + b[:m]


def evaluate_case(
    r: CaseResult,
    runner: Runner,
    seqs: torch.Tensor,
    subs: torch.Tensor,
    config: AuditConfig,
    alpha_case: float,
) -> None:
    """Bin the completed sequences on the case's cells (fixed by the law and n), test the joint
    law and the per-position laws, and state the power at the case's planned TV."""
    parts = _partitions(runner, len(seqs), config)
    probs, labels = _cell_probs(parts)
    cells = _assign(parts, seqs, subs)
    counts = np.bincount(cells.numpy(), minlength=len(probs))[: len(probs)]
    n = int(counts.sum())
    r.cells = len(probs)
    r.unresolved = float(sum(p.unresolved for p in parts) / len(parts))
    r.statistic, r.p_chi2 = stats.pearson(counts, probs)
    r.p_cells, _ = stats.exact_cells(counts, probs)
    r.positions = battery_tests(runner.models, seqs, subs, config.min_count)
    r.p_positions = r.positions.pvalue
    r.pvalue = min(1.0, TESTS_PER_CASE * min(r.p_chi2, r.p_cells, r.p_positions))
    r.tv = stats.tv_interval(counts, probs)
    level = alpha_case / TESTS_PER_CASE
    if len(probs) == 1 and r.unresolved == 0.0:
        # one possible sequence: any deviation emits a zero-probability token, a hard failure
        r.power = 1.0 - (1.0 - r.tv_planned) ** n
        r.detectable_tv = 1.0 - (1.0 - config.power) ** (1.0 / n)
    else:
        r.power = stats.power_at(n, r.tv_planned, level, len(probs) - 1)
        r.detectable_tv = stats.detectable_tv(n, level, config.power, len(probs) - 1)
    z = (counts - n * probs) / np.sqrt(np.maximum(n * probs, 1e-300))
    r.worst = [
        {"cell": labels[j], "observed": int(counts[j]), "expected": float(n * probs[j]), "z": float(z[j])}
        for j in np.argsort(-np.abs(z))[:5]
    ]
