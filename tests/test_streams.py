"""The audit's per-sample random numbers (properties/tokens/streams.py) are numpy's, to the bit:
``SeedSequence(key).generate_state(n, uint64)`` and ``default_rng(key).random(n)`` on keys drawn
from seed 5 (short and long keys, words of 32 and 64 bits, zeros, the audit's own key shapes), and
the three places that draw them give what they gave with numpy. Exact comparisons: no alpha."""

from __future__ import annotations

import numpy as np
import pytest

from specproof.properties.engine.runner import sample_seed
from specproof.properties.engine.token_stage import FORCING_SHARE, ForcingCheck
from specproof.properties.tokens import streams
from specproof.properties.tokens.transform import seeded_uniforms
from specproof.reference.errors import SpecproofInputError


def _keys(n: int) -> list[list[int]]:
    rng = np.random.default_rng(5)
    keys: list[list[int]] = [[], [0], [0, 0, 0, 0, 0], [2**64 - 1], [2**128 + 3, 7]]
    for i in range(n):
        length = int(rng.integers(1, 9))
        top = [2**8, 2**32, 2**63][i % 3]
        keys.append([int(v) for v in rng.integers(0, top, size=length, dtype=np.uint64)])
    return keys


def test_the_seed_states_are_numpys():
    for key in _keys(1500):
        for n in (1, 4):
            want = np.random.SeedSequence(key).generate_state(n, np.uint64)
            assert np.array_equal(streams.seed_state(key, n), want), (key, n)


def test_the_uniforms_are_numpys():
    for key in _keys(1500):
        n = len(key) * 7 % 70
        assert np.array_equal(streams.uniforms(key, n), np.random.default_rng(key).random(n)), key


def test_the_audits_draws_are_what_numpy_gave():
    """sample_seed, the token test's auxiliary uniforms and the forcing check's position, against
    the numpy calls they replace."""
    for seed in (0, 3, 2**40 + 1, -7):
        for case in range(3):
            for j in (0, 1, 63, 10**6 + 5):
                ss = np.random.SeedSequence([abs(seed), case, j])
                assert sample_seed(seed, case, j) == int(ss.generate_state(1, dtype=np.uint64)[0] >> 2)
                ss = np.random.SeedSequence([abs(seed), case, j, 0x70A1])
                want = np.random.default_rng(ss).random(33)
                assert np.array_equal(seeded_uniforms(seed, case, j, 33), want)
    checked = 0
    for j in range(400):
        rng = np.random.default_rng([3, 1, j, 0x7EAC])
        want = None if rng.random() >= FORCING_SHARE else int(rng.integers(50))
        assert ForcingCheck.position(3, (1, j), 50) == want
        checked += want is not None
    assert 25 < checked < 75  # about an eighth of 400 checked: both branches ran


def test_a_negative_key_is_refused():
    with pytest.raises(SpecproofInputError, match="^key:"):
        streams.words([1, -2])


def test_a_module_is_compiled_once_whatever_threads_ask_at_once(tmp_path, monkeypatch):
    """jit.compiled under eight threads' first calls at once: one namespace, the helper rebound
    once (a dispatcher of the plain function, not of a dispatcher), the results right."""
    import importlib
    import sys
    import threading

    from specproof.properties.tokens import jit

    (tmp_path / "jit_probe_module.py").write_text(
        "def g(x):\n    return x + 1\n\n\ndef f(x):\n    return g(x) * 2\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("jit_probe_module")
    plain_g = mod.g
    got: list[object] = []
    barrier = threading.Barrier(8)

    def ask() -> None:
        barrier.wait()
        got.append(jit.compiled("jit_probe_module", ("f",), ("g",)))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(got) == 8 and all(ns is got[0] for ns in got)
        assert mod.g.py_func is plain_g  # rebound once
        assert got[0].f(3) == 8
    finally:
        jit._DONE.pop("jit_probe_module", None)
        sys.modules.pop("jit_probe_module", None)
