"""The workload axes of an engine audit, whatever they are: the cases they make, the engine at a
case's place, the share of alpha they take, and where a deviation lives ("lossy only with 8 in
flight"). The axes themselves are plug-ins (:class:`~.plugin.Axis`) listed in :mod:`.plugins`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specproof.properties.engine.capabilities import CAPABILITIES, capabilities_of
from specproof.properties.engine.case import EngineCase, EngineCaseResult
from specproof.properties.engine.contract import Engine, EngineSpec, EngineUnavailable, WorkerFault
from specproof.properties.engine.plugin import Axis
from specproof.properties.engine.runner import EngineViolation
from specproof.reference.errors import UsageError


def asked(spec: EngineSpec, axes: Sequence[Axis]) -> list[tuple[Axis, tuple[Any, ...]]]:
    """The axes ``spec`` asks for, each with its values, checked against one another; an axis
    named in ``spec.axes`` that no plug-in of ``axes`` is, a :class:`UsageError`."""
    known = [a.name for a in axes]
    for name, _ in spec.axes:
        if name not in known:
            raise UsageError(f"axes: no workload axis is named {name!r} (known: {', '.join(known)})")
    out = [(a, a.values(spec)) for a in axes]
    out = [(a, v) for a, v in out if v]
    for a, _ in out:
        a.exclusive([b for b, _ in out])
    return out


def cases(spec: EngineSpec, axes: Sequence[tuple[Axis, tuple[Any, ...]]]) -> list[EngineCase]:
    """Every (setting, prompt) case at every combination of the axes' values, in that order."""
    combos: list[tuple[tuple[str, Any, str, Any], ...]] = [()]
    for axis, values in axes:
        combos = [c + ((axis.name, v, axis.suffix(v), axis.order(v)),) for c in combos for v in values]
    out = [
        EngineCase(i, tuple(prompt), s, spec.tokens, places)
        for i, (s, prompt, places) in enumerate(
            (s, p, places) for s in spec.samplings for p in spec.prompts for places in combos
        )
    ]
    if not out:
        raise UsageError("an engine audit needs at least one prompt and one sampling setting")
    return out


def offered(engine: Engine, axis: Axis) -> bool:
    """Whether ``engine`` offers ``axis``: through its capability where it is one of
    :data:`~.capabilities.CAPABILITIES` (declared, or found from its attributes), else where the
    engine has the axis's attribute (a new axis needs no capability entry to run)."""
    if axis.capability in CAPABILITIES:
        return axis.capability in capabilities_of(engine)
    return callable(getattr(engine, axis.attr, None))


class Variants:
    """The engine of a setting at each place it is asked, made once per (setting, axis, value)."""

    def __init__(self, spec_name: str, axes: Sequence[tuple[Axis, tuple[Any, ...]]]) -> None:
        self.spec_name, self.axes = spec_name, axes
        self._made: dict[tuple[Any, ...], Engine] = {}

    def at(self, engine: Engine, case: EngineCase) -> Engine:
        """``engine`` (built for ``case``'s setting) at the case's place on each axis."""
        for axis, _ in self.axes:
            how = axis.engine_at(engine, case.at(axis.name))
            if how is None:
                continue
            attr, args = how
            key = (case.sampling, attr, args)
            if key not in self._made:
                at = getattr(engine, attr, None) if offered(engine, axis) else None
                if at is None:
                    raise UsageError(f"{axis.option}: {self.spec_name} offers no {attr}(): {axis.why}")
                try:
                    self._made[key] = at(*args)
                except (UsageError, EngineUnavailable, WorkerFault):
                    raise
                except Exception as e:
                    call = f"{attr}({', '.join(map(str, args))})"
                    raise EngineViolation("exception", f"{call} raised {type(e).__name__}: {e}", case) from e
            engine = self._made[key]
        return engine


def only_at(cases: Sequence[EngineCaseResult]) -> str:
    """ "lossy only with 8 in flight (the same prompt and setting held alone)" where every rejected
    case has a place on a workload axis (a load level, cold or after a prefix-cache hit) and the
    same prompt and setting were tested elsewhere on it without a rejection; empty otherwise (no
    axis, or a deviation everywhere)."""
    bad = [r for r in cases if (r.rejected or r.token_finding) and r.case.where is not None]
    if not bad or len(bad) < len([r for r in cases if r.rejected or r.token_finding]):
        return ""
    keys = {(r.case.prompt, r.case.sampling) for r in bad}
    held = [
        r
        for r in cases
        if (r.case.prompt, r.case.sampling) in keys and not (r.rejected or r.token_finding) and r.n > 0
    ]
    if not held:
        return ""
    at = list(dict.fromkeys(str(r.case.where) for r in sorted(bad, key=lambda r: r.case.order)))
    fine = list(dict.fromkeys(str(r.case.where) for r in sorted(held, key=lambda r: r.case.order)))
    return f"lossy only {' and '.join(at)} (the same prompt and setting held {' and '.join(fine)})"
