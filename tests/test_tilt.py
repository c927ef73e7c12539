"""The ``ids`` statistic (properties/tokens/tilt.py): its factor has conditional mean 1 under the
null for any weights, on dense, sparse and censored laws alike; its bettor keeps the false-alarm
rate under random stopping; and it learns a tilt that repeats across positions, which the
transform's statistics do not see."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as sps

from specproof.properties.tokens.case import Sample, TokenTest
from specproof.properties.tokens.eprocess import FactorBettor
from specproof.properties.tokens.law import TokenLaw
from specproof.properties.tokens.tilt import TiltLearner
from specproof.properties.tokens.transform import observe, observe_dense


def _laws(rng: np.random.Generator, n: int, vocab: int) -> np.ndarray:
    return rng.dirichlet(np.full(vocab, 0.3), size=n)


def test_the_factor_has_mean_one_under_the_law_for_any_weights():
    """Exact: for each law and any positive weights, sum_x p(x) * factor(x) = 1, the factor read
    through the dense path (every id as the emitted token), the sparse path and a censored law."""
    rng = np.random.default_rng(3)
    V = 40
    p = _laws(rng, 1, V)[0]
    w = rng.uniform(0.2, 5.0, V)

    def factor(o) -> float:  # type: ignore[no-untyped-def]
        return float(np.exp(o.ids_log[0]))

    dense = np.array([factor(observe_dense(p[None], [x], np.zeros(1), weights=w)) for x in range(V)])
    assert float(p @ dense) == pytest.approx(1.0, abs=1e-12)
    law = TokenLaw.dense(p)
    sparse = np.array([factor(observe([law], [x], np.zeros(1), weights=w)) for x in range(V)])
    np.testing.assert_allclose(sparse, dense, rtol=1e-12)
    top = np.argsort(-p)[:10]
    cens = TokenLaw.top({int(i): float(p[i]) for i in top}, V)
    factors = {x: factor(observe([cens], [x], np.zeros(1), weights=w)) for x in range(V)}
    # every id outside the ten known ones is the tail cell: one factor, the tail's mass
    assert len({round(factors[x], 12) for x in range(V) if x not in top}) == 1
    tail = next(x for x in range(V) if x not in top)
    mean = sum(p[i] * factors[int(i)] for i in top) + cens.tail * factors[tail]
    assert mean == pytest.approx(1.0, abs=1e-12)


def test_the_weights_move_only_after_a_sample_is_scored():
    """The learner's weights are a function of the samples scored before: the first sample is
    scored at weight 1 (factor 1 for every token), and a sample's counts enter after it."""
    rng = np.random.default_rng(4)
    test = TokenTest(alpha=1e-4, seed=0)
    case = test.add_case(0, 8)
    laws = _laws(rng, 8, 16)
    toks = tuple(int(rng.choice(16, p=row)) for row in laws)
    first = test.observe(case, Sample(0, toks, laws))
    np.testing.assert_allclose(first.ids_log, 0.0, atol=1e-12)
    assert first.ids_mass is None and first.ids_seen is None  # nothing of vocabulary size kept
    assert case.tilt.seen.sum() == 8 and case.tilt.expected.sum() == pytest.approx(8.0)
    second = test.observe(case, Sample(1, toks, laws))
    assert not np.allclose(second.ids_log, 0.0)


def _null_run(rng: np.random.Generator, chunks: int, vocab: int = 24, peek: bool = False) -> bool:
    """One null run of the learner and its bettor: 8 samples of 16 tokens a chunk, each token
    drawn from its own random law; True when the wealth ever reached 1/0.05. ``peek`` (a mutant):
    the weights learn a sample's own tokens before it is scored with them (not predictable)."""
    learner, bettor = TiltLearner(pseudo=10.0), FactorBettor()
    for _ in range(chunks):
        for _ in range(8):
            laws = _laws(rng, 16, vocab)
            toks = [int(rng.choice(vocab, p=row)) for row in laws]
            obs = observe_dense(laws, toks, np.zeros(16), weights=learner.sized(vocab))
            learner.learn(obs.ids_seen, obs.ids_mass)
            if peek:
                obs = observe_dense(laws, toks, np.zeros(16), weights=learner.sized(vocab))
            bettor.update(obs.ids_log)
        if bettor.log_wealth >= math.log(1 / 0.05):
            return True
    return False


