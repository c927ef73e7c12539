"""Toy language models for tests: seeded, context-dependent, exact when asked.

A :class:`ToyLM`'s next-token law depends on the whole context (a hash of every token, not only
the last one), so a draft tree's branches see genuinely different laws. Each context draws a
*style* from the model's ``styles`` (the edge cases a verifier must survive), then integer
weights for that style:

=========  ==================================================================
random     weights 1..9
sparse     weights 0..3 (at least one positive): zeros where the other law has mass
peaked     one token 40, the others 0..2
onehot     one token only
uniform    all equal (ties everywhere)
tiny       one token 1, the others 10**6 (a tiny mass)
ties       weights 1 or 2
=========  ==================================================================

In exact mode laws are tuples of ``Fraction``; otherwise float64. :class:`MixLM` mixes two
models, ``overlap * p + (1 - overlap) * r``: ``overlap = 1`` gives ``q == p`` and
``overlap = 0`` an unrelated draft (disjoint supports when both are one-hot or sparse).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

import numpy as np

from specproof.reference.errors import UsageError

from .laws import Law, Num, argmax
from .memo import Memo

STYLES = ("random", "sparse", "peaked", "onehot", "uniform", "tiny", "ties")


class LM(Protocol):
    @property
    def vocab(self) -> int: ...  # read-only: a field or a property (MixLM's) both satisfy it

    def law(self, context: tuple[int, ...]) -> Law: ...


def _rng(seed: int, context: tuple[int, ...]) -> np.random.Generator:
    digest = hashlib.blake2b(repr((seed, context)).encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


def _weights(style: str, vocab: int, rng: np.random.Generator) -> list[int]:
    if style == "random":
        return [int(v) for v in rng.integers(1, 10, vocab)]
    if style == "sparse":
        w = [int(v) for v in rng.integers(0, 4, vocab)]
        if sum(w) == 0:
            w[int(rng.integers(vocab))] = 1
        return w
    if style == "peaked":
        w = [int(v) for v in rng.integers(0, 3, vocab)]
        w[int(rng.integers(vocab))] = 40
        return w
    if style == "onehot":
        w = [0] * vocab
        w[int(rng.integers(vocab))] = 1
        return w
    if style == "uniform":
        return [1] * vocab
    if style == "tiny":
        w = [10**6] * vocab
        w[int(rng.integers(vocab))] = 1
        return w
    if style == "ties":
        return [int(v) for v in rng.integers(1, 3, vocab)]
    raise UsageError(f"styles: unknown style {style!r}; known: {', '.join(STYLES)}")


@dataclass
class ToyLM:
    """A seeded model whose law at a context is a hash of (seed, context)."""

    vocab: int
    seed: int
    styles: Sequence[str] = ("random",)
    exact: bool = True
    #: the laws of the most recently used contexts (:mod:`.memo`: a long audit asks for a new
    #: context at every position, so a dict of them all would grow with every sample)
    _cache: Memo[tuple[int, ...], Law] = field(default_factory=Memo, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.vocab < 1:
            raise UsageError(f"vocab: must be >= 1, got {self.vocab}")
        if not self.styles:
            raise UsageError("styles: at least one style")
        for s in self.styles:
            if s not in STYLES:
                raise UsageError(f"styles: unknown style {s!r}; known: {', '.join(STYLES)}")
        self.styles = tuple(self.styles)

    def law(self, context: tuple[int, ...]) -> Law:
        context = tuple(context)
        return self._cache.get(context, lambda: self._law(context))

    def _law(self, context: tuple[int, ...]) -> Law:
        rng = _rng(self.seed, context)
        style = self.styles[int(rng.integers(len(self.styles)))]
        w = _weights(style, self.vocab, rng)
        total = sum(w)
        law = tuple(Fraction(v, total) for v in w)
        return law if self.exact else tuple(float(v) for v in law)


@dataclass
class MixLM:
    """``overlap * base + (1 - overlap) * other``: a draft with controlled overlap."""

    base: LM
    other: LM
    overlap: Fraction | float

    def __post_init__(self) -> None:
        if self.base.vocab != self.other.vocab:
            raise UsageError("other: vocabulary differs from base's")
        if not 0 <= self.overlap <= 1:
            raise UsageError(f"overlap: must be in [0, 1], got {self.overlap!r}")

    @property
    def vocab(self) -> int:
        return self.base.vocab

    def law(self, context: tuple[int, ...]) -> Law:
        a, b, t = self.base.law(context), self.other.law(context), self.overlap
        if isinstance(a[0], float):
            t = float(t)
        return tuple(t * x + (1 - t) * y for x, y in zip(a, b))


def sequence_law(lm: LM, prefix: tuple[int, ...], m: int) -> dict[tuple[int, ...], Num]:
    """The exact law of the next ``m`` tokens sampled from ``lm`` after ``prefix``."""
    law: dict[tuple[int, ...], Num] = {(): 1}
    for _ in range(m):
        nxt: dict[tuple[int, ...], Num] = {}
        for seq, w in law.items():
            for x, px in enumerate(lm.law(prefix + seq)):
                if px > 0:
                    nxt[seq + (x,)] = w * px
        law = nxt
    return law


def greedy_sequence(lm: LM, prefix: tuple[int, ...], m: int) -> tuple[int, ...]:
    """The next ``m`` tokens of greedy decoding (argmax, ties to the smallest id)."""
    seq: tuple[int, ...] = ()
    for _ in range(m):
        seq += (argmax(lm.law(prefix + seq)),)
    return seq
