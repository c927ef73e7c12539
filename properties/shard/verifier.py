"""The verifier audit's sampling stage on Ray actors: :class:`RayCaller`.

The driver runs :class:`~specproof.properties.audit.stages.Audit` unchanged (smoke stage, plan,
the tests, the verdict, shrinking, all local). In the sampling stage each case's calls are seeded
by ``call_seeds(seed, case, k)`` and sized by the case alone, so call ``k`` is the same wherever
it runs: this caller hands the calls to actors that each hold their own replica of the verifier
(:mod:`.recipe`) and yields them in call order (:mod:`.pool`), packed (:mod:`.wire`). A contract
violation is raised when its call is reached, with the verifier's own kind, detail and row, so
it is attributed to the same (call, row) as in a local run; a hard failure comes back whole and
the driver names its row as it would. A worker that cannot load the verifier, or a cluster that
goes away, ends the case short with what it holds (``CallsUnavailable``): ``underpowered``.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

from specproof.properties.audit.stages import Audit, AuditConfig, Caller, CallOutput, CallsUnavailable, Runner
from specproof.properties.conformance.contracts import ContractViolation
from specproof.properties.shard.pool import PoolClient, PoolFailure
from specproof.properties.shard.recipe import BackendRecipe, backend_recipe, worker_paths
from specproof.properties.shard.wire import unpack_call


class RayCaller(PoolClient, Caller):
    """Runs the sampling stage's calls on ``workers`` Ray actors (module docstring); the options
    are :class:`~specproof.properties.shard.engine.RayDrawer`'s."""

    def __init__(
        self,
        recipe: BackendRecipe,
        workers: int | None = 2,
        address: str | None = None,
        *,
        depth: int = 2,
        **placement: Any,
    ) -> None:
        """``placement``: :meth:`PoolClient.start`'s (``cpus_per_worker``, ``gpus_per_worker``,
        ``threads``, ``max_restarts``, ``stall_seconds``)."""
        from specproof.properties.shard.workers import VerifierWorker

        self.start(VerifierWorker, recipe, worker_paths(), workers, address, **placement)
        self.parallel, self.depth = self.workers, depth
        self.rows = 0
        self.driver_seconds = 0.0

    @classmethod
    def for_backend(
        cls, backend: Any, workers: int | None = 2, address: str | None = None, **kw: Any
    ) -> RayCaller:
        return cls(backend_recipe(backend), workers, address, **kw)

    def calls(
        self, runner: Runner, config: AuditConfig, rows: list[int]
    ) -> Generator[CallOutput, None, None]:
        case = runner.case
        jobs = [(case, runner.timeout, config.seed, k, b) for k, b in enumerate(rows, 1)]
        answers = self.pool.ordered("call", jobs, self.depth, window=2 * self.depth * self.workers)
        try:
            while True:
                t0 = time.process_time()
                try:
                    answer = next(answers)
                except StopIteration:
                    return
                except PoolFailure as e:
                    raise CallsUnavailable(e.detail) from e
                tag = answer[0]
                if tag == "violation":
                    raise ContractViolation(*answer[1:])
                if tag != "ok":
                    raise CallsUnavailable(f"a worker stopped: {answer[1]}")
                out = unpack_call(answer[1], case.paired)
                self.rows += len(out[2])
                self.driver_seconds += time.process_time() - t0
                yield out
        finally:
            answers.close()

    def summary(self) -> str:
        s = self.pool.stats
        return (
            f"sharded over {self.workers} Ray workers: {self.rows:,} rows in {s.jobs:,} calls, "
            f"{s.bytes_up:,} bytes back ({s.bytes_up / max(1, self.rows):.1f} per row), "
            f"{s.bytes_down:,} bytes out; {s.restarts} workers replaced, {s.rerun} calls run again"
        )


def audit_sharded(
    backend: Any,
    config: AuditConfig | None = None,
    workers: int | None = 2,
    address: str | None = None,
    **kw: Any,
) -> Any:
    """:func:`~specproof.properties.audit.stages.audit` with its sampling stage on ``workers`` Ray
    actors; the keywords go to ``Audit`` (progress, on_plan, clock)."""
    with RayCaller.for_backend(backend, workers, address) as caller:
        return Audit(backend, config or AuditConfig(), caller=caller, **kw).run()
