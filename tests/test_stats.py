"""The audit's statistics: planner, tests, Holm, TV interval, and calibration of the cell test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as st

from specproof.properties.audit import stats
from specproof.properties.audit.battery import (
    Inputs,
    build_models,
    chain_battery,
    child_hash,
    complete,
    tree_battery,
)
from specproof.properties.audit.partition import NO_CELL, build_partition


def test_planner_reaches_the_requested_power_and_no_less_n_does():
    n = stats.plan_samples(0.01, 1e-8, 0.99, 127)
    assert stats.power_at(n, 0.01, 1e-8, 127) >= 0.99
    assert stats.power_at(n - 1, 0.01, 1e-8, 127) < 0.99
    assert stats.detectable_tv(n, 1e-8, 0.99, 127) == pytest.approx(0.01, rel=1e-3)


def test_planner_rejects_bad_arguments():
    with pytest.raises(ValueError, match="tv"):
        stats.plan_samples(0.0, 1e-6, 0.99, 10)
    with pytest.raises(ValueError, match="alpha"):
        stats.plan_samples(0.01, 1.5, 0.99, 10)
    with pytest.raises(ValueError, match="df"):
        stats.plan_samples(0.01, 1e-6, 0.99, 0)


def test_least_favourable_noncentrality_bound():
    # For laws at TV eps, chi-square divergence >= 4 eps^2 (the planner's premise), checked on random pairs.
    rng = np.random.default_rng(20261130)
    for _ in range(200):
        p = rng.dirichlet(np.ones(6))
        q = rng.dirichlet(np.ones(6))
        tv = 0.5 * np.abs(p - q).sum()
        assert ((q - p) ** 2 / p).sum() >= 4 * tv**2 - 1e-12


def test_pearson_and_exact_cells_agree_with_scipy():
    counts = np.array([30, 50, 20])
    probs = np.array([0.3, 0.4, 0.3])
    stat, p = stats.pearson(counts, probs)
    ref = st.chisquare(counts, 100 * probs)
    assert stat == pytest.approx(ref.statistic)
    assert p == pytest.approx(ref.pvalue)
    pc, worst = stats.exact_cells(counts, probs)
    assert worst == 2
    # doubled smaller tail (a valid two-sided exact p-value), Bonferroni over the 3 cells
    two_sided = min(1, 2 * min(st.binom.cdf(20, 100, 0.3), st.binom.sf(19, 100, 0.3)))
    assert pc == pytest.approx(min(1, 3 * two_sided), rel=1e-9)


def test_holm_step_down():
    assert stats.holm([0.01, 0.04, 0.03, 0.5], 0.05) == [True, False, False, False]
    assert stats.holm([0.001, 0.012, 0.02, 0.5], 0.05) == [True, True, True, False]


def test_tv_interval_covers_the_true_tv():
    # alpha of this check: binomial tail of >= 22 misses in 200 at miss rate <= 5% is < 1e-3; seed fixed.
    rng = np.random.default_rng(7)
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.45, 0.3, 0.25])
    true = 0.05
    misses = 0
    for _ in range(200):
        iv = stats.tv_interval(rng.multinomial(500, q), p)
        misses += not iv.low <= true <= iv.high
    assert misses < 22


def _null_pvalues(case, n, seeds):
    """p-values of the cell test on samples of the target law itself (a perfect sampler)."""
    import torch

    models = build_models(case)
    part = build_partition(models, n)
    out = []
    for s in seeds:
        g = torch.Generator().manual_seed(s)
        B = n
        empty = torch.full((B, case.horizon), -1, dtype=torch.int64)
        inputs = Inputs(None, None, None, None, torch.zeros(B, dtype=torch.int64))  # type: ignore[arg-type]
        comp = complete(models, inputs, empty, torch.zeros(B, dtype=torch.int64), g)
        counts = np.bincount(part.assign(comp.completed).numpy(), minlength=part.cells)
        _, p_chi = stats.pearson(counts, part.probs)
        p_cells, _ = stats.exact_cells(counts, part.probs)
        out.append((p_chi, min(1.0, 2 * min(p_chi, p_cells))))
    return np.array(out)


@pytest.mark.parametrize(
    "case", [chain_battery()[1], chain_battery()[8], tree_battery("iid_siblings")[1]], ids=lambda c: c.name
)
def test_cell_test_is_calibrated_on_exact_samples(case):
    # 300 null runs at level 0.01: false alarms ~ Binomial(300, <= 0.01); >= 12 has probability < 1e-4.
    # The chi-square p-values are checked for uniformity with a KS test at alpha 1e-4. Seeds 0..299.
    pv = _null_pvalues(case, 4000, range(300))
    assert (pv[:, 1] <= 0.01).sum() < 12
    assert st.kstest(pv[:, 0], "uniform").pvalue > 1e-4


def test_sparse_case_support_has_high_ids():
    case = [c for c in chain_battery() if c.sparse][0]
    models = build_models(case)
    assert {0, 2**16, 2**16 + 1, case.vocab - 1} <= set(models.support.tolist())
    part = build_partition(models, 10_000)
    assert part.probs.sum() == pytest.approx(1.0)
    assert 0 <= part.unresolved <= 1


def _case(name, cases):
    return [c for c in cases if c.name == name][0]


@pytest.mark.parametrize(
    ("case", "sub"),
    [
        (_case("iid/K3/V5", chain_battery()), 0),
        (_case("onehot/K2/V6/onehot", chain_battery()), 0),
        (_case("iid/K2/V152064/sparse", chain_battery()), 0),
        (_case("iid/K2/V8/rows", chain_battery()), 1),
        (_case("wor/fan3/V6/tiny", tree_battery("wor_siblings")), 0),
    ],
    ids=lambda c: getattr(c, "name", str(c)),
)
@pytest.mark.parametrize(("n", "max_cells"), [(500, 128), (20_000, 128), (20_000, 16)])
def test_partition_lookups_agree_and_cells_hold_their_sequences_mass(case, sub, n, max_cells):
    # Every sequence over the support (plus an id outside it for the sparse case), exactly: the
    # vectorized Partition.assign equals the trie's per-sequence index, every positive-probability
    # sequence has a cell, and each cell's probability is the summed probability of its sequences.
    import itertools

    import torch

    models = build_models(case)
    part = build_partition(models, n, sub, max_cells=max_cells)
    ids = [int(t) for t in models.support] + ([case.vocab - 2] if case.sparse else [])
    M = case.horizon
    seqs = list(itertools.product(ids, repeat=M))
    prob = []
    for s in seqs:
        h, p = models.roots[sub], 1.0
        for x in s:
            p *= dict((t, q) for q, t in models.law_py(h, sub)).get(x, 0.0)
            h = child_hash(h, x)
        prob.append(p)
    cells = part.assign(torch.tensor(seqs, dtype=torch.int64)).tolist()
    assert cells == [part.trie.index(s) for s in seqs]
    mass = np.zeros(part.cells)
    for c, p in zip(cells, prob):
        if p > 0:
            assert c != NO_CELL
            mass[c] += p
    assert np.allclose(mass / sum(prob), part.probs, rtol=0, atol=1e-12)
    assert 1 <= part.cells <= max_cells
