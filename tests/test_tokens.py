"""The token test: its null is exact (proved in proofs_notes/token_audit.md, checked here), its
e-processes are test martingales, its plan has the power it states, and its statistics see the
bug classes they are aimed at.

Every statistical check names its seed and alpha; each is a fixed outcome of its seed (no
flakes): the uniformity of the transforms under the null (seed 20261202, Kolmogorov-Smirnov at
alpha 1e-6), false alarms of the whole family with random stopping (seed 11, 400 runs at alpha
0.05: at most 44 allowed, a count with probability below 1e-6 under the bound), the power at the
plan (seed 12, 60 runs: at least 53 crossings where 0.99 is planned; fewer has probability below
1e-6 at power 0.99).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sps

from specproof.properties.tokens import power
from specproof.properties.tokens.case import Sample, TokenTest
from specproof.properties.tokens.eprocess import BinBettor, MeanBettor
from specproof.properties.tokens.family import Family, position_bins
from specproof.properties.tokens.law import TokenLaw
from specproof.properties.tokens.transform import Observations, observe, observe_dense, seeded_uniforms
from specproof.reference.errors import SpecproofInputError


def _laws(rng: np.random.Generator, m: int, v: int, zeros: bool = True) -> np.ndarray:
    P = rng.dirichlet(np.full(v, 0.3), size=m)
    if zeros:
        P[P < 0.01] = 0.0
        P /= P.sum(axis=1, keepdims=True)
    return P


def _draw(rng: np.random.Generator, P: np.ndarray) -> list[int]:
    return [int(rng.choice(len(p), p=p)) for p in P]


# --------------------------------------------------------------------------- the null, exactly


@pytest.mark.parametrize("tail", [Fraction(0), Fraction(1, 4), Fraction(3, 7)])
def test_the_transform_of_a_censored_law_is_exactly_uniform(tail):
    """P(U <= u) = u for every u, in exact arithmetic, on the partition the law's known ids and
    its tail make (claim 1 and claim 2 of the note): the randomized transform of the cell."""
    known = {3: Fraction(1, 2) * (1 - tail), 7: Fraction(1, 3) * (1 - tail), 1: Fraction(1, 6) * (1 - tail)}
    law = TokenLaw.top({k: float(v) for k, v in known.items()}, vocab=10)
    assert law.censored == (tail > 0)
    cells = [known[int(i)] for i in law.ids] + ([tail] if tail else [])
    assert [float(c) for c in cells] == pytest.approx(list(law.cell_probs))
    before = [sum(cells[:c], Fraction(0)) for c in range(len(cells))]

    def cdf(u: Fraction) -> Fraction:  # sum over cells of p_c P(F_c + v p_c <= u), v uniform
        return sum(
            (p * min(Fraction(1), max(Fraction(0), (u - f) / p)) for f, p in zip(before, cells)), Fraction(0)
        )

    points = {Fraction(k, 97) for k in range(98)} | set(before) | {Fraction(1)}
    assert all(cdf(u) == u for u in points)


def test_the_transforms_are_uniform_under_the_law():
    """Seed 20261202: tokens drawn from random laws (zeros included), their transforms by both
    paths; Kolmogorov-Smirnov against uniform at alpha 1e-6, and a censored reading of the same
    tokens (top 5 known, the rest a tail) uniform too."""
    rng = np.random.default_rng(20261202)
    us, cens = [], []
    for s in range(300):
        P = _laws(rng, 20, 30)
        x = _draw(rng, P)
        v = seeded_uniforms(1, 0, s, 20)
        us.append(observe_dense(P, x, v).u)
        top = [TokenLaw.top({int(i): float(p[i]) for i in np.argsort(-p)[:5]}, 30) for p in P]
        cens.append(observe(top, x, v).u)
    for u in (np.concatenate(us), np.concatenate(cens)):
        assert sps.kstest(u, "uniform").pvalue > 1e-6


def test_both_paths_give_the_same_numbers():
    rng = np.random.default_rng(3)
    P = _laws(rng, 40, 64)
    x = _draw(rng, P)
    v = rng.random(40)
    Q = _laws(rng, 40, 64, zeros=False)
    a = observe_dense(P, x, v, Q)
    b = observe([TokenLaw.dense(p) for p in P], x, v, list(Q))
    for name in ("u", "p_first", "surprisal", "expected_surprisal", "q", "expected_q"):
        assert np.allclose(getattr(a, name), getattr(b, name), atol=1e-12), name


def test_ties_are_ordered_by_id_on_both_paths():
    P = np.array([[0.25, 0.25, 0.25, 0.25]] * 4)
    v = np.full(4, 0.5)
    u = observe_dense(P, [0, 1, 2, 3], v).u
    assert np.allclose(u, [0.125, 0.375, 0.625, 0.875])
    assert np.allclose(observe([TokenLaw.dense(p) for p in P], [0, 1, 2, 3], v).u, u)


def test_both_paths_agree_at_a_large_vocabulary_with_ties():
    """Laws with runs of equal probabilities (ties of the token and not) at V = 4,096, against the
    TokenLaw path, exactly up to rounding: the smaller ids of equal probability come before the
    token in the test's order."""
    rng = np.random.default_rng(11)
    V = 4096
    P = np.repeat(rng.random((6, V // 64)), 64, axis=1)  # every probability 64 times
    P[3] = rng.random(V)  # a row without ties
    P /= P.sum(axis=1, keepdims=True)
    x = _draw(rng, P)
    v = rng.random(6)
    a = observe_dense(P, x, v)
    b = observe([TokenLaw.dense(p) for p in P], x, v)
    for name in ("u", "u_id", "p_first", "surprisal", "expected_surprisal"):
        assert np.allclose(getattr(a, name), getattr(b, name), atol=1e-12), name


def test_both_paths_agree_where_the_laws_are_read_through_their_head():
    """Peaked laws (a language model's shape: a few ids hold the mass, the rest lie below
    exp(-12)) have the logarithms of their head alone taken (transform.HEAD_SHARE): tokens inside
    and outside it, ties inside it (the token's and not) and in the tail, a row with no tail, and
    the draft's law, against the TokenLaw path, exactly up to rounding; a negative or NaN entry is
    still refused."""
    from specproof.properties.tokens import scan, transform

    rng = np.random.default_rng(12)
    V, m = 4096, 40  # the first block: 32 rows (transform.BLOCK_BYTES)
    P = np.exp(rng.normal(0.0, 6.0, size=(m, V)) - 30.0)  # a log-normal spread, most ids tiny
    P[:, :8] = rng.random((m, 8)) + 0.5  # the head: eight ids near 1/8 each
    P[1, 3] = P[1, 5]  # a tie in the head, the token's below
    P[2, 100:140] = P[2, 99]  # a run of equal tail entries, the token among them
    P[4] = 1.0  # no tail: every id in the head (its block read densely or not, the same)
    P /= P.sum(axis=1, keepdims=True)
    x = _draw(rng, P)
    x[1], x[2], x[3] = 5, 120, 3000  # tied in the head; tied in the tail; outside the head
    v = rng.random(m)
    Q = _laws(rng, m, V, zeros=False)
    rows = transform.BLOCK_BYTES // (8 * V)
    assert (P[:rows] >= scan.HEAD).mean() <= transform.HEAD_SHARE  # the block goes through its head
    a = observe_dense(P, x, v, Q)
    b = observe([TokenLaw.dense(p) for p in P], x, v, list(Q))
    for name in ("u", "u_id", "p_first", "surprisal", "expected_surprisal", "q", "expected_q"):
        assert np.allclose(getattr(a, name), getattr(b, name), rtol=1e-12, atol=1e-12), name
    for bad in (-1e-9, np.nan):
        B = P.copy()
        B[6, 2000] = bad
        with pytest.raises(SpecproofInputError, match="row 6"):
            observe_dense(B, x, v)


def test_the_compiled_passes_give_what_their_plain_loops_give():
    """The dense scoring's passes (tokens/scan.py) compiled and run as the plain Python they are
    written in, on one block: broad and peaked rows, ties, a zero, weights, the draft's laws, the
    logarithms given and taken in the pass. Counts equal; sums equal up to their order
    (rtol 1e-12)."""
    from specproof.properties.tokens import scan

    rng = np.random.default_rng(21)
    k, V = 6, 96
    B = np.exp(rng.normal(0.0, 5.0, size=(k, V)) - 12.0)
    B[1, :4] = 50.0  # a peaked row: four ids hold the mass
    B[2, 10:20] = B[2, 30]  # a run of ties, the token among them
    B[3, 7] = 0.0
    B /= B.sum(axis=1, keepdims=True)
    x = np.array([5, 2, 15, 7, 0, V - 1])
    w, D = rng.random(V) + 0.5, _laws(rng, k, V, zeros=False)
    s = B.sum(axis=1)
    floor = np.log(s) - 12.0
    with np.errstate(divide="ignore"):
        L = np.log(B)
    K = scan.kernels()
    got: list[np.ndarray] = []
    for run in (K, scan):  # compiled, then plain
        st, dt, e1, e2, mass = np.empty((k, 8)), np.empty((k, 4)), np.empty(k), np.empty(k), np.zeros(V)
        run.rows(B, x, w, st)
        run.clipped(B, L, s, floor, e1)
        run.clipped(B, np.zeros((0, 0)), s, floor, e2)
        run.gathered(B, 1.0 / s, mass)
        run.drafts(B, D, x, dt)
        got.append(np.concatenate([st.ravel(), dt.ravel(), e1, e2, mass]))
    assert np.allclose(got[0], got[1], rtol=1e-12, atol=0)
    assert got[0][scan.TIES + 8 * 2] == 10 - 5  # row 2's token at 15: five equal ids before it
    assert np.allclose(got[0][-2 * k - V : -k - V], got[0][-k - V : -V], rtol=1e-12)  # both logs


def test_the_dense_scoring_refuses_what_it_cannot_index():
    """The passes read without bounds: tokens, uniforms, drafts, end of sequence and weights are
    checked against the laws' shape first, each error naming its argument."""
    P = np.full((3, 4), 0.25)
    v = np.full(3, 0.5)
    bad = [
        (dict(tokens=[0, 4, 1]), "tokens"),
        (dict(tokens=[0, -1, 1]), "tokens"),
        (dict(tokens=[0, 1]), "tokens"),
        (dict(v=np.full(2, 0.5)), "v"),
        (dict(drafts=np.full((3, 5), 0.2)), "drafts"),
        (dict(eos=4), "eos"),
        (dict(weights=np.ones(3)), "weights"),
    ]
    for change, name in bad:
        args = dict(laws=P, tokens=[0, 1, 2], v=v) | change
        with pytest.raises(SpecproofInputError, match=f"^{name}:"):
            observe_dense(**args)


def test_the_dense_scoring_reads_up_to_the_impossible_token():
    """A token of probability 0 ends the sample's reading: its row is checked (a row that is not
    a law there is refused), the rows after it are not read."""
    P = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [np.nan, 1.0, 0.0]])
    obs = observe_dense(P, [1, 0, 1], np.full(3, 0.5))
    assert obs.impossible == 1 and len(obs.u) == 1
    P[1] = [0.0, 0.6, 0.6]
    with pytest.raises(SpecproofInputError, match="row 1"):
        observe_dense(P, [1, 0, 1], np.full(3, 0.5))


def test_a_token_outside_the_top_n_falls_in_the_tail_cell():
    law = TokenLaw.top({4: 0.5, 9: 0.2}, vocab=100)
    assert law.tail == pytest.approx(0.3) and law.cell(4) == 0 and law.cell(9) == 1 and law.cell(50) == 2
    obs = observe([law], [50], np.array([0.5]))
    assert obs.u[0] == pytest.approx(0.85) and obs.impossible is None


def test_a_token_of_probability_zero_is_a_hard_witness():
    P = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.0, 1.0, 0.0]])
    obs = observe_dense(P, [1, 2, 0], np.full(3, 0.5))
    assert obs.impossible == 2 and len(obs.u) == 2
    law = TokenLaw.sparse({0: 0.5, 1: 0.5}, vocab=3)
    assert observe([law], [2], np.array([0.5])).impossible == 0  # no tail to hold it


