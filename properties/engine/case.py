"""A case of an engine audit and what was found in it: :class:`EngineCase` (a prompt, a sampling
setting, and its place on every workload axis asked) and :class:`EngineCaseResult` (its samples,
its law tests, its counters). Data only: nothing here samples or tests.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from specproof.properties.audit.sequences import SequenceTest
from specproof.properties.engine.checks import Speculation
from specproof.properties.engine.contract import Sampling, Seq


@dataclass(frozen=True)
class EngineCase:
    index: int
    prompt: Seq
    sampling: Sampling
    tokens: int
    #: its place on each workload axis asked (:mod:`.plugins`), in the table's order: the axis's
    #: name, the value, how the case's name reads there, and a key that sorts the axis's values
    places: tuple[tuple[str, Any, str, Any], ...] = ()

    def at(self, axis: str) -> Any:
        """The case's value on ``axis`` (None: that axis is not asked)."""
        return next((value for name, value, _, _ in self.places if name == axis), None)

    @property
    def where(self) -> str | None:
        """Its place on the workload axes in words ("with 8 in flight"; None: no axis)."""
        words = "".join(suffix for _, _, suffix, _ in self.places).strip()
        return words or None

    @property
    def order(self) -> tuple[Any, ...]:
        """A key that sorts cases by their places, each axis's values as the axis sorts them."""
        return tuple(key for _, _, _, key in self.places)

    @property
    def load(self) -> int | None:
        """Requests in flight while its samples are drawn (the load axis; None: not asked)."""
        return self.at("load")

    @property
    def cache(self) -> str | None:
        """ "cold" or "warm" (after a prefix-cache hit) on the prefix-cache axis (None: not asked)."""
        return self.at("cache")

    @property
    def completions(self) -> int | None:
        """Completions a request on the completions axis (None: not asked)."""
        return self.at("completions")

    @functools.cached_property
    def name(self) -> str:
        prompt = " ".join(map(str, self.prompt))
        where = "".join(suffix for _, _, suffix, _ in self.places)
        return f"{self.sampling.label} after [{prompt}]{where}"

    def to_json(self) -> dict[str, Any]:
        out = {"prompt": list(self.prompt), "sampling": self.sampling.to_json(), "tokens": self.tokens}
        out.update({name: value for name, value, _, _ in self.places})
        return out


@dataclass
class EngineCaseResult:
    case: EngineCase
    planned: int
    schedule: list[int]
    n: int = 0
    looks: list[tuple[int, float]] = field(default_factory=list)  # (samples, p) at each look
    test: SequenceTest | None = None
    pvalue: float = 1.0
    rejected: bool = False
    hard_failure: dict[str, Any] | None = None
    point_mass: bool = False
    seconds: float = 0.0
    budget_limited: bool = False
    #: its joint-law test had one cell: it tested nothing of the joint law (never a pass of it)
    collapsed: bool = False
    #: the token test: the tokens it scored, the per-token TV each planned statistic detects at
    #: them, and what it found where the case moved its wealth across the threshold
    observed_tokens: int = 0
    token_detects: dict[str, float] = field(default_factory=dict)
    token_finding: dict[str, Any] | None = None
    #: samples drawn past the planned ones because samples ended early (the token test's plan is in
    #: tokens), and whether the case hit the cap on them before seeing its planned tokens
    extended: int = 0
    short_of_tokens: bool = False
    forwards: Counter[int] = field(default_factory=Counter)  # target forwards per call
    power: float = 0.0
    detectable_tv: float = 1.0
    speculation: Speculation = field(default_factory=Speculation)

    def to_json(self) -> dict[str, Any]:
        t = self.test
        return {
            "case": self.case.to_json(),
            "name": self.case.name,
            "planned_samples": self.planned,
            "schedule": self.schedule,
            "samples": self.n,
            "looks": [{"samples": n, "pvalue": p} for n, p in self.looks],
            "pvalue": self.pvalue,
            "rejected": self.rejected,
            "hard_failure": self.hard_failure,
            "point_mass": self.point_mass,
            "power_at_tv": self.power,
            "detectable_tv": self.detectable_tv,
            "cells": None if t is None else t.cells,
            "unresolved_mass": None if t is None else t.unresolved,
            "uncovered": None if t is None else t.uncovered,
            "test": None if t is None else t.to_json(),
            "description": None if t is None else t.summary(),
            "target_forwards_per_call": {str(k): v for k, v in sorted(self.forwards.items())},
            "seconds": self.seconds,
            "budget_limited": self.budget_limited,
            "speculation": self.speculation.to_json(),
            **({"collapsed": True} if self.collapsed else {}),
            **(
                {"tokens": self.observed_tokens, "detects_per_token_tv": self.token_detects}
                if self.token_detects
                else {}
            ),
            **({"token_finding": self.token_finding} if self.token_finding else {}),
            **({"extended_samples": self.extended} if self.extended else {}),
            **({"short_of_tokens": True} if self.short_of_tokens else {}),
        }
