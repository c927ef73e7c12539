"""Randomness as choices: one probabilistic program, three interpreters.

Every rule and proposal process in :mod:`specproof.reference` draws its randomness only through
two calls on a ``Choices`` object::

    ch.bernoulli(p, site)        -> bool   True with probability p
    ch.categorical(w, site)      -> int    index i with probability w[i] / sum(w)

``site`` is a pair ``(name, index)`` that names the draw, e.g. ``("accept", 3)`` for the
acceptance coin of tree node 3. A program never makes two draws at the same site. The three
interpreters:

* :class:`Sampler` — draws a fresh uniform from a ``numpy.random.Generator`` for every site
  and records it, so a run can be replayed (``sampler.tape``).
* :class:`TapeReader` — reads the uniform of each site from a given tape. This is the coupling
  with the optimized kernels: fed the same uniforms, they must return the same tokens.
* :func:`enumerate_law` — explores every outcome of every draw with nonzero probability and
  returns the exact law of the program's output. With ``fractions.Fraction`` inputs the law is
  exact rational arithmetic; with floats it is float64.

How a uniform ``u`` in ``[0, 1)`` becomes an outcome (the documented tape semantics that the
optimized kernels mirror):

* ``bernoulli(p)`` is ``u < p``; so ``p = 1`` is always True and ``p = 0`` always False.
* ``categorical(w)`` is the inverse CDF in index order: the smallest ``i`` with
  ``u * sum(w) < w[0] + ... + w[i]``; an index of weight 0 is never returned.

The enumerator works by re-execution: it runs the program with a prescribed list of outcomes
and, at the first draw past that list, forks on each outcome. Programs must therefore be
deterministic functions of their draws (they are: nothing else in the reference is random).
See proofs_notes/choices.md; checked by tests/test_choices.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Protocol, TypeVar

import numpy as np

from specproof.reference.errors import ArgumentTypeError, SpecproofError, UsageError

Site = tuple[str, int]
Num = Any  # int, float or Fraction: the reference is generic over the number type
T = TypeVar("T")

#: The names of every site used by the reference rules and processes, with their meaning.
SITE_NAMES: dict[str, str] = {
    "draft": "a proposal process drawing the token of draft node `index`",
    "accept": "the acceptance coin of draft node `index` (token, MSS, RRS, traversal rules)",
    "eta": "block verification's independent coin eta_i for chain position `index`",
    "coin": "the target-only rule's one coin at node `index` (chooses among its children)",
    "y": "the strict rule's target sample at node `index`",
    "final": "the corrected or bonus token emitted at the end of the step (index 0)",
    "complete": "a target sample completing the step to the horizon (index = offset)",
}


class Choices(Protocol):
    """The interface through which a reference program draws randomness."""

    def bernoulli(self, p: Num, site: Site) -> bool: ...

    def categorical(self, weights: Sequence[Num], site: Site) -> int: ...


def _check_probability(p: Num, site: Site) -> None:
    if not 0 <= p <= 1:
        raise UsageError(f"bernoulli at site {site}: probability {p!r} is not in [0, 1]")


def _check_weights(weights: Sequence[Num], site: Site) -> Num:
    if len(weights) == 0:
        raise UsageError(f"categorical at site {site}: no weights")
    if any(w < 0 for w in weights):
        raise UsageError(f"categorical at site {site}: a negative weight")
    total = sum(weights)
    if not total > 0:
        raise UsageError(f"categorical at site {site}: weights sum to {total!r}, not > 0")
    return total


def bernoulli_from_uniform(u: float, p: Num) -> bool:
    """The tape semantics of ``bernoulli``: ``u < p`` (exact comparison for Fraction ``p``)."""
    return bool(u < p)


def categorical_from_uniform(u: float, weights: Sequence[Num]) -> int:
    """The tape semantics of ``categorical``: inverse CDF in index order.

    Returns the smallest ``i`` with ``u * total < cumsum[i]`` and ``weights[i] > 0``. If float
    rounding lets ``u * total`` reach the last partial sum, the last positive index is returned.
    """
    total = sum(weights)
    x = Fraction(u) * total if isinstance(total, (Fraction, int)) else u * total
    acc: Num = 0
    last = -1
    for i, w in enumerate(weights):
        if w > 0:
            acc = acc + w
            last = i
            if x < acc:
                return i
    return last


class _UniformChoices:
    """A choice interpreter that turns one uniform per site into an outcome (tape semantics)."""

    def _uniform(self, site: Site) -> float:
        raise NotImplementedError

    def bernoulli(self, p: Num, site: Site) -> bool:
        _check_probability(p, site)
        return bernoulli_from_uniform(self._uniform(site), p)

    def categorical(self, weights: Sequence[Num], site: Site) -> int:
        _check_weights(weights, site)
        return categorical_from_uniform(self._uniform(site), weights)


class Sampler(_UniformChoices):
    """Runs a program with fresh uniforms from ``rng`` and records them in ``tape``."""

    def __init__(self, rng: np.random.Generator) -> None:
        if not isinstance(rng, np.random.Generator):
            raise ArgumentTypeError(f"rng: expected numpy.random.Generator, got {type(rng).__name__}")
        self._rng = rng
        self.tape: dict[str, dict[int, float]] = {}

    def _uniform(self, site: Site) -> float:
        name, index = site
        slot = self.tape.setdefault(name, {})
        if index in slot:
            raise UsageError(f"site {site} drawn twice in one run")
        u = float(self._rng.random())
        slot[index] = u
        return u


class TapeExhaustedError(SpecproofError, LookupError):
    """A program asked for a site that the tape does not hold."""


class TapeReader(_UniformChoices):
    """Runs a program on given uniforms: ``tape[name][index]`` is the uniform of that site.

    ``tape`` maps a site name to a sequence (indexed by the site index) or to a mapping
    ``index -> uniform`` such as :attr:`Sampler.tape`.
    """

    def __init__(self, tape: Mapping[str, Sequence[float] | Mapping[int, float]]) -> None:
        self._tape = tape
        self.used: list[Site] = []

    def _uniform(self, site: Site) -> float:
        name, index = site
        try:
            u = float(self._tape[name][index])
        except (KeyError, IndexError):
            raise TapeExhaustedError(f"tape has no uniform for site {site}") from None
        if not 0.0 <= u < 1.0:
            raise UsageError(f"tape[{name!r}][{index}] = {u!r} is not in [0, 1)")
        if site in self.used:
            raise UsageError(f"site {site} drawn twice in one run")
        self.used.append(site)
        return u


def random_tape(rng: np.random.Generator, sizes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """A full tape: ``sizes[name]`` float64 uniforms in ``[0, 1)`` for each site name."""
    return {name: rng.random(n) for name, n in sizes.items()}


def _ratio(w: Num, total: Num) -> Num:
    """``w / total``, exact when both are integers or Fractions."""
    if isinstance(w, (int, Fraction)) and isinstance(total, (int, Fraction)):
        return Fraction(w) / total
    return w / total


class _Fork(SpecproofError):
    """Control flow of the enumerator (never escapes :func:`enumerate_law`): a draw with several
    outcomes beyond the replayed prefix."""

    def __init__(self, outcomes: list[tuple[Any, Num]]) -> None:
        self.outcomes = outcomes


class _Replay:
    """Replays a prescribed list of outcomes; forks at the first draw beyond it."""

    def __init__(self, prefix: tuple[Any, ...]) -> None:
        self._prefix = prefix
        self._pos = 0

    def _next(self, outcomes: Callable[[], list[tuple[Any, Num]]]) -> Any:
        if self._pos < len(self._prefix):
            value = self._prefix[self._pos]
            self._pos += 1
            return value
        raise _Fork(outcomes())

    def bernoulli(self, p: Num, site: Site) -> bool:
        _check_probability(p, site)
        return bool(self._next(lambda: [(v, w) for v, w in ((True, p), (False, 1 - p)) if w > 0]))

    def categorical(self, weights: Sequence[Num], site: Site) -> int:
        total = _check_weights(weights, site)
        return int(self._next(lambda: [(i, _ratio(w, total)) for i, w in enumerate(weights) if w > 0]))


def enumerate_law(program: Callable[..., T], *args: Any, **kwargs: Any) -> dict[T, Num]:
    """The exact law of ``program(ch, *args, **kwargs)`` over every outcome of its draws.

    Returns ``{output: probability}`` for each output of nonzero probability. Outputs must be
    hashable. The probabilities are Fractions when every draw's probability is rational.
    """
    law: dict[T, Num] = {}
    stack: list[tuple[tuple[Any, ...], Num]] = [((), 1)]
    while stack:
        prefix, weight = stack.pop()
        try:
            out = program(_Replay(prefix), *args, **kwargs)
        except _Fork as fork:
            for value, prob in reversed(fork.outcomes):
                stack.append((prefix + (value,), weight * prob))
            continue
        law[out] = law.get(out, 0) + weight
    return law
