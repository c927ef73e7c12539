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
    """``get(key, compute)``: the value remembered for ``key``, or ``compute()`` remembered."""

    def __init__(self, limit: int = LIMIT) -> None:
        if limit < 1:
            from specproof.reference.errors import UsageError

            raise UsageError(f"limit: must be >= 1, got {limit!r}")
        self.limit = limit
        self._kept: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, compute: Callable[[], V]) -> V:
        kept = self._kept
        if key in kept:
            kept.move_to_end(key)
            return kept[key]
        value = compute()
        kept[key] = value
        if len(kept) > self.limit:
            kept.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: object) -> bool:
        return key in self._kept
