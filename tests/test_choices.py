"""The choice interface: tape semantics, sampler/tape coupling, enumerator vs tape frequencies."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specproof.properties.oracle import strategies as sps
from specproof.properties.oracle.exact import step_emitted_law
from specproof.reference.choices import (
    Sampler,
    TapeExhaustedError,
    TapeReader,
    bernoulli_from_uniform,
    categorical_from_uniform,
    enumerate_law,
    random_tape,
)
from specproof.reference.rules import RULES


def test_bernoulli_tape_semantics_is_u_less_than_p():
    assert bernoulli_from_uniform(0.0, 0) is False
    assert bernoulli_from_uniform(0.999999, 1) is True
    assert bernoulli_from_uniform(0.3, Fraction(0.3)) is False  # u == p exactly: not below
    assert bernoulli_from_uniform(0.3, Fraction(3, 10)) is True  # float 0.3 lies just below 3/10
    assert bernoulli_from_uniform(0.29, Fraction(3, 10)) is True


def test_categorical_tape_semantics_is_inverse_cdf_skipping_zero_weights():
    w = [Fraction(0), Fraction(1, 4), Fraction(0), Fraction(3, 4)]
    assert categorical_from_uniform(0.0, w) == 1
    assert categorical_from_uniform(0.2499, w) == 1
    assert categorical_from_uniform(0.25, w) == 3
    assert categorical_from_uniform(0.9999999999, w) == 3
    # unnormalized weights are scaled by their total
    assert categorical_from_uniform(0.5, [1, 1, 2]) == 2
    assert categorical_from_uniform(0.49, [1.0, 1.0, 2.0]) == 1


@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=6).filter(lambda w: sum(w) > 0),
    st.floats(0, 1, exclude_max=True),
)
def test_categorical_never_returns_a_zero_weight(w, u):
    i = categorical_from_uniform(u, w)
    assert w[i] > 0


def _program(ch):
    a = ch.bernoulli(Fraction(1, 3), ("accept", 0))
    b = ch.categorical([Fraction(1, 2), Fraction(1, 6), Fraction(1, 3)], ("final", 0))
    return (a, b) if a else (a, ch.categorical([1, 1], ("y", 1)) + 10 * b)


def test_enumerator_is_exact():
    law = enumerate_law(_program)
    assert sum(law.values()) == 1
    assert law[(True, 0)] == Fraction(1, 6)
    assert law[(False, 0)] == Fraction(2, 3) * Fraction(1, 2) * Fraction(1, 2)
    assert all(isinstance(v, Fraction) for v in law.values())


def test_sampler_is_reproducible_and_its_tape_replays():
    outs = []
    for _ in range(2):
        s = Sampler(np.random.default_rng(7))
        outs.append([_program(s)])
        replay = TapeReader(s.tape)
        assert _program(replay) == outs[-1][0]
    assert outs[0] == outs[1]


def test_tape_errors_are_specific():
    with pytest.raises(TapeExhaustedError, match="site"):
        _program(TapeReader({"accept": [0.9]}))
    with pytest.raises(ValueError, match=r"not in \[0, 1\)"):
        _program(TapeReader({"accept": [1.5], "final": [0.1], "y": [0.2]}))
    with pytest.raises(TypeError, match="rng"):
        Sampler(42)  # type: ignore[arg-type]


def test_a_site_drawn_twice_is_an_error():
    def twice(ch):
        ch.bernoulli(0.5, ("accept", 1))
        ch.bernoulli(0.5, ("accept", 1))

    with pytest.raises(ValueError, match="twice"):
        twice(Sampler(np.random.default_rng(0)))


def _chi_square_sf(stat: float, df: int) -> float:
    """Upper tail of the chi-square law (Wilson-Hilferty approximation, accurate for df >= 1)."""
    if df <= 0:
        return 1.0
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def _pearson_p(counts: dict, exact: dict, n: int) -> float:
    """Pearson chi-square p-value of observed counts against an exact law (cells with expected
    count < 5 pooled into one)."""
    stat, pooled_obs, pooled_exp, df = 0.0, 0, 0.0, -1
    for seq, p in exact.items():
        e = n * float(p)
        if e < 5:
            pooled_obs += counts.get(seq, 0)
            pooled_exp += e
            continue
        stat += (counts.get(seq, 0) - e) ** 2 / e
        df += 1
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        df += 1
    return _chi_square_sf(stat, df)


class _FlippedCoins(TapeReader):
    """A mutant tape interpreter whose coins read ``u >= p`` instead of ``u < p``."""

    def bernoulli(self, p, site):
        return not super().bernoulli(p, site)


def _tape_counts(rule: str, reader_cls, n: int, seed: int):
    from specproof.properties.oracle.exact import Instance, step_inputs
    from specproof.reference.processes import PROCESSES

    proc = "iid_chain" if rule in ("token", "block") else "iid_siblings"
    inst = Instance(
        vocab=3,
        shape=(-1, 0, 1) if proc == "iid_chain" else (-1, 0, 0, 1),
        overlap=Fraction(1, 3),
        target_styles=("random", "sparse"),
        draft_styles=("peaked", "random"),
        prefix=(2,),
    )
    rng = np.random.default_rng(seed)
    prop = PROCESSES[proc].propose(Sampler(rng), inst.tree, inst.prefix, inst.draft)
    step = step_inputs(PROCESSES[proc], inst, prop)
    exact = step_emitted_law(RULES[rule], step)
    counts: dict = {}
    for _ in range(n):
        tape = random_tape(rng, {name: step.tree.n + 1 for name in ("accept", "eta", "coin", "y", "final")})
        out = RULES[rule].bound(reader_cls(tape), step).emitted(step)
        counts[out] = counts.get(out, 0) + 1
    return counts, exact


@pytest.mark.parametrize("rule", ["token", "block", "mss", "traversal", "target_only", "strict"])
def test_tape_frequencies_match_the_enumerated_law(rule):
    """Seed 20261130, alpha = 1e-6 per rule: a Pearson test of 20,000 tape runs of the rule on
    one fixed step against the exact law from the enumerator."""
    counts, exact = _tape_counts(rule, TapeReader, 20_000, 20261130)
    assert set(counts) <= set(exact), "a tape run emitted a sequence of probability 0"
    assert _pearson_p(counts, exact, 20_000) > 1e-6


@pytest.mark.parametrize("rule", ["token", "mss"])
def test_the_frequency_check_rejects_a_wrong_tape_semantics(rule):
    """The same check (seed 20261130, alpha 1e-6) on a tape interpreter with flipped coins."""
    counts, exact = _tape_counts(rule, _FlippedCoins, 20_000, 20261130)
    assert (not set(counts) <= set(exact)) or _pearson_p(counts, exact, 20_000) < 1e-6


@given(
    sps.steps(kind="random"),
    st.sampled_from(["token", "mss", "rrs", "strict", "traversal", "target_only"]),
    st.integers(0, 2**32 - 1),
)
def test_every_sampled_outcome_has_positive_enumerated_probability(step, rule, seed):
    r = RULES[rule]
    if not r.applies_to(step.tree.is_chain):
        return
    law = enumerate_law(r.bound, step)
    assert sum(law.values()) == 1
    out = r.bound(Sampler(np.random.default_rng(seed)), step)
    assert law.get(out, 0) > 0
