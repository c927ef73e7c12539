"""The audit's random numbers a sample, drawn exactly as numpy draws them, at a fraction of the cost.

Every sample's seed, its auxiliary uniforms and the forcing check's draw are functions of a key of
integers (the audit's seed, the case, the sample's index, a tag) through numpy's ``SeedSequence``
and ``PCG64``: ``default_rng(key).random(n)``. Building those two objects costs 10 to 20 us each
call, more with the engine's data in the cache, and three a sample were a large share of the
audit's own work at V = 512. This module computes the same numbers, compiled, to the last bit:

* the key's 32-bit words (an integer's words low first, at least one; a negative one refused);
* ``SeedSequence``'s pool: each word hashed with a multiplier that moves at every use, the four
  pool words mixed pairwise, the words beyond the fourth mixed into each;
* its ``generate_state``: the pool's words in turn hashed with a second moving multiplier, two
  32-bit words (low first) to a 64-bit one;
* ``PCG64``'s seeding from four such words: the increment ``2 i + 1``, one step, the state added,
  one step; then each output a step of the 128-bit congruence followed by the high and low halves
  xor-ed and rotated by the top six bits (XSL-RR);
* ``Generator.random``'s double: the output's top 53 bits times 2^-53.

tests/test_streams.py checks every function against numpy itself on thousands of keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from specproof.properties.tokens.jit import compiled
from specproof.reference.errors import SpecproofInputError

_U = np.uint64
M32 = _U(0xFFFFFFFF)
INIT_A, MULT_A = _U(0x43B0D7E5), _U(0x931E8875)
INIT_B, MULT_B = _U(0x8B51F9DD), _U(0x58F38DED)
MIX_L, MIX_R = _U(0xCA01F9DD), _U(0x4973F715)
SHIFT = _U(16)
#: PCG64's multiplier, high and low 64 bits
MUL_HI, MUL_LO = _U(2549297995355413924), _U(4865540595714422341)


def words(key: Sequence[int]) -> np.ndarray:
    """``key``'s 32-bit words, as ``SeedSequence`` reads a list of non-negative integers."""
    out: list[int] = []
    for part in key:
        n = int(part)
        if n < 0:
            raise SpecproofInputError("key", f"must be non-negative integers, got {n}")
        out.append(n & 0xFFFFFFFF)
        n >>= 32
        while n:
            out.append(n & 0xFFFFFFFF)
            n >>= 32
    return np.asarray(out, dtype=np.uint64)


def pool(entropy: np.ndarray) -> np.ndarray:
    """``SeedSequence``'s four pool words from its entropy words."""
    h = INIT_A
    m = np.zeros(4, dtype=np.uint64)
    for i in range(4):
        v = entropy[i] if i < len(entropy) else _U(0)
        m[i], h = _hashmix(v, h)
    for src in range(4):
        for dst in range(4):
            if src != dst:
                hv, h = _hashmix(m[src], h)
                m[dst] = _mix(m[dst], hv)
    for src in range(4, len(entropy)):
        for dst in range(4):
            hv, h = _hashmix(entropy[src], h)
            m[dst] = _mix(m[dst], hv)
    return m


def _hashmix(v: Any, h: Any) -> tuple[Any, Any]:
    v = v ^ h
    h = (h * MULT_A) & M32
    v = (v * h) & M32
    return v ^ (v >> SHIFT), h


def _mix(x: Any, y: Any) -> Any:
    r = (MIX_L * x - MIX_R * y) & M32
    return r ^ (r >> SHIFT)


def state(p: np.ndarray, n: int) -> np.ndarray:
    """``SeedSequence.generate_state(n, uint64)`` from the pool ``p``."""
    h = INIT_B
    out = np.zeros(n, dtype=np.uint64)
    for i in range(2 * n):
        v = p[i % 4] ^ h
        h = (h * MULT_B) & M32
        v = (v * h) & M32
        v = v ^ (v >> SHIFT)
        out[i // 2] |= v << _U(32 * (i % 2))
    return out


def _mul(a: Any, b: Any) -> tuple[Any, Any]:
    """The 128-bit product of two 64-bit words: (high, low)."""
    a0, a1, b0, b1 = a & M32, a >> _U(32), b & M32, b >> _U(32)
    p00, p01, p10 = a0 * b0, a0 * b1, a1 * b0
    mid = (p00 >> _U(32)) + (p01 & M32) + (p10 & M32)
    return a1 * b1 + (p01 >> _U(32)) + (p10 >> _U(32)) + (mid >> _U(32)), (mid << _U(32)) | (p00 & M32)


def _step(hi: Any, lo: Any, inc_hi: Any, inc_lo: Any) -> tuple[Any, Any]:
    """PCG64's congruence: ``state * multiplier + increment`` modulo 2^128."""
    p_hi, p_lo = _mul(lo, MUL_LO)
    p_hi = p_hi + lo * MUL_HI + hi * MUL_LO
    new_lo = p_lo + inc_lo
    return p_hi + inc_hi + (_U(1) if new_lo < p_lo else _U(0)), new_lo


def doubles(entropy: np.ndarray, out: np.ndarray) -> None:
    """``default_rng(key).random(len(out))`` into ``out``, from the key's words ``entropy``."""
    s = state(pool(entropy), 4)
    inc_hi = (s[2] << _U(1)) | (s[3] >> _U(63))
    inc_lo = (s[3] << _U(1)) | _U(1)
    hi, lo = _step(_U(0), _U(0), inc_hi, inc_lo)
    lo2 = lo + s[1]
    hi, lo = hi + s[0] + (_U(1) if lo2 < lo else _U(0)), lo2
    hi, lo = _step(hi, lo, inc_hi, inc_lo)
    for i in range(len(out)):
        hi, lo = _step(hi, lo, inc_hi, inc_lo)
        x = hi ^ lo
        r = hi >> _U(58)
        x = (x >> r) | (x << ((_U(64) - r) & _U(63)))
        out[i] = np.float64(x >> _U(11)) * (1.0 / 9007199254740992.0)


def _kernels() -> Any:
    helpers = ("_hashmix", "_mix", "_mul", "_step", "pool", "state")
    return compiled(__name__, ("pool", "state", "doubles"), helpers)


def seed_state(key: Sequence[int], n: int = 1) -> np.ndarray:
    """``np.random.SeedSequence(key).generate_state(n, np.uint64)``."""
    K = _kernels()
    return K.state(K.pool(words(key)), n)


def uniforms(key: Sequence[int], n: int) -> np.ndarray:
    """``np.random.default_rng(key).random(n)``."""
    out = np.empty(n)
    _kernels().doubles(words(key), out)
    return out


def warm() -> None:
    """Compile (or load from the cache) the draws once: their first use's cost paid here."""
    seed_state([0])
    uniforms([0], 1)
