"""The mutant corpus is flagged, every correct alternative passes; the mutation score is printed.

Each audit runs at the default family-wise alpha 1e-6 with seed 0 and a fixed sample size per
case (so the verdicts do not depend on machine load); the mutants stop at their first rejected
case. A correct alternative passes at its planned power against TV 0.04 on every non-sparse case:
no false alarm at alpha 1e-6 (not a proof).
"""

from __future__ import annotations

import pytest

from specproof.properties.audit.battery import chain_battery
from specproof.properties.audit.stages import AuditConfig, audit
from specproof.properties.conformance.backends import REGISTRY
from specproof.properties.conformance.mutants import alternatives, corpus

SCORE: dict[str, bool] = {}


@pytest.mark.slow
@pytest.mark.parametrize("backend", corpus(), ids=lambda b: f"{b.kind}:{b.name}")
def test_every_mutant_is_flagged(backend):
    slow = backend.name.startswith(("reference.", "mutant.tree_"))  # pure-Python row loops
    samples = 3000 if slow else 60_000
    result = audit(backend, AuditConfig(samples=samples, stop_early=True))
    SCORE[backend.name] = result.verdict == backend.expect
    print(f"\n{result.summary()}")
    assert result.verdict == backend.expect, result.summary()
    if result.verdict == "lossy":
        assert result.witness is not None and result.witness.pvalue <= 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("backend", alternatives(), ids=lambda b: b.name)
def test_every_correct_alternative_passes(backend):
    # the V = 152,064 cases are left out: their steps cost milliseconds each on a CPU
    cases = [c for c in chain_battery() if not c.sparse]
    result = audit(backend, AuditConfig(tv=0.04, cases=cases, probes=False))
    print(f"\n{result.summary()}")
    assert result.verdict == "pass", result.summary()
    assert all(r.status == "ran" and r.power >= 0.99 for r in result.cases)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "name", "process", "expect"),
    [
        ("chain", "reference.token", "iid_chain", "pass"),
        ("chain", "reference.block", "onehot_chain", "pass"),
        ("tree", "reference.mss", "iid_siblings", "pass"),
        ("tree", "reference.rrs", "wor_siblings", "pass"),
        ("tree", "reference.target_only", "topk_siblings", "pass"),
        ("tree", "reference.typical", "onehot_siblings", "lossy"),
    ],
)
def test_reference_rules_get_their_declared_verdict(kind, name, process, expect):
    b = REGISTRY[(kind, name)]
    from specproof.properties.conformance.backends import Backend

    b = Backend(b.name, b.kind, b.fn, (process,), b.expected(process), b.law)
    result = audit(b, AuditConfig(tv=0.3, large_vocab_tv=0.5, stop_early=True, probes=False))
    assert result.verdict == expect, result.summary()


def test_mutation_score_is_printed(capsys):
    flagged = [corpus_b.name for corpus_b in corpus() if SCORE.get(corpus_b.name)]
    with capsys.disabled():
        print(f"\nmutation score: {len(flagged)}/{len(corpus())} flagged as declared (this worker's share)")
    assert len(flagged) == len([b for b in corpus() if b.name in SCORE])