def test_false_alarms_with_random_stopping_are_at_most_alpha():
    """Seed 13: 300 null runs of the ids bettor (a small pseudo-count, so that its weights move
    fast: the hardest case for its level), each looked at after every chunk and stopped at a
    random time; Ville bounds the rate of ever crossing 1/alpha by alpha = 0.05: at most 36 of 300
    allowed (more has probability below 1e-6 at a rate of 0.05). The mutant whose weights peek at
    the sample being scored crosses in more than 36 of 60 runs."""
    rng = np.random.default_rng(13)
    crossed = sum(_null_run(rng, int(rng.integers(1, 12))) for _ in range(300))
    assert crossed <= 36, crossed
    assert sps.binom.sf(36, 300, 0.05) < 1e-6
    # the check can fail: weights that learn a sample's own tokens before scoring it cross at once
    rng = np.random.default_rng(13)
    assert sum(_null_run(rng, int(rng.integers(1, 12)), peek=True) for _ in range(60)) > 36


def test_a_tilt_repeated_across_positions_is_learned():
    """Seed 5: tokens drawn from each law tilted by exp(0.3 c(x)), one fixed direction c over 64
    ids, at every position; the laws change from token to token. The ids bettor crosses 1/alpha =
    1e4 within 20,000 tokens; on the same laws without the tilt its wealth stays below 1."""
    rng = np.random.default_rng(5)
    V, n = 64, 20_000
    c = rng.standard_normal(V)
    tilted, exact = (TiltLearner(), FactorBettor()), (TiltLearner(), FactorBettor())
    for _ in range(0, n, 250):
        laws = _laws(rng, 250, V)
        q = laws * np.exp(0.3 * c)
        q /= q.sum(1, keepdims=True)
        for (learner, bettor), draw_from in ((tilted, q), (exact, laws)):
            toks = [int(rng.choice(V, p=row)) for row in draw_from]
            obs = observe_dense(laws, toks, rng.random(250), weights=learner.sized(V))
            learner.learn(obs.ids_seen, obs.ids_mass)
            bettor.update(obs.ids_log)
    assert tilted[1].log_wealth > math.log(1e4), tilted[1].log_wealth
    assert exact[1].log_wealth < 0.0, exact[1].log_wealth


def test_the_ids_power_table_holds_in_simulation():
    """docs/measurements/ids-power.md is scripts/ids_power.py's table, cited by token-audit.md; its
    cheapest row holds again from another seed and another draw of the ids that gain: seed 23, 20
    runs of the ids bettor (as the audit runs it) against that row's tilt, each stopped at the
    row's "9 runs in 10" tokens, cross at least 10 times (9 or fewer has probability 7e-7 where 9
    in 10 cross, 0.017 where only 7 in 10 do: the row's figure is itself read from 40 runs)."""
    import pathlib
    import re
    import sys

    from specproof.properties.tokens import power

    root = pathlib.Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "scripts"))
    import ids_power

    text = (root / "docs" / "measurements" / "ids-power.md").read_text()
    assert "python scripts/ids_power.py" in text
    assert "measurements/ids-power.md" in (root / "docs" / "token-audit.md").read_text()
    num = r"([0-9,]+|> [0-9,]+)"
    rows = re.findall(
        rf"^\| ([0-9,]+) \| ([0-9.]+) \| (\w+) \| {num} \| {num} \| (\d+)/(\d+) \|", text, flags=re.M
    )
    table = {(int(v.replace(",", "")), float(tv), g): q90 for v, tv, g, _, q90, _, _ in rows}
    assert len(table) == len(ids_power.ROWS) and (512, 0.01, "8") in table, table
    n = int(table[(512, 0.01, "8")].replace(",", ""))
    assert sps.binom.cdf(9, 20, 0.9) < 1e-6 and sps.binom.cdf(9, 20, 0.7) < 0.02
    rng = np.random.default_rng(23)
    d = ids_power.direction(rng, 512, "8")
    b = ids_power.strength(rng, 512, 0.01, 2.0, d)
    lt = power.log_threshold(1e-4, 1, "ids", power.shares(False, False))
    crossed = sum(ids_power.run_once(rng, 512, b, d, 2.0, lt, n) is not None for _ in range(20))
    assert crossed >= 10, (crossed, n)
