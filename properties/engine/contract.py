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

What an engine may offer beyond the two calls (each optional, read when present):

* after each ``generate``: ``last_steps`` (tokens emitted per target forward) or
  ``last_forwards`` (target forwards), and ``last_counters``, a dict with ``drafted`` (draft
  tokens proposed) and ``accepted`` (draft tokens accepted): the engine's own proof that it
  speculated;
* ``generate_many(prompt_ids, max_new_tokens, seeds, report=False) -> list[Generation]``: many
  samples at once (sample ``i`` a function of ``seeds[i]`` alone, however they are scheduled),
  each with its counters; with ``report=True`` also the probability the engine reports for each
  emitted token (a server's logprobs), when ``reports_probabilities`` is true;
* ``twin``: the same engine with speculation off (an engine itself), for the control checks:
  the numerical tolerance of the laws and the seed-coupled comparison;
* ``describe() -> dict``: what the audit should state about how the engine was reached (a
  server's profile, its law recipe, its identity).

An :class:`EngineSpec` says how to build an engine for each :class:`Sampling` setting, which
prompts and settings to audit it under, and what verdict its authors claim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from specproof.reference.errors import BadParameterError, SpecproofError, SpecproofInputError

Seq = tuple[int, ...]


class EngineUnavailable(SpecproofError):
    """The engine could not answer (a server down or failing after its retries): no verdict about
    its law. ``done`` holds the samples it completed, in order, before it failed; an audit keeps
    them and ends ``underpowered``, never ``pass``."""

    def __init__(self, detail: str, done: Sequence[Generation] = ()) -> None:
        super().__init__(detail)
        self.detail = detail
        self.done = list(done)


@dataclass(frozen=True)
class Generation:
    """One sample and what the engine said about it (every field but ``tokens`` optional:
    None means the engine does not tell)."""

    tokens: Seq
    drafted: int | None = None  # draft tokens the engine proposed while producing it
    accepted: int | None = None  # draft tokens it accepted
    forwards: int | None = None  # target forwards it ran
    #: the probability the engine reported for each emitted token (None where it reported none)
    reported: tuple[float | None, ...] | None = None


# --------------------------------------------------------------------------- sampling settings


@dataclass(frozen=True)
class Sampling:
    """What the engine is asked to sample from: ``softmax(logits / temperature)``, then top-k
    (keep the k largest, ties at the k-th value kept), then top-p (keep the most likely tokens
    until their mass reaches p: a token is kept when the mass ranked strictly above it is below
    p), then min-p (keep the tokens whose probability is at least ``min_p`` times the largest),
    renormalized. ``temperature == 0`` is greedy decoding (one-hot at the argmax, ties to the
    smallest id). This is HF transformers' order and semantics of its warpers; an engine that
    reads its law from a server (:mod:`specproof.properties.endpoint`) applies the server's own."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0):
            raise BadParameterError("temperature", f"must be a number >= 0, got {self.temperature!r}")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise BadParameterError("top_k", f"must be an integer >= 1, got {self.top_k!r}")
        if self.top_p is not None and not (0 < self.top_p <= 1):
            raise BadParameterError("top_p", f"must lie in (0, 1], got {self.top_p!r}")
        if self.min_p is not None and not (isinstance(self.min_p, (int, float)) and 0 <= self.min_p < 1):
            raise BadParameterError("min_p", f"must lie in [0, 1), got {self.min_p!r}")

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
        if self.min_p:
            parts.append(f"min_p={self.min_p:g}")
        return ",".join(parts)

    @property
    def truncated(self) -> bool:
        """Whether any cut-off (top-k, top-p, min-p) is asked beside the temperature."""
        return self.top_k is not None or (self.top_p or 1.0) < 1 or bool(self.min_p)

    def to_json(self) -> dict[str, Any]:
        out = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}
        if self.min_p is not None:
            out["min_p"] = self.min_p
        return out

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
        if self.min_p:
            p = np.where(p >= self.min_p * p.max(), p, 0.0)
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
    expect: str | None = "pass"  # the verdict its authors claim (None: no claim, a user's engine)
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
