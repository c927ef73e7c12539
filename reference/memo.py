"""A memo of bounded size: the most recently used results of a function of a context.

The reference models memoize the law after each context (a transformer's forward is the cost).
A long audit asks for a new context at every position of every sample, so a memo that kept them
all would grow with the number of samples; this one keeps the :data:`LIMIT` most recently used
entries and forgets the oldest, which changes no result (a forgotten entry is computed again, the
same way) and bounds the memory (tests/test_memo.py).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: entries kept: a sample's contexts many times over (64 positions, a draft tree at each)
LIMIT = 8192


class Memo(Generic[K, V]):
    """The most recently used results, kept while their total weight is within ``limit`` (each
    entry weighs ``weigh(value)``: 1 by default, so ``limit`` counts entries; the newest entry is
    kept even if it alone is over). ``get(key, compute)``: the value remembered for ``key``, or
    ``compute()`` remembered; ``peek``/``put`` for a caller that computes elsewhere."""

    def __init__(self, limit: int = LIMIT, weigh: Callable[[V], int] | None = None) -> None:
        if limit < 1:
            from specproof.reference.errors import UsageError

            raise UsageError(f"limit: must be >= 1, got {limit!r}")
        self.limit, self.weight = limit, 0
        self._weigh = weigh
        self._kept: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, compute: Callable[[], V]) -> V:
        value = self.peek(key)
        if value is None:
            value = compute()
            self.put(key, value)
        return value

    def peek(self, key: K) -> V | None:
        """The value remembered for ``key`` (now the most recently used), or None."""
        value = self._kept.get(key)
        if value is not None:
            self._kept.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Remember ``value`` for ``key`` (a key already kept keeps its value), then forget the
        least recently used entries while the total weight is over the limit."""
        if key in self._kept:
            return
        self._kept[key] = value
        self.weight += self._weigh(value) if self._weigh else 1
        while self.weight > self.limit and len(self._kept) > 1:
            _, old = self._kept.popitem(last=False)
            self.weight -= self._weigh(old) if self._weigh else 1

    def update(self, values: dict[K, V]) -> None:
        for key, value in values.items():
            self.put(key, value)

    def items(self) -> list[tuple[K, V]]:
        return list(self._kept.items())

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: object) -> bool:
        return key in self._kept
