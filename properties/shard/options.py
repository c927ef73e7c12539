"""The ways in: ``--workers N`` and ``--ray ADDRESS`` (or ``workers=``, ``ray=`` of the Python
API) made a drawer or a caller.

Each is a context manager that yields None when neither is given (the audit runs here, as before)
and otherwise a :class:`~.engine.RayDrawer` or :class:`~.verifier.RayCaller` whose actors are
stopped on exit (a Ray instance started for them stays up until the process exits, for the next
audit of the same process).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from specproof.reference.errors import UsageError


def sharded(args: Any) -> bool:
    """Whether the options ask for workers (``--workers`` or ``--ray``)."""
    workers = getattr(args, "workers", None)
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise UsageError(f"--workers: must be an integer >= 1, got {workers!r}")
    return workers is not None or bool(getattr(args, "ray", None))


@contextlib.contextmanager
def engine_drawer(args: Any, spec: Any, target: str | None = None) -> Iterator[Any]:
    """A drawer for ``spec``'s engine audit (or the endpoint audit), or None."""
    if not sharded(args):
        yield None
        return
    with drawer_for(spec, args.workers, args.ray, target) as drawer:
        yield drawer


@contextlib.contextmanager
def verifier_caller(args: Any, backend: Any) -> Iterator[Any]:
    """A caller for ``backend``'s verifier audit, or None."""
    if not sharded(args):
        yield None
        return
    with caller_for(backend, args.workers, args.ray) as caller:
        yield caller


@contextlib.contextmanager
def drawer_for(spec: Any, workers: int | None, address: str | None, source: Any = None) -> Iterator[Any]:
    """The Python API's way in (``specproof.audit_engine(..., workers=, ray=)``): a
    :class:`~.engine.RayDrawer` for ``spec`` made from ``source`` (a registered name or
    ``module:attr``, an engine factory, an EngineSpec), or None when neither is given."""
    if workers is None and not address:
        yield None
        return
    from specproof.properties.shard.engine import RayDrawer
    from specproof.properties.shard.recipe import engine_recipe

    target = source if isinstance(source, str) else None
    with RayDrawer(engine_recipe(spec, target, None if target else source), workers, address) as drawer:
        yield drawer


@contextlib.contextmanager
def caller_for(backend: Any, workers: int | None, address: str | None) -> Iterator[Any]:
    """A :class:`~.verifier.RayCaller` for ``backend``, or None when neither is given."""
    if workers is None and not address:
        yield None
        return
    from specproof.properties.shard.verifier import RayCaller

    with RayCaller.for_backend(backend, workers, address) as caller:
        yield caller
