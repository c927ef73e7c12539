"""The bounded memo of the reference models (reference/memo.py): it keeps the most recently used
entries, forgets the oldest beyond its limit, and forgetting changes no result; a transformer's
memoized row holds only itself, not the whole forward it came from."""

from __future__ import annotations

import pytest

from specproof.reference.errors import UsageError
from specproof.reference.memo import Memo
from specproof.reference.transformer import TransformerLM


def test_the_memo_keeps_the_most_recently_used_and_forgets_the_oldest():
    calls: list[int] = []

    def f(k: int) -> int:
        calls.append(k)
        return k * k

    m: Memo[int, int] = Memo(limit=3)
    assert [m.get(k, lambda k=k: f(k)) for k in (1, 2, 3)] == [1, 4, 9]
    assert m.get(1, lambda: f(1)) == 1 and calls == [1, 2, 3]  # a hit: not computed again
    m.get(4, lambda: f(4))  # over the limit: 2, the least recently used, is forgotten
    assert len(m) == 3 and 2 not in m and 1 in m
    assert m.get(2, lambda: f(2)) == 4 and calls == [1, 2, 3, 4, 2]  # computed again, the same


def test_a_memo_needs_room_for_one_entry():
    with pytest.raises(UsageError, match="limit"):
        Memo(limit=0)


def test_a_transformers_laws_stay_bounded_and_equal_after_being_forgotten():
    from specproof.properties.engine.loops import engine_target

    lm = TransformerLM(engine_target())
    lm._laws, lm._logits = Memo(limit=16), Memo(limit=16)
    contexts = [(1, 2, k % 8, k // 8) for k in range(40)]
    first = [lm.law(c) for c in contexts]
    assert len(lm._laws) == len(lm._logits) == 16
    assert [lm.law(c) for c in contexts] == first  # the forgotten ones computed again: the same


def test_a_memoized_row_holds_only_itself():
    from specproof.properties.engine.loops import engine_target

    lm = TransformerLM(engine_target())
    row = lm._row(tuple(range(1, 8)))
    assert row.untyped_storage().nbytes() == row.numel() * row.element_size()


def test_a_memo_weighed_in_bytes_keeps_what_fits_and_the_newest_even_if_alone_over():
    """The engine runner's law memo (``LawMemo``) is this memo weighed by each row's bytes."""
    import numpy as np

    from specproof.properties.engine.runner import LawMemo

    m = LawMemo(budget=3 * 80)  # three rows of ten float64
    for k in range(5):
        m.put((k,), np.zeros(10))
    assert [k for k, _ in m.items()] == [(2,), (3,), (4,)] and m.weight == 240
    assert m.peek((2,)) is not None and m.peek((0,)) is None
    m.put((9,), np.zeros(100))  # over the budget alone: kept, everything older let go
    assert [k for k, _ in m.items()] == [(9,)] and m.weight == 800


def test_a_toy_models_laws_stay_bounded_and_equal_after_being_forgotten():
    """ToyLM (the exact oracle's and the toy engines' model) keeps the laws of the most recently
    used contexts only; a forgotten law comes back equal (it is a function of seed and context)."""
    from specproof.reference.models import ToyLM

    lm = ToyLM(vocab=5, seed=3)
    contexts = [(i % 5, i // 5) for i in range(12)]
    first = [lm.law(c) for c in contexts]
    lm._cache = Memo(limit=4)
    again = [lm.law(c) for c in contexts]
    assert len(lm._cache) == 4
    assert again == first == [ToyLM(vocab=5, seed=3).law(c) for c in contexts]