def test_a_law_that_is_not_one_is_refused():
    with pytest.raises(SpecproofInputError, match="sum"):
        TokenLaw.dense([0.5, 0.2])
    with pytest.raises(SpecproofInputError, match="> 1"):
        TokenLaw.top({0: 0.7, 1: 0.6}, vocab=5)
    with pytest.raises(SpecproofInputError, match="non-negative"):
        TokenLaw.dense([1.5, -0.5])


# --------------------------------------------------------------------------- the e-processes


def test_every_bet_keeps_the_wealth_positive_and_fair():
    """Each factor 1 + lambda g is at least 1/2 on the statistic's whole range, and its mean is 1
    for any zero-mean g (the product is a nonnegative martingale)."""
    b = MeanBettor(0.5)
    for lam in b.bets:
        for g in (-0.5, 0.5):
            assert 1 + lam * g >= 0.5 - 1e-12
        assert (0.5 * (1 + lam * 0.25) + 0.5 * (1 - lam * 0.25)) == pytest.approx(1.0)
    with pytest.raises(Exception, match="bound"):
        b.update(np.array([0.7]))


def test_the_bin_bettor_is_a_likelihood_ratio_against_uniform():
    """Its wealth after any sequence equals the Krichevsky-Trofimov estimator's probability of
    the cell sequence times K^n (computed here by hand)."""
    u = np.array([0.05, 0.05, 0.9, 0.05, 0.6])
    b = BinBettor(4)
    b.update(u[:2])
    b.update(u[2:])
    cells, counts, kt = [0, 0, 3, 0, 2], [0, 0, 0, 0], 1.0
    for t, c in enumerate(cells):
        kt *= (counts[c] + 0.5) / (t + 2.0)
        counts[c] += 1
    assert b.log_wealth == pytest.approx(math.log(kt * 4**5))


