"""Recorded traffic from a server: the laws along its paths read from the server's twin or an
engine here (:func:`twin_laws`, :func:`engine_laws`); the test itself, and the records, are the
engine layer's (:mod:`specproof.properties.engine.traffic`), re-exported here."""

from __future__ import annotations

from typing import Any

import numpy as np

from specproof.properties.engine.traffic import (
    SAMPLING_FIELDS,
    LawsAlong,
    Record,
    TrafficResult,
    audit_traffic,
    read_traffic,
)
from specproof.reference.sampling import Sampling

__all__ = [
    "SAMPLING_FIELDS",
    "LawsAlong",
    "Record",
    "TrafficResult",
    "audit_traffic",
    "engine_laws",
    "read_traffic",
    "twin_laws",
]


class TwinLaws:
    """The laws along a path read from an opened endpoint (its twin where it has one), per setting
    and LoRA adapter scales (``adapter``: (id, scale) pairs; empty: the server's own; None:
    ``default``, or where that is None the endpoint's ``--adapter``, the server's own without it):
    by the family's recipe, the laws along the path in one request where the family reads them so
    and they agree with its one-token recipe (:meth:`Endpoint.check_along`), else one law request
    a prefix, sent concurrently. :meth:`alone` reads one law by the one-token recipe, what the
    traffic audit checks the reads along a path against at random depths."""

    def __init__(self, endpoint: Any, default: tuple[tuple[int, float], ...] | None = None) -> None:
        self.endpoint = endpoint
        self.default = endpoint.options.adapter if default is None else default
        self.engines: dict[tuple[Sampling, tuple[tuple[int, float], ...]], Any] = {}

    def _engine(
        self, prompt: tuple[int, ...], s: Sampling, adapter: tuple[tuple[int, float], ...] | None
    ) -> Any:
        key = (s, tuple(self.default if adapter is None else adapter))
        if key not in self.engines:
            if s not in self.endpoint.along:
                self.endpoint.check_along(
                    tuple(prompt), s
                )  # the laws along a path in one request, where they agree
            self.engines[key] = self.endpoint.engine(s, adapter=key[1])
        return self.engines[key]

    def __call__(
        self,
        prompt: tuple[int, ...],
        tokens: tuple[int, ...],
        s: Sampling,
        adapter: tuple[tuple[int, float], ...] | None = None,
    ) -> np.ndarray:
        contexts = [list(prompt) + list(tokens[:d]) for d in range(len(tokens))]
        return np.asarray(self._engine(prompt, s, adapter).target_laws(contexts, prompt_len=len(prompt)))

    def alone(
        self,
        prompt: tuple[int, ...],
        prefix: tuple[int, ...],
        s: Sampling,
        adapter: tuple[tuple[int, float], ...] | None = None,
    ) -> np.ndarray | None:
        """The law after ``prompt + prefix`` by the one-token recipe; None where this setting's laws
        are read one position at a time anyway (the two reads are one path)."""
        engine = self._engine(prompt, s, adapter)
        if not engine.reads_along():
            return None
        return np.asarray(engine.law_alone(list(prompt) + list(prefix), prompt_len=len(prompt)))


def twin_laws(endpoint: Any, default: tuple[tuple[int, float], ...] | None = None) -> LawsAlong:
    """:class:`TwinLaws` of an opened endpoint."""
    return TwinLaws(endpoint, default)


def engine_laws(engine: Any) -> LawsAlong:
    """The laws along a path from an engine object in this process: its ``target_laws_along``
    (teacher forcing) where it has one, else one ``target_law`` a prefix. Its laws are those of
    the setting it was built with."""

    def laws(prompt: tuple[int, ...], tokens: tuple[int, ...], s: Sampling) -> np.ndarray:
        along = getattr(engine, "target_laws_along", None)
        if along is not None:
            return np.asarray(along(list(prompt), list(tokens)))
        return np.asarray([engine.target_law(list(prompt) + list(tokens[:d])) for d in range(len(tokens))])

    return laws
