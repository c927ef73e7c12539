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
  server's profile, its law recipe, its identity);
* ``at_load(level)``: the same engine with ``level`` requests in flight at each call, and on
  that engine ``background()``, the requests it sent beside the audit's (:mod:`.load`);
* ``at_cache()``, ``at_completions(n)``: the same engine after a prefix-cache hit, or asking
  for n completions a request (:mod:`.completions`).

An :class:`EngineSpec` says how to build an engine for each :class:`Sampling` setting, which
prompts and settings to audit it under, what verdict its authors claim, and how to stop the
worker processes its engines start (``close``, called when its audit ends).

Two ways an engine's call can fail without a verdict on the engine: :class:`EngineUnavailable`
(a server down: the audit ends ``underpowered`` with what it drew) and :class:`WorkerFault` (the
worker process an adapter drives in another environment crashed or answered an error: the audit
ends ``error``, the worker's error quoted, and never agrees with a declared verdict). Any other
exception an engine raises is the engine's own: a contract violation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from specproof.properties.servers.venvs import WorkerFault as WorkerFault  # re-exported
from specproof.reference.errors import SpecproofError
from specproof.reference.sampling import Sampling as ReferenceSampling

Seq = tuple[int, ...]


class EngineUnavailable(SpecproofError):
    """The engine could not answer (a server down or failing after its retries): no verdict about
    its law. ``done`` holds the samples it completed, in order, before it failed; an audit keeps
    them and ends ``underpowered``, never ``pass``."""

    def __init__(self, detail: str, done: Sequence[Generation] = ()) -> None:
        super().__init__(detail)
        self.detail = detail
        self.done = list(done)


class NotStreamed(SpecproofError):
    """A request asking for its answer streamed was answered in one piece, not as an event stream:
    the engine does not stream (its streaming check is not run, never failed). ``content_type`` is
    what it sent."""

    def __init__(self, url: str, content_type: str) -> None:
        what = content_type or "no content type"
        super().__init__(f"{url} answered a streamed request with a whole {what} body, not an event stream")
        self.url, self.content_type = url, content_type


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
    #: tokens emitted by each of its target steps, in order (each step's accepted drafts and its
    #: corrected or bonus token), where the engine says: each token's index in its step
    steps: tuple[int, ...] | None = None
    #: the text the engine returned with it (a server's answer), where it returns one
    text: str | None = None
    #: its index among the completions of one request (the completions axis), where asked for n
    choice: int | None = None
    #: prompt tokens the server served from its prompt cache (llama-server's ``timings.cache_n``),
    #: where it says: the prefix-cache axis counts its hits from it
    cached: int | None = None


# --------------------------------------------------------------------------- sampling settings


#: what an engine is asked to sample from: the reference's request (every parameter and its law)
Sampling = ReferenceSampling


T1, T07 = Sampling(1.0), Sampling(0.7)
#: the prompts a user's engine is audited on when neither the audit nor the engine names any
DEFAULT_PROMPTS: tuple[Seq, ...] = ((0, 1),)
#: the horizon M an engine is audited at when neither the audit nor the engine names one
DEFAULT_TOKENS = 4
#: the horizon M of an endpoint audit unless asked: a request's cost (its round trip, its prompt's
#: forward) shared by 64 tokens the token test scores, and the laws along them read in one request
#: where the family can (the cells test of the joint law runs where M <= 12 is asked)
ENDPOINT_TOKENS = 64
GREEDY = Sampling(0.0)


# --------------------------------------------------------------------------- the contract


@runtime_checkable
class Engine(Protocol):
    """What the engine audit calls (module docstring)."""

    vocab: int

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]: ...

    def target_law(self, context: Sequence[int]) -> Sequence[float] | np.ndarray: ...


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
    tokens: int = DEFAULT_TOKENS  # the horizon M
    available: Callable[[], tuple[bool, str]] = _always
    notes: str = ""  # what the audit table should say about it (options, cost, caveats)
    #: requests in flight to audit every case at (:mod:`.load`); empty: the engine's own way
    loads: tuple[int, ...] = ()
    #: audit every case cold and after a prefix-cache hit (the engine's ``at_cache``)
    prefix_cache: bool = False
    #: audit every case with one completion a request and with this many (the engine's
    #: ``at_completions``; 1: no such axis)
    completions: int = 1
    #: the values asked of other workload axes, by axis name (an axis of :mod:`.plugins` without a
    #: field of its own reads them here)
    axes: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    #: stops the worker processes its engines started (an idle one may hold a core), called when
    #: its audit ends, so that the engines of a group never run beside another's idle workers
    close: Callable[[], None] | None = None

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