def _null_family(horizon: int = 16) -> Family:
    return Family(horizon, draft=True, blocks=True)


def _feed_null(f: Family, rng: np.random.Generator, samples: int, horizon: int) -> None:
    u = rng.random(samples * horizon)
    pf = rng.uniform(0.05, 0.9, samples * horizon)
    s = rng.uniform(0, 3, samples * horizon)
    q, eq = rng.random(samples * horizon), np.full(samples * horizon, 0.5)
    obs = Observations(u, pf, s, s.copy(), q, eq)
    # null statistics with mean 0: greedy's indicator drawn as U < p_first, surprisal and q centred
    obs.surprisal = s + rng.uniform(-1, 1, len(s))
    obs.q = np.clip(eq + rng.uniform(-0.4, 0.4, len(s)), 0, 1)
    pos = np.tile(np.arange(1, horizon + 1), samples)
    block = np.tile(np.arange(horizon) % 3, samples)
    f.update(obs, pos, block)


def test_false_alarms_with_random_stopping_are_at_most_alpha():
    """Seed 11: 400 null runs of a whole family (every statistic, positions and blocks),
    each looked at after every chunk and stopped at a random time; how many ever crossed 1/alpha
    at alpha 0.05. Ville bounds the rate by 0.05: at most 44 of 400 allowed (more has probability
    below 1e-6 if the rate were 0.05)."""
    rng = np.random.default_rng(11)
    crossed = 0
    for _ in range(400):
        f, stop = _null_family(), int(rng.integers(1, 40))
        for _ in range(stop):
            _feed_null(f, rng, 8, 16)
            if f.log_wealth >= math.log(1 / 0.05):
                crossed += 1
                break
    assert crossed <= 44, crossed
    assert sps.binom.sf(44, 400, 0.05) < 1e-6


