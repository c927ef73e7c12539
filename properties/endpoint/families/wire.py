"""The stand-in side of every family's wire format: what a request asks (:class:`Ask`), what the
stand-in's model drew for it (:class:`Drawn`), and the small readers and writers the families'
stand-in answers share. The stand-in server itself (:mod:`specproof.properties.endpoint.standin`)
routes each path to the family module that answers it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from specproof.reference.errors import SpecproofError
from specproof.reference.sampling import Sampling

if TYPE_CHECKING:
    from specproof.properties.endpoint.standin import StandIn

Seq = tuple[int, ...]
#: the log-probability shown for an id the cut-offs removed (vLLM clamps -inf to this)
NEG_LOGPROB = -9999.0
#: a family's stand-in answer: (the stand-in, the request's JSON body) -> the answer's JSON
Answer = Callable[["StandIn", dict[str, Any]], Any]  # a JSON object, or Events when streamed


class RequestError(SpecproofError):
    """A request the stand-in refuses (HTTP ``status``, 400 unless said)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.status = message, status


@dataclass(frozen=True)
class Ask:
    """What a request asks, whatever its shape."""

    prompt: Seq
    tokens: int
    seed: int
    sampling: Sampling
    report: bool  # asks for the probability of each emitted token
    joint: bool = False  # SGLang's order of the cut-offs
    tempered_reports: bool = False  # SGLang reports the law before the cut-offs
    stop: tuple[str, ...] = ()  # stop strings over the tokens' texts
    cache_prompt: bool = False  # asks the server to reuse its cached prompt (llama-server's field)
    forked: bool = False  # a completion after the first of a request for several
    #: the LoRA adapters it runs with: (id, scale) for every adapter the server holds (llama-server's
    #: ``lora`` field, each adapter absent from it at the server's own scale)
    adapter: tuple[tuple[int, float], ...] = ()
    #: tokens a grammar of token ids forces before one free token (llama-server's ``<[id]>``: the
    #: audit reads the laws along a path so); None: none forced
    forced: tuple[int, ...] | None = None


@dataclass
class Drawn:
    """What the model produced for an :class:`Ask`."""

    tokens: list[int]
    drafted: int = 0
    accepted: int = 0
    #: per emitted token: its reported probability and the law shown with it (None: not asked)
    reported: list[float] = field(default_factory=list)
    shown: list[np.ndarray] = field(default_factory=list)
    raw: list[np.ndarray] = field(default_factory=list)  # the model's own law (T = 1, no cut-offs)
    #: tokens emitted by each step, in order (the first token is a step of its own)
    steps: list[int] = field(default_factory=list)
    stopped_by: str | None = None  # the stop string that ended it
    cached: int = 0  # prompt tokens served from the prompt cache (a prefix-cache hit)


class Events(list[Any]):
    """A streamed answer: the JSON events a server sends one by one (``text/event-stream``,
    each ``data: {...}``), in order."""

    def sse(self) -> bytes:
        return "".join(f"data: {json.dumps(e)}\n\n" for e in self).encode()


def token_texts(vocab: int) -> list[str]:
    """The stand-in's token texts, id -> text: the token map of the ``openai`` profile."""
    return [f"<t{i}>" for i in range(vocab)]


def logprob(p: float) -> float:
    return math.log(p) if p > 0 else NEG_LOGPROB


def ids(value: Any, what: str) -> Seq:
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise RequestError(f"{what}: expected a list of token ids, got {str(value)[:80]}")
    return tuple(value)


def count(value: Any, what: str, default: int) -> int:
    n = default if value is None else value
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise RequestError(f"{what}: expected an integer >= 1, got {value!r}")
    return n


def stops(value: Any) -> tuple[str, ...]:
    """A request's ``stop``: absent, one string or a list of non-empty strings."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or any(not isinstance(t, str) or not t for t in items):
        raise RequestError(f"stop: expected a string or a list of non-empty strings, got {value!r}")
    return tuple(items)


def adapters(value: Any, held: int, default: float) -> tuple[tuple[int, float], ...]:
    """A request's ``lora`` (llama-server's: a list of ``{"id": i, "scale": s}``) over the ``held``
    adapters of a server: every adapter with its scale, those the request does not name at
    ``default``. An id outside them is refused, as llama-server refuses it."""
    scales = dict.fromkeys(range(held), float(default))
    if value is None:
        return tuple(scales.items())
    if not isinstance(value, list):
        raise RequestError(f"lora: expected a list of {{id, scale}}, got {str(value)[:80]}")
    for entry in value:
        try:
            i, scale = int(entry["id"]), float(entry.get("scale", 0.0))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise RequestError(f"lora: expected {{id, scale}} entries, got {str(entry)[:80]}") from e
        if i not in scales:
            raise RequestError(f"lora: invalid adapter id {i} (the server holds {held})")
        scales[i] = scale
    return tuple(scales.items())


def top(law: np.ndarray, n: int | None, nonzero: bool = False) -> list[tuple[int, float]]:
    """The ``n`` most likely ids of ``law`` (all for None or a negative n), ties to the smaller id."""
    order = sorted(range(len(law)), key=lambda i: (-float(law[i]), i))
    if nonzero:
        order = [i for i in order if law[i] > 0]
    if n is not None and n >= 0:
        order = order[:n]
    return [(i, float(law[i])) for i in order]
