"""Where an audit's samples are drawn, whatever the door: :class:`ShardOptions` (``--workers N``,
``--ray ADDRESS``; ``workers=``, ``ray=`` from Python; ``--specproof-workers``,
``--specproof-ray`` from pytest), made a drawer or a caller.

Each of :func:`drawer_for` and :func:`caller_for` is a context manager that yields None when
neither is given (the audit runs here, as before) and otherwise a :class:`~.engine.RayDrawer` or
:class:`~.verifier.RayCaller` whose actors are stopped on exit (a Ray instance started for them
stays up until the process exits, for the next audit of the same process).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from specproof.properties.options import Flag
from specproof.reference.errors import UsageError


@dataclass(frozen=True)
class ShardOptions:
    """Where the samples are drawn: here (neither given), ``workers`` local Ray actors, or the
    Ray cluster at ``ray`` (docs/sharding.md)."""

    workers: int | None = None
    ray: str | None = None

    FLAGS: ClassVar[dict[str, Flag]] = {
        "workers": Flag(
            "--workers",
            "Ray actors that draw the samples (one replica each)",
            metavar="N",
            parse=int,
            example=2,
        ),
        "ray": Flag(
            "--ray",
            "join the Ray cluster at ADDRESS (auto, host:port, ray://host:port) instead of starting one "
            "here; without --workers, one actor per GPU of the cluster (else per CPU)",
            metavar="ADDRESS",
            example="auto",
        ),
    }

    def __post_init__(self) -> None:
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise UsageError(f"workers: must be an integer >= 1, got {self.workers!r}")

    @property
    def sharded(self) -> bool:
        return self.workers is not None or bool(self.ray)


@contextlib.contextmanager
def drawer_for(spec: Any, shard: ShardOptions, source: Any = None) -> Iterator[Any]:
    """A :class:`~.engine.RayDrawer` for ``spec``'s engine audit (or the endpoint audit), made from
    ``source`` (a registered name or ``module:attr``, an engine factory, an EngineSpec), or None
    when ``shard`` asks for no workers."""
    if not shard.sharded:
        yield None
        return
    from specproof.properties.shard.engine import RayDrawer
    from specproof.properties.shard.recipe import engine_recipe

    target = source if isinstance(source, str) else None
    recipe = engine_recipe(spec, target, None if target else source)
    with RayDrawer(recipe, shard.workers, shard.ray) as drawer:
        yield drawer


@contextlib.contextmanager
def caller_for(backend: Any, shard: ShardOptions) -> Iterator[Any]:
    """A :class:`~.verifier.RayCaller` for ``backend``'s verifier audit, or None when ``shard`` asks
    for no workers."""
    if not shard.sharded:
        yield None
        return
    from specproof.properties.shard.verifier import RayCaller

    with RayCaller.for_backend(backend, shard.workers, shard.ray) as caller:
        yield caller