def _reference_sample(rng: np.random.Generator, n: int, tv: float, statistic: str) -> Observations:
    """Transforms under the reference deviation of ``statistic`` (:mod:`.power`)."""
    pf = np.full(n, 0.5)
    if statistic == "mean":
        low = rng.random(n) < 0.5 + tv
        u = np.where(low, rng.random(n) * 0.5, 0.5 + rng.random(n) * 0.5)
    elif statistic == "greedy":  # mass tv onto the argmax, whose probability is 0.5
        first = rng.random(n) < 0.5 + tv
        u = np.where(first, rng.random(n) * 0.5, 0.5 + rng.random(n) * 0.5)
    else:
        raise KeyError(statistic)
    return Observations(u, pf, np.zeros(n), np.zeros(n))


@pytest.mark.parametrize("statistic", ["mean", "greedy"])
def test_the_plan_has_the_power_it_states(statistic):
    """Seed 12: 60 runs of the reference deviation of per-token TV 0.05 for the planned tokens at
    alpha 1e-4 (one case): at least 53 must cross (power 0.99 planned; 52 or fewer has
    probability below 1e-6 at 0.99)."""
    tv, alpha = 0.05, 1e-4
    n = power.plan_tokens(tv, alpha, 0.99, cases=1)
    rng = np.random.default_rng(12)
    hits = 0
    for _ in range(60):
        f = Family(64)
        for k in range(0, n, 4096):
            f.update(
                _reference_sample(rng, min(4096, n - k), tv, statistic), np.arange(min(4096, n - k)) % 64 + 1
            )
        hits += f.log_wealth >= math.log(1 / alpha)
    assert hits >= 53, hits
    assert sps.binom.cdf(52, 60, 0.99) < 1e-6


