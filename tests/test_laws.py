"""Malformed laws and step inputs raise specific, documented exceptions naming the argument."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given

from specproof.properties.oracle import strategies as sps
from specproof.reference import errors as E
from specproof.reference.laws import DEFAULT_TOL, acceptance, as_law, residual
from specproof.reference.step import make_step

F = Fraction


@pytest.mark.parametrize(
    "values, exc, where",
    [
        ([0.5, float("nan"), 0.5], E.NonFiniteError, "p[1]"),
        ([0.5, float("inf"), 0.5], E.NonFiniteError, "p[1]"),
        ([1.5, -0.5], E.NegativeMassError, "p[1]"),
        ([0.5, 0.4], E.NotNormalizedError, "p"),
        ([F(1, 2), F(1, 3)], E.NotNormalizedError, "p"),
        ([], E.ShapeError, "p"),
        ("ab", E.ShapeError, "p"),
        ([True, False], E.DTypeError, "p[0]"),
        ([0.5, "0.5"], E.DTypeError, "p[1]"),
        ([0.5, 0.5j], E.DTypeError, "p[1]"),
    ],
)
def test_malformed_laws_raise_specific_errors(values, exc, where):
    with pytest.raises(exc) as info:
        as_law(values, "p")
    assert info.value.argument == where
    assert str(info.value).startswith(where + ":")
    assert isinstance(info.value, E.SpecproofInputError) and isinstance(info.value, ValueError)


def test_wrong_length_is_a_shape_error():
    with pytest.raises(E.ShapeError, match="length 2, expected the vocabulary size 3"):
        as_law([0.5, 0.5], "q", vocab=3)


def test_float_tolerance_is_stated_and_applied():
    assert DEFAULT_TOL == 1e-6
    as_law([0.5, 0.5 + 0.9e-6], "p")
    with pytest.raises(E.NotNormalizedError, match="tolerance 1e-06"):
        as_law([0.5, 0.5 + 1.1e-6], "p")
    as_law([0.5, 0.5 + 1e-4], "p", tol=1e-3)


def test_exact_laws_must_sum_to_exactly_one():
    assert as_law([F(1, 3), F(2, 3)], "p") == (F(1, 3), F(2, 3))
    assert as_law([0, 1], "p") == (F(0), F(1))  # integers are exact
    assert as_law(np.array([0.25, 0.75], dtype=np.float32), "p") == (0.25, 0.75)


def test_residual_with_zero_mass_does_not_produce_nan():
    p = (0.5, 0.5)
    assert residual(p, p) == p
    assert residual((F(1, 2), F(1, 2)), (F(1, 4), F(3, 4))) == (F(1), F(0))


@given(sps.law_pairs(4, exact=False))
def test_residual_is_a_law_and_never_nan(pq):
    p, q = pq
    r = residual(p, q)
    assert all(math.isfinite(v) and v >= 0 for v in r)
    assert abs(sum(r) - 1) < 1e-12


def test_acceptance_edge_cases():
    assert acceptance(F(1, 2), F(1, 4)) == 1
    assert acceptance(F(1, 4), F(1, 2)) == F(1, 2)
    assert acceptance(F(0), F(0)) == 0
    assert acceptance(F(1, 3), F(0)) == 1


CHAIN = [-1, 0, 1]
P = [[0.5, 0.5]] * 3


@pytest.mark.parametrize(
    "kwargs, exc, where",
    [
        (dict(tokens=[0, 2, 1]), E.TokenOutOfRangeError, "tokens[1]"),
        (dict(tokens=[0, -1, 1]), E.TokenOutOfRangeError, "tokens[1]"),
        (dict(tokens=[0, 1]), E.ShapeError, "tokens"),
        (dict(tokens=[0, 1.0, 1]), E.DTypeError, "tokens[1]"),
        (dict(target_probs=[[0.5, 0.5]] * 2), E.ShapeError, "target_probs"),
        (dict(target_probs=[[0.5, 0.5], [0.5, 0.5, 0.0], [0.5, 0.5]]), E.ShapeError, "target_probs[1]"),
        (
            dict(target_probs=[[0.5, 0.5], [float("nan"), 1.0], [0.5, 0.5]]),
            E.NonFiniteError,
            "target_probs[1][0]",
        ),
        (
            dict(draft_probs=[[1.0, 0.0], [0.5, 0.5], [0.5, 0.5]]),
            E.ZeroDraftProbabilityError,
            "draft_probs[0][1]",
        ),
        (dict(draft_probs=[[0.5, 0.5]] * 2), E.ShapeError, "draft_probs"),
        (dict(draft_probs=[[0.5, 0.5], [0.7, 0.7], None]), E.NotNormalizedError, "draft_probs[1]"),
        (dict(parents=[-1, 0, 0, 1]), E.ShapeError, "target_probs"),
        (dict(parents=[-1, 2, 1]), E.CycleError, "parents[1]"),
    ],
)
def test_malformed_step_inputs_raise_specific_errors(kwargs, exc, where):
    args = dict(parents=CHAIN, tokens=[0, 1, 1], draft_probs=[[0.5, 0.5]] * 3, target_probs=P)
    args.update(kwargs)
    with pytest.raises(exc) as info:
        make_step(**args)
    assert info.value.argument == where


def test_numpy_inputs_are_accepted():
    s = make_step(np.array([-1, 0, 1]), np.array([0, 1, 1]), np.full((3, 2), 0.5), np.full((3, 2), 0.5))
    assert s.tokens == (0, 1, 1) and s.vocab == 2
