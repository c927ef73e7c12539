"""Next-token laws: validation and the few operations every rule is written with.

A law over a vocabulary of size V is a tuple of V numbers, all ``Fraction`` (exact mode) or all
``float`` (float64 mode). Notation follows the papers: p is the target law, q the draft law,
``(x)+ = max(x, 0)``, ``norm(w) = w / sum(w)``.

Validation (:func:`as_law`) is strict and specific: a NaN, a negative entry, a wrong length or a
mass off 1 by more than the tolerance raises an exception that names the argument. Exact laws
must sum to exactly 1. See proofs_notes/laws.md; checked by tests/test_laws.py.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from specproof.reference.errors import UsageError

from .errors import (
    DTypeError,
    NegativeMassError,
    NonFiniteError,
    NotNormalizedError,
    ShapeError,
)

Num = Any
Law = tuple[Num, ...]

#: Default tolerance on the total mass of a float law.
DEFAULT_TOL = 1e-6


def _as_number(x: object, where: str) -> Num:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        if hasattr(x, "item") and callable(x.item):  # numpy / torch scalars
            return _as_number(x.item(), where)
        raise DTypeError(where, f"expected a real number, got {type(x).__name__} {x!r}")
    if isinstance(x, Fraction):
        return x
    if isinstance(x, numbers.Integral):
        return Fraction(int(x))
    return float(x)


def as_law(values: object, argument: str, vocab: int | None = None, tol: float = DEFAULT_TOL) -> Law:
    """Validate ``values`` as a probability law and return it as a tuple.

    Integers and Fractions give an exact law (which must sum to exactly 1); any float entry
    makes the whole law float64 (which must sum to 1 within ``tol``). Raises ShapeError,
    DTypeError, NonFiniteError, NegativeMassError or NotNormalizedError naming ``argument``.
    """
    if hasattr(values, "tolist") and callable(values.tolist):  # numpy arrays, torch tensors
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ShapeError(argument, f"expected a sequence of probabilities, got {type(values).__name__}")
    if vocab is not None and len(values) != vocab:
        raise ShapeError(argument, f"has length {len(values)}, expected the vocabulary size {vocab}")
    if len(values) == 0:
        raise ShapeError(argument, "is empty")
    nums = [_as_number(v, f"{argument}[{i}]") for i, v in enumerate(values)]
    exact = all(isinstance(v, Fraction) for v in nums)
    if not exact:
        nums = [float(v) for v in nums]
        for i, v in enumerate(nums):
            if not math.isfinite(v):
                raise NonFiniteError(f"{argument}[{i}]", f"is {v}, not a finite probability")
    for i, v in enumerate(nums):
        if v < 0:
            raise NegativeMassError(f"{argument}[{i}]", f"is negative ({v})")
    total = sum(nums)
    if exact:
        if total != 1:
            raise NotNormalizedError(argument, f"sums to {total}, not exactly 1 (exact law)")
    elif abs(total - 1.0) > tol:
        raise NotNormalizedError(argument, f"sums to {total!r}, not 1 (tolerance {tol:g})")
    return tuple(nums)


def positive_part(w: Sequence[Num]) -> Law:
    """``(w)+``, elementwise."""
    return tuple(x if x > 0 else x * 0 for x in w)


def normalize(w: Sequence[Num]) -> Law:
    """``norm(w) = w / sum(w)``; the caller guarantees ``sum(w) > 0``."""
    total = sum(w)
    if not total > 0:
        raise ZeroDivisionError("normalize: total mass is 0")
    return tuple(x / total for x in w)


def residual(p: Sequence[Num], q: Sequence[Num]) -> Law:
    """The rejection residual ``norm((p - q)+)``.

    When ``p == q`` (residual mass 0) rejection has probability 0 and the residual is never
    sampled; for float laws where rounding leaves all of ``(p - q)+`` at 0 but a rejection was
    still drawn, ``p`` itself is returned rather than NaN (documented fallback, see
    proofs_notes/token.md).
    """
    w = positive_part([a - b for a, b in zip(p, q)])
    return normalize(w) if sum(w) > 0 else tuple(p)


def onehot(x: int, vocab: int, like: Num = Fraction(1)) -> Law:
    """The one-hot law at token ``x`` (the draft law of a deterministic draft)."""
    zero = like * 0
    one = zero + 1
    return tuple(one if i == x else zero for i in range(vocab))


def argmax(p: Sequence[Num]) -> int:
    """The most likely token; ties go to the smallest id."""
    best = 0
    for i, v in enumerate(p):
        if v > p[best]:
            best = i
    return best


def acceptance(px: Num, qx: Num) -> Num:
    """``min(1, p(x) / q(x))``, with ``q(x) = 0`` read as 1 if ``p(x) > 0`` else 0."""
    if qx == 0:
        return px / px if px > 0 else px * 0
    r = px / qx
    return r if r < 1 else r / r


def without(p: Sequence[Num], tokens: Sequence[int]) -> Law:
    """``p`` with the given tokens' mass set to 0 (not renormalized)."""
    drop = set(tokens)
    return tuple(v * 0 if i in drop else v for i, v in enumerate(p))


def tv_distance(a: dict[Any, Num], b: dict[Any, Num]) -> Num:
    """Total variation distance ``1/2 sum |a - b|`` between two sparse laws."""
    keys = set(a) | set(b)
    return sum(abs(a.get(k, 0) - b.get(k, 0)) for k in keys) / 2


def top_k(p: Sequence[Num], k: int) -> Law:
    """Keep the ``k`` most likely tokens (ties to the smaller id), renormalize."""
    if k < 1:
        raise UsageError(f"k: must be >= 1, got {k}")
    order = sorted(range(len(p)), key=lambda i: (-p[i], i))
    keep = set(order[:k])
    return normalize([v if i in keep else v * 0 for i, v in enumerate(p)])


def top_p(p: Sequence[Num], top: Num) -> Law:
    """Keep the smallest most-likely set of mass >= ``top`` (ties to the smaller id)."""
    if not 0 < top <= 1:
        raise UsageError(f"top_p: must be in (0, 1], got {top!r}")
    order = sorted(range(len(p)), key=lambda i: (-p[i], i))
    keep, acc = set(), p[0] * 0
    for i in order:
        keep.add(i)
        acc += p[i]
        if acc >= top:
            break
    return normalize([v if i in keep else v * 0 for i, v in enumerate(p)])