@pytest.mark.parametrize("statistic", ["mean", "greedy"])
def test_the_pooled_plan_has_the_power_it_states_and_each_case_alone_what_it_says(statistic):
    """Seed 13, four cases, alpha 1e-4, per-token TV 0.05: 60 audits whose every case deviates by
    the reference deviation, fed the pooled plan's tokens per case (a quarter of one case's
    plan, and a little more), must cross at least 53 times; and 60 whose first case alone
    deviates, at the TV the plan says one case alone is detected at, with the same tokens
    (power 0.99 stated: 52 or fewer has probability below 1e-6)."""
    tv, alpha, cases = 0.05, 1e-4, 4
    n = power.plan_tokens(tv, alpha, 0.99, cases, pooled=True)
    assert n < power.plan_tokens(tv, alpha, 0.99, 1) / 3.5
    w = power.shares(False, False)
    alone = power.detectable(statistic, n, alpha, 0.99, cases, w, power.family_share(cases, True))
    rng = np.random.default_rng(13)
    for deviating in (range(cases), range(1)):
        hits = 0
        for _ in range(60):
            test = TokenTest(alpha, seed=0)
            tcases = [test.add_case(i, 64) for i in range(cases)]
            test.pool()
            for i, c in enumerate(tcases):
                size = tv if len(deviating) == cases else (alone if i in deviating else 0.0)
                obs = _reference_sample(rng, n, size, statistic)
                obs.surprisal, obs.expected_surprisal = np.zeros(n), np.zeros(n)
                test.update(c, [obs])
            hits += test.rejected
        assert hits >= 53, (list(deviating), hits)


def test_the_plan_states_its_distance_to_the_information_limit():
    for tv in (0.05, 0.01, 0.003):
        for s in ("mean", "greedy"):
            need = power.tokens_needed(s, tv, math.log(1e4), 0.99)
            limit = power.information_limit(s, tv, 1e-4, 0.99)
            assert limit < need < 2.5 * limit, (s, tv, need, limit)  # within the documented factors
    # four cases share one pooled plan: in all a little more than one case's (its share of the
    # wealth is half), never four times it
    one, each = power.plan_tokens(0.01, 1e-4, 0.99, 1), power.plan_tokens(0.01, 1e-4, 0.99, 4, pooled=True)
    assert one < 4 * each < 1.1 * one


def test_the_serial_statistic_sees_consecutive_tokens_move_together():
    """Seed 13: consecutive transforms correlated by 0.3 (a uniform shared along a step)."""
    rng = np.random.default_rng(13)
    f = Family(32)
    for _ in range(200):
        z = rng.standard_normal(32)
        z[1:] = 0.3 * z[:-1] + math.sqrt(1 - 0.09) * z[1:]
        u = sps.norm.cdf(z)
        f.update(Observations(u, np.full(32, 0.5), np.zeros(32), np.zeros(32)))
    assert f.leader().family == "serial" and f.log_wealth > math.log(1e4)


def test_position_bins_cover_the_horizon_in_dyadic_steps():
    assert position_bins(1) == [(1, 1)]
    assert position_bins(12) == [(1, 1), (2, 3), (4, 12)] and position_bins(4) == [(1, 1), (2, 4)]
    for horizon in (2, 7, 64, 256, 1000, 1024):
        bins = position_bins(horizon)
        assert bins[0][0] == 1 and bins[-1][1] == horizon
        assert all(b[0] == a[1] + 1 for a, b in zip(bins, bins[1:]))  # no gap, no overlap
        assert all(b[1] - b[0] >= a[1] - a[0] for a, b in zip(bins, bins[1:]))  # never shorter
    assert position_bins(1024)[-2:] == [(256, 511), (512, 1024)]


