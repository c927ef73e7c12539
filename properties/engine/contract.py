"""The engine contract: what the engine audit calls, and how an engine is described to it.

A verifier that is exact in isolation still makes a lossy engine when the loop around it drafts
one way and tells the verifier another, feeds a drafter stale features, keeps a rejected
branch's KV, or applies temperature to one side only. The engine audit
(:mod:`.engine.audit`) therefore tests what a user actually runs, through two calls:

* ``generate(prompt_ids, max_new_tokens, seed) -> list[int]``: the new tokens (exactly
  ``max_new_tokens`` of them, ids in ``[0, V)``), a deterministic function of the seed;
* ``target_law(context) -> probs``: the engine's *target* as a next-token law, computed by the
  same weights without speculation, with the sampling settings the engine was built with
  (:class:`Sampling`; temperature 0 is greedy decoding, a one-hot law at the argmax).

Optional counters an engine may expose after each ``generate`` (reported, never required):
``last_steps`` (tokens emitted per target forward) or ``last_forwards`` (target forwards).

An :class:`EngineSpec` says how to build an engine for each :class:`Sampling` setting, which
prompts and settings to audit it under, and what verdict its authors claim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from specproof.reference.errors import BadParameterError, SpecproofInputError

Seq = tuple[int, ...]


# --------------------------------------------------------------------------- sampling settings


@dataclass(frozen=True)
class Sampling:
    """What the engine is asked to sample from: ``softmax(logits / temperature)``, then top-k
    (keep the k largest, ties at the k-th value kept), then top-p (keep the most likely tokens
    until their mass reaches p: a token is kept when the mass ranked strictly above it is below
    p), renormalized. ``temperature == 0`` is greedy decoding (one-hot at the argmax, ties to
    the smallest id). This is HF transformers' order and semantics of its warpers."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0):
            raise BadParameterError("temperature", f"must be a number >= 0, got {self.temperature!r}")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise BadParameterError("top_k", f"must be an integer >= 1, got {self.top_k!r}")
        if self.top_p is not None and not (0 < self.top_p <= 1):
            raise BadParameterError("top_p", f"must lie in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def label(self) -> str:
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top_k={self.top_k}")
        if self.top_p is not None:
            parts.append(f"top_p={self.top_p:g}")
        return ",".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}

    def law(self, logits: Sequence[float], margin: float = 1e-5) -> list[float]:
        """The sampled law of one row of logits, in float64. A top-p cut that falls within
        ``margin`` of a cumulative mass is ambiguous in float32 (an engine may keep one token
        more or fewer): that raises ``BadParameterError`` rather than give a law the engine
        cannot be held to."""
        z = np.asarray([float(v) for v in logits], dtype=np.float64)
        if z.ndim != 1 or not np.isfinite(z).any() or np.isnan(z).any() or np.isposinf(z).any():
            raise SpecproofInputError("logits", "expected a row of finite numbers (or -inf), not all -inf")
        if self.greedy:
            out = [0.0] * len(z)
            out[int(np.argmax(z))] = 1.0
            return out
        z = z / self.temperature
        if self.top_k is not None and self.top_k < len(z):
            kth = np.sort(z)[::-1][self.top_k - 1]
            z = np.where(z < kth, -np.inf, z)
        p = np.exp(z - z.max())
        p /= p.sum()
        if self.top_p is not None and self.top_p < 1:
            order = np.argsort(-p, kind="stable")
            above = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])
            keep = above < self.top_p
            near = np.abs(above[1:] - self.top_p) < margin
            if near.any():
                raise BadParameterError(
                    "top_p",
                    f"{self.top_p:g} falls within {margin:g} of a cumulative mass of this law "
                    f"({', '.join(f'{a:.6f}' for a in above[1:][near])}): ambiguous in float32",
                )
            mask = np.zeros(len(p), dtype=bool)
            mask[order[keep]] = True
            p = np.where(mask, p, 0.0)
            p /= p.sum()
        return [float(v) for v in p]


T1, T07 = Sampling(1.0), Sampling(0.7)
#: the prompts a user's engine is audited on when neither the audit nor the engine names any
DEFAULT_PROMPTS: tuple[Seq, ...] = ((0, 1),)
GREEDY = Sampling(0.0)


# --------------------------------------------------------------------------- the contract


@runtime_checkable
class Engine(Protocol):
    """What the engine audit calls (module docstring)."""

    vocab: int

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]: ...

    def target_law(self, context: Sequence[int]) -> Sequence[float]: ...


def _always() -> tuple[bool, str]:
    return True, ""


@dataclass(frozen=True)
class EngineSpec:
    """A registered engine: how to build it per sampling setting, and how to audit it."""

    name: str
    group: str  # reference, mutant, alternative, hf, vllm, sglang, optimized, user
    doc: str
    build: Callable[[Sampling], Engine]
    vocab: int
    prompts: tuple[Seq, ...]
    samplings: tuple[Sampling, ...] = (T1, T07)
    expect: str = "pass"  # the verdict its authors claim: pass, lossy, contract_violation
    tokens: int = 4  # the default horizon M
    available: Callable[[], tuple[bool, str]] = _always
    notes: str = ""  # what the audit table should say about it (options, cost, caveats)

    def to_json(self) -> dict[str, Any]:
        ok, why = self.available()
        return {
            "name": self.name,
            "group": self.group,
            "doc": self.doc,
            "expect": self.expect,
            "vocab": self.vocab,
            "prompts": [list(p) for p in self.prompts],
            "samplings": [s.label for s in self.samplings],
            "tokens": self.tokens,
            "available": ok,
            "reason": why,
        }
