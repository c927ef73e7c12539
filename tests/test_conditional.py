"""The per-position tests of next-token laws (properties/audit/conditional.py).

* calibrated: on exact samples of a K = 8 battery case (drawn from the law itself, no verifier)
  the per-position p-value falls below 0.01 in at most 11 of 300 seeded runs (a count of 12 or
  more has probability < 1e-4 when the rate is 0.01) and the p-values are uniform (KS, alpha
  1e-4); the same for a transformer-like law where every prefix is its own group;
* powerful where the cells are blind: the deep-only mutant (the residual drawn from p at draft
  positions >= 5) is rejected by the per-position tests at alpha 1e-6 / 24 on 20,000 steps,
  while the joint cells do not reject it (seed 0);
* a zero-probability token is a hard failure; the uncovered share is reported.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats as st

from specproof.properties.audit.battery import Inputs, build_models, chain_battery, complete
from specproof.properties.audit.conditional import battery_tests, sequence_tests
from specproof.properties.audit.stages import AuditConfig, audit
from specproof.properties.conformance import mutants  # noqa: F401  (registers mutant.*)
from specproof.properties.conformance.backends import REGISTRY
from specproof.reference.models import ToyLM

DEEP = {c.name: c for c in chain_battery()}["iid/K8/V8/deep"]


def _exact_battery_samples(models, n: int, seed: int) -> torch.Tensor:
    """Completed sequences of an empty emission: every token drawn from the preserved law."""
    B, M = n, models.case.horizon
    inputs = Inputs(
        torch.zeros(B, 1, dtype=torch.int64),
        torch.zeros(B, 1, dtype=torch.int64),
        None,
        torch.zeros(B, 1, 1),
        torch.zeros(B, dtype=torch.int64),
    )
    emitted = torch.full((B, M), -1, dtype=torch.int64)
    lengths = torch.zeros(B, dtype=torch.int64)
    return complete(models, inputs, emitted, lengths, torch.Generator().manual_seed(seed)).completed


@pytest.mark.slow
def test_per_position_tests_are_calibrated_on_exact_samples():
    models = build_models(DEEP)
    pvals = []
    for seed in range(300):
        seqs = _exact_battery_samples(models, 4000, seed)
        pvals.append(battery_tests(models, seqs, torch.zeros(len(seqs), dtype=torch.int64)).pvalue)
    pvals_a = np.array(pvals)
    assert (pvals_a <= 0.01).sum() <= 11, (pvals_a <= 0.01).sum()
    # the combined p-value is Bonferroni over 9 positions (conservative); one position's own
    # p-value must be uniform
    per_position = []
    for seed in range(300):
        seqs = _exact_battery_samples(models, 4000, 10_000 + seed)
        res = battery_tests(models, seqs, torch.zeros(len(seqs), dtype=torch.int64))
        per_position.append(res.positions[6].pvalue)  # one position's own p-value: uniform
    assert st.kstest(per_position, "uniform").pvalue > 1e-4


@pytest.mark.slow
def test_per_prefix_groups_are_calibrated_too():
    lm = ToyLM(vocab=3, seed=4)
    laws: dict[tuple[int, ...], np.ndarray] = {}

    def law(prefix):
        if prefix not in laws:
            laws[prefix] = np.array([float(x) for x in lm.law(prefix)])
        return laws[prefix]

    pvals = []
    for seed in range(300):
        rng = np.random.default_rng(seed)
        seqs = []
        for _ in range(600):
            s: tuple[int, ...] = ()
            for _ in range(4):
                s += (int(rng.choice(3, p=law(s))),)
            seqs.append(s)
        pvals.append(sequence_tests(seqs, law, 3, 4).pvalue)
    assert (np.array(pvals) <= 0.01).sum() <= 11


def test_the_deep_only_mutant_is_seen_by_the_per_position_tests_and_not_by_the_cells():
    mutant = REGISTRY[("chain", "mutant.deep_residual_from_p")]
    level = 1e-6 / len(chain_battery())
    result = audit(mutant, AuditConfig(samples=20_000, alpha=level, cases=[DEEP], probes=False))
    case = result.cases[0]
    assert result.verdict == "lossy", result.summary()
    assert case.p_positions <= level / 3
    assert min(case.p_chi2, case.p_cells) > 1e-3  # the cells (prefixes) are blind to it here
    w = case.positions.witness()
    assert w is not None and w.position >= 5  # the first token it can distort is the 5th


def test_a_correct_verifier_passes_the_same_case():
    token = REGISTRY[("chain", "torch.token")]
    level = 1e-6 / len(chain_battery())
    result = audit(token, AuditConfig(samples=20_000, alpha=level, tv=0.1, cases=[DEEP], probes=False))
    assert result.verdict == "pass", result.summary()
    assert result.cases[0].uncovered == 0.0  # every position of every step was tested


def test_a_zero_probability_token_is_a_hard_failure_and_uncovered_is_reported():
    def law(prefix):
        return [0.5, 0.5, 0.0]

    res = sequence_tests([(0, 1), (1, 2)], law, 3, 2)
    assert res.pvalue == 0.0 and res.zero == (1, 2)
    thin = sequence_tests([(0, 1)] * 5, law, 3, 2)
    assert thin.uncovered == 1.0 and thin.pvalue == 1.0  # five samples: nothing testable