def test_a_late_deviation_is_found_by_its_position_bin():
    """Seed 14: uniform transforms up to position 40, sharpened after (a KV crop wrong past 40)."""
    rng = np.random.default_rng(14)
    f = Family(128)
    for _ in range(300):
        u = rng.random(128)
        late = np.arange(1, 129) > 40
        u[late] = u[late] ** 1.3  # toward the likeliest tokens
        f.update(Observations(u, np.full(128, 0.3), np.zeros(128), np.zeros(128)))
    assert f.log_wealth > math.log(1e4)
    top = sorted(f.bets, key=lambda b: -(math.log(b.weight) + b.log_wealth))[:3]
    assert any(b.name.startswith("position[64-127]") or b.family in ("mean", "uniform") for b in top)


def test_the_token_test_over_cases_names_the_case_and_statistic():
    rng = np.random.default_rng(15)
    test = TokenTest(alpha=1e-3, seed=0)
    good, bad = test.add_case(0, 8), test.add_case(1, 8)
    for k in range(400):
        P = _laws(rng, 8, 12, zeros=False)
        test.score(good, [Sample(k, tuple(_draw(rng, P)), P)])
        greedy = tuple(int(np.argmax(p)) if rng.random() < 0.3 else int(rng.choice(12, p=p)) for p in P)
        test.score(bad, [Sample(k, greedy, P)])
    assert test.rejected and test.pvalue() <= 1e-3
    f = test.finding()
    assert f is not None and f["case"] == 1 and f["family"] in ("greedy", "mean", "uniform", "surprisal")


def test_the_docs_table_of_statistics_is_the_code_s():
    """docs/token-audit.md's table of statistics and shares is WEIGHTS, row for row."""
    import pathlib
    import re

    from specproof.properties.tokens.family import WEIGHTS

    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "token-audit.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| ([0-9.]+) \|", text, flags=re.M))
    assert {k: float(v) for k, v in rows.items()} == WEIGHTS


def test_the_statistics_parts_add_up_to_the_audit_wealth_at_every_point():
    """The report's wealth curves (proofs_notes/token_audit.md, "What the report draws"): at every
    kept point the statistics' parts add up to the audit's wealth, the first point is wealth 1
    at token 0, the points stay at most the trace's limit, and the last is the test's state."""
    rng = np.random.default_rng(16)
    test = TokenTest(alpha=1e-3, seed=0)
    test.trace.limit = 16
    good, bad = test.add_case(0, 8), test.add_case(1, 8)
    test.pool()
    for k in range(150):
        P = _laws(rng, 8, 12, zeros=False)
        test.score(good, [Sample(k, tuple(_draw(rng, P)), P)])
        greedy = tuple(int(np.argmax(p)) if rng.random() < 0.1 else int(rng.choice(12, p=p)) for p in P)
        test.score(bad, [Sample(k, greedy, P)])
    tr = test.to_json()["trace"]
    assert tr["tokens"][0] == 0 and tr["audit"][0] == pytest.approx(0.0, abs=1e-12)
    assert len(tr["tokens"]) <= 17 and tr["tokens"] == sorted(tr["tokens"])
    assert tr["tokens"][-1] == good.tokens + bad.tokens
    assert tr["audit"][-1] == pytest.approx(test.log_wealth / math.log(10), rel=1e-12)
    assert tr["threshold"] == pytest.approx(3.0)
    for i in range(len(tr["tokens"])):
        parts = sum(10 ** v[i] for v in tr["statistics"].values())
        assert math.log10(parts) == pytest.approx(tr["audit"][i], abs=1e-9), i
    assert sum(bad.pit) == bad.tokens and sum(good.pit) == good.tokens


