"""The prefix-cache axis of an engine audit: every case cold and after a prefix-cache hit.

A server that caches prompts serves a warm request from another state than a cold one: the
target's and the draft model's KV for the shared prefix come from an earlier request, and a defect
there shows only on a hit. An engine that offers ``at_cache()`` (capability ``prefix_cache``) gives
the same engine with every generation asking the server to reuse its cached prompt; with
``EngineSpec.prefix_cache`` (``--prefix-cache``) every case runs cold and warm, seed use is checked
cold, and a deviation only after a hit reads "lossy only after a prefix-cache hit (the same prompt
and setting held cold)". proofs_notes/endpoint_audit.md states it; docs/endpoint-audit.md shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specproof.properties.engine.contract import EngineSpec, Generation
from specproof.properties.engine.plugin import Axis, Check
from specproof.reference.errors import UsageError

if TYPE_CHECKING:
    from specproof.properties.engine.audit import EngineAudit
    from specproof.properties.engine.case import EngineCaseResult
    from specproof.properties.engine.runner import CaseRunner

#: how a case's place on the axis reads in its name
CACHE_NAMES = {None: "", "cold": " cold", "warm": " after a prefix-cache hit"}


class CacheAxis(Axis):
    """Cold, then after a prefix-cache hit: the engine's ``at_cache()`` (module docstring)."""

    docs = "docs/endpoint-audit.md#after-a-prefix-cache-hit---prefix-cache"
    bug = "prefix_poison"
    signoff = "a prefix-cache hit behaves as a cold request"
    calibration = "docs/measurements/prefix-calibration.md"

    name, capability, attr, option = "cache", "prefix_cache", "at_cache", "prefix_cache"
    why = "it cannot be asked to reuse a cached prompt (profiles llamacpp and vllm can)"

    def values(self, spec: EngineSpec) -> tuple[Any, ...]:
        return ("cold", "warm") if spec.prefix_cache else ()

    def exclusive(self, asked: Sequence[Axis]) -> None:
        if any(a.name == "load" for a in asked):
            raise UsageError("prefix_cache: audit the prefix-cache axis and the load axis in two audits")

    def suffix(self, value: Any) -> str:
        return CACHE_NAMES[value]

    def args(self, value: Any) -> tuple[Any, ...] | None:
        return () if value == "warm" else None

    def base(self, value: Any, values: tuple[Any, ...]) -> bool:
        return True  # seed use on the likeliest case, cold before warm where their laws are one

    def reference(self, value: Any) -> bool:
        return value == "cold"


@dataclass
class CacheHits:
    """The warm requests whose answers said how many prompt tokens the cache served
    (``Generation.cached``), and those that hit it (at least one token)."""

    warm: int = 0
    counted: int = 0
    hits: int = 0

    def line(self) -> str:
        if not self.counted:
            return (
                f"prefix cache: no hit counted in {self.warm} warm requests (the server reports no cached "
                "prompt tokens)"
            )
        return (
            f"prefix cache: {self.hits} of {self.counted} warm requests hit the cache (the prompt tokens "
            "the server said it served from it)"
        )

    def to_json(self) -> dict[str, Any]:
        return {"warm": self.warm, "counted": self.counted, "hits": self.hits}


class CacheCheck(Check):
    """Counts the prefix-cache hits of the warm requests (:class:`CacheHits`): the sign-off's
    prefix-cache item says "yes" only where hits were counted."""

    name = "cache"
    docs = "docs/endpoint-audit.md#after-a-prefix-cache-hit---prefix-cache"
    bug = "ignores_cache"
    signoff = "a prefix-cache hit behaves as a cold request"
    calibration = "exact: counts of the prompt tokens the server says it served from its cache"

    def start(self, audit: EngineAudit) -> None:
        self.hits: CacheHits | None = None
        if audit.values(self.name):
            self.hits = audit.result.plugins[self.name] = CacheHits()

    def sample(self, audit: EngineAudit, runner: CaseRunner, r: EngineCaseResult, g: Generation) -> None:
        if self.hits is None or r.case.at(self.name) != "warm":
            return
        self.hits.warm += 1
        if g.cached is not None:
            self.hits.counted += 1
            self.hits.hits += g.cached > 0
