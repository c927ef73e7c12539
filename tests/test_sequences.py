"""The statistical multi-step check of ``specproof e2e`` (properties/audit/sequences.py).

Cells: fixed from the law and the run count, each expected to hold >= 10 runs, at most
``max_cells``, a partition of every sequence. Verdicts at alpha 1e-6 with fixed seeds (so they
cannot flake): the decoding loop with an exact rule passes; typical acceptance, and a loop whose
target laws are at the wrong temperature, are flagged; in greedy mode one wrong token fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from specproof.properties.audit.sequences import check_runs, trie_cells
from specproof.reference.decode import decode, e2e_models
from specproof.reference.models import ToyLM, sequence_law
from specproof.reference.proposers import PROPOSERS
from specproof.reference.transformer import TransformerLM

_, BIG = e2e_models()
PROMPT = (3, 4)
DRAFT = PROPOSERS["draft"].make_drafter(BIG)


@pytest.mark.parametrize(("n", "max_cells"), [(50, 128), (400, 128), (5000, 16), (100000, 128)])
def test_cells_partition_every_sequence_with_enough_expected_runs(n, max_cells):
    law = {s: float(p) for s, p in sequence_law(ToyLM(5, 3), (0,), 3).items()}
    cells = trie_cells(law, n, max_cells=max_cells)
    assert 1 <= len(cells.probs) <= max_cells
    assert abs(cells.probs.sum() - 1) < 1e-12
    assert (n * cells.probs >= 10 - 1e-9).all() or len(cells.probs) == 1
    mass = np.zeros(len(cells.probs))
    for s, p in law.items():
        i = cells.index(s)
        assert i >= 0
        mass[i] += p
    assert np.allclose(mass, cells.probs, atol=1e-12)  # each cell's probability is its sequences'
    if n == 100000:
        assert cells.unresolved < 0.5  # enough runs resolve most sequences alone


def _runs(rule: str, temperature: float = 1.0):
    def run(r: int) -> tuple[int, ...]:
        out = decode(
            BIG,
            DRAFT,
            "iid_chain",
            rule,
            (-1, 0, 1, 2),
            PROMPT,
            3,
            np.random.default_rng([0, r]),
            temperature=temperature,
            until=3,
        )
        return tuple(out.tokens[len(PROMPT) :])

    return run


def test_an_exact_rule_passes():
    res = check_runs(_runs("token"), TransformerLM(BIG), PROMPT, 3, runs=200, alpha=1e-6)
    assert res.lossless, res.describe()
    assert res.cells > 1 and 0 < res.detectable_tv < 1


def test_typical_acceptance_and_a_wrong_temperature_are_flagged():
    for run in (_runs("typical"), _runs("token", temperature=0.7)):
        res = check_runs(run, TransformerLM(BIG), PROMPT, 3, runs=200, alpha=1e-6)
        assert not res.lossless, res.describe()


def test_greedy_mode_is_exact():
    target = TransformerLM(BIG, 0.0)
    ok = check_runs(_runs("greedy"), target, PROMPT, 3, runs=5, greedy=True)
    assert ok.lossless and "every run" in ok.describe()

    def off_by_one(r: int) -> tuple[int, ...]:
        seq = _runs("greedy")(r)
        return seq if r < 4 else (seq[0], (seq[1] + 1) % BIG.vocab) + seq[2:]

    assert not check_runs(off_by_one, target, PROMPT, 3, runs=5, greedy=True).lossless


def test_bad_arguments():
    with pytest.raises(ValueError, match="runs"):
        check_runs(_runs("token"), TransformerLM(BIG), PROMPT, 3, runs=0)
    with pytest.raises(ValueError, match="fewer than the horizon"):
        check_runs(lambda r: (1,), TransformerLM(BIG), PROMPT, 3, runs=2)
    with pytest.raises(ValueError, match="n"):
        trie_cells({(0,): 1.0}, 0)