def test_the_eos_power_table_is_the_code_s_and_holds_in_simulation():
    """docs/token-audit.md's table of the eos statistic's tokens is power.eos_tokens at alpha 1e-4
    and power 0.99; and seed 14: 60 runs of the eos bettor at three rows' stated tokens (the
    indicator drawn with the shifted mass) reach the bettor's threshold at least 55 times each
    (54 or fewer has probability below 1e-4 at power 0.99)."""
    import pathlib
    import re

    w = power.shares(False, False, eos=True)
    lt = power.log_threshold(1e-4, 1, "eos", w)
    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "token-audit.md").read_text()
    part = text.split("| p(eos) | shift 0.002 | shift 0.005 | shift 0.01 |", 1)[1]
    rows = re.findall(r"^\| ([0-9.]+) \| ([0-9,]+) \| ([0-9,]+) \| ([0-9,]+) \|$", part, flags=re.M)[:3]
    assert [float(r[0]) for r in rows] == [0.01, 0.05, 0.2]
    for p_eos, *cells in rows:
        want = [power.eos_tokens(s, float(p_eos), lt) for s in (0.002, 0.005, 0.01)]
        assert [int(c.replace(",", "")) for c in cells] == want
    assert sps.binom.cdf(54, 60, 0.99) < 1e-4
    rng = np.random.default_rng(14)
    for p_eos, shift in ((0.05, 0.01), (0.01, 0.005), (0.2, -0.01)):
        n, hits = power.eos_tokens(shift, p_eos, lt), 0
        for _ in range(60):
            b = MeanBettor(1.0)
            g = (rng.random(n) < p_eos + shift).astype(np.float64) - p_eos
            for chunk in np.array_split(g, 20):
                b.update(chunk)
                if b.log_wealth >= lt:
                    hits += 1
                    break
        assert hits >= 55, (p_eos, shift, hits)


def test_the_dependence_power_table_is_the_code_s_and_serial_holds_in_simulation():
    """docs/token-audit.md's table of the serial, index and block bettors is power.bettor_tokens at alpha
    1e-4 and power 0.99; and seed 15: 60 runs of the serial bettor at rho 0.05's stated tokens, on
    transforms of a Gaussian AR(1) whose consecutive transforms have rank correlation 0.05 (a
    drift of 0.05/3 in the statistic), reach the bettor's threshold at least 55 times (54 or fewer
    has probability below 1e-4 at power 0.99)."""
    import pathlib
    import re

    from scipy.signal import lfilter

    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "token-audit.md").read_text()
    part = text.split("| bettor | what it is tested against | size 0.01 | 0.02 | 0.05 | 0.1 |", 1)[1]
    sizes = (0.01, 0.02, 0.05, 0.1)
    assert set(power.BETTORS) == {
        "serial",
        "index",
        "index.mean",
        "block[b].uniform",
        "block[b].mean",
        "index.repeat[L]",
    }
    for bettor in power.BETTORS:
        row = re.findall(rf"^\| `{re.escape(bettor)}` \|[^|]*\|(.*)\|$", part, flags=re.M)[0]
        cells = [c.strip() for c in row.split("|")]
        assert len(cells) == len(sizes) and any(cells), (bettor, cells)
        for size, cell in zip(sizes, cells):
            if cell:
                assert int(cell.replace(",", "")) == power.bettor_tokens(bettor, size, 1e-4), (bettor, size)
    n = power.bettor_tokens("serial", 0.05, 1e-4)
    _, family, part_of, _ = power.BETTORS["serial"]
    lt = math.log(1e4) - math.log(power.shares(False, False)[family] * part_of)
    r = 2 * math.sin(math.pi * 0.05 / 6)  # the Gaussian correlation whose rank correlation is 0.05
    rng, hits = np.random.default_rng(15), 0
    for _ in range(60):
        # a stationary AR(1): z_0 = e_0, z_t = r z_(t-1) + sqrt(1 - r^2) e_t
        e = rng.standard_normal(n)
        z = lfilter([1.0], [1.0, -r], np.concatenate([e[:1], math.sqrt(1 - r * r) * e[1:]]))
        u = sps.norm.cdf(z)
        b = MeanBettor(1.0)
        for chunk in np.array_split(4.0 * (u[1:] - 0.5) * (u[:-1] - 0.5), 20):
            b.update(chunk)
            if b.log_wealth >= lt:
                hits += 1
                break
    assert hits >= 55, hits
