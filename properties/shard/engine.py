"""The engine audit (and the endpoint audit) sampled by Ray actors: :class:`RayDrawer`.

The driver runs :class:`~specproof.properties.engine.audit.EngineAudit` unchanged: it builds one
engine per setting for the contract stage, reads the target's law, plans, counts, tests and
decides. Only the law test's samples move: the audit asks its drawer for the samples of a chunk of
seeds (sample ``i`` of case ``c`` has the seed ``sample_seed(seed, c, i)``), and this drawer cuts
the chunk into shards, hands the shards to actors that each hold their own replica of the engine
(built from a recipe, :mod:`.recipe`), and returns the samples in seed order (:mod:`.pool`). A
sample is a function of its seed alone, so who drew it and when never shows: the verdict, the
p-values and the JSON are those of a local run, for any number of workers and any completion
order.

Faults, each attributed in seed order: an actor that dies has its shards drawn again by a fresh
one; a contract violation in a shard ends the audit ``contract_violation`` with the engine's own
kind and detail; a worker that cannot build its engine, an engine that stopped answering, or a
cluster that went away end it with the samples before the failing shard (``EngineUnavailable``:
the audit keeps them and ends ``underpowered`` or ``lossy``, never ``pass``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from specproof.properties.engine.contract import EngineSpec, EngineUnavailable, Generation, WorkerFault
from specproof.properties.engine.drawing import Drawer
from specproof.properties.engine.runner import CaseRunner, EngineViolation
from specproof.properties.shard.pool import PoolClient, PoolFailure
from specproof.properties.shard.recipe import EngineRecipe, engine_recipe, worker_paths
from specproof.properties.shard.wire import unpack_generations

#: samples per shard at least (an engine that draws one at a time still gets several per job)
MIN_SHARD = 16
#: shards per chunk at least: the chunk (what the audit asks at once) is the same for 1 to 4 workers
MIN_SHARDS = 8


class RayDrawer(PoolClient, Drawer):
    """Draws the engine audit's samples on ``workers`` Ray actors (module docstring).

    ``address``: a running cluster (``auto``, ``host:port``, ``ray://host:port``); None starts a
    local Ray instance (or uses the one this process already started). ``gpus_per_worker``: None
    gives each actor one GPU when the cluster has GPUs (one replica per GPU), else none.
    ``depth``: shards in flight per actor (two keep an actor busy while the driver merges)."""

    def __init__(
        self,
        recipe: EngineRecipe,
        workers: int | None = 2,
        address: str | None = None,
        *,
        depth: int = 2,
        min_shard: int = MIN_SHARD,
        **placement: Any,
    ) -> None:
        """``placement``: :meth:`PoolClient.start`'s (``cpus_per_worker``, ``gpus_per_worker``,
        ``threads``, ``max_restarts``, ``stall_seconds``)."""
        self.start(_engine_worker(), recipe, worker_paths(), workers, address, **placement)
        self.depth, self.min_shard = depth, min_shard
        self.drawn = 0  # samples returned to the audit
        self.driver_seconds = 0.0  # driver CPU time inside draw (dispatch, waiting, unpacking)

    @classmethod
    def for_spec(
        cls,
        spec: EngineSpec,
        workers: int | None = 2,
        address: str | None = None,
        target: str | None = None,
        **kw: Any,
    ) -> RayDrawer:
        return cls(engine_recipe(spec, target), workers, address, **kw)

    def shard(self, runner: CaseRunner) -> int:
        """Samples per job: the engine's own batch (``generate_many``), at least :data:`MIN_SHARD`."""
        return max(super().chunk(runner), self.min_shard)

    def chunk(self, runner: CaseRunner) -> int:
        return self.shard(runner) * max(MIN_SHARDS, self.workers * self.depth)

    def warm(self, samplings: list[Any]) -> list[Any]:
        """Start every actor and build its replicas now (else on its first shard)."""
        return self.pool.each("prepare", samplings)

    def draw(self, runner: CaseRunner, seeds: list[int]) -> list[Generation]:
        t0 = time.process_time()
        size = self.shard(runner)
        case, vocab = runner.case, runner.vocab
        jobs = [
            (case, vocab, np.asarray(seeds[i : i + size], dtype=np.uint64))
            for i in range(0, len(seeds), size)
        ]
        out: list[Generation] = []
        answers = self.pool.ordered("draw", jobs, self.depth)
        try:
            for answer in answers:
                tag = answer[0]
                if tag == "ok":
                    out += unpack_generations(answer[1])
                elif tag == "violation":
                    raise EngineViolation(answer[1], answer[2], case)
                elif tag == "fault":  # the engine's worker failed on the actor: the audit's own side
                    raise WorkerFault(f"{answer[1]} (on a worker)")
                elif tag == "unavailable":
                    out += unpack_generations(answer[2])
                    raise EngineUnavailable(f"{answer[1]} (on a worker)", out)
                else:
                    raise EngineUnavailable(f"a worker stopped: {answer[1]}", out)
        except PoolFailure as e:
            raise EngineUnavailable(e.detail, out) from e
        finally:
            answers.close()
            self.drawn += len(out)
            self.driver_seconds += time.process_time() - t0
        return out

    def summary(self) -> str:
        s = self.pool.stats
        per = s.bytes_up / max(1, self.drawn)
        return (
            f"sharded over {self.workers} Ray workers: {self.drawn:,} samples in {s.jobs:,} shards, "
            f"{s.bytes_up:,} bytes back ({per:.1f} per sample), {s.bytes_down:,} bytes out; "
            f"{s.restarts} workers replaced, {s.rerun} shards drawn again"
        )


def _engine_worker() -> type:
    from specproof.properties.shard.workers import EngineWorker

    return EngineWorker


def audit_engine_sharded(
    spec: EngineSpec,
    config: Any = None,
    workers: int | None = 2,
    address: str | None = None,
    target: str | None = None,
    **kw: Any,
) -> Any:
    """:func:`~specproof.properties.engine.audit.audit_engine` with its samples drawn by ``workers``
    Ray actors; the keywords go to ``audit_engine`` (progress, announce, clock)."""
    from specproof.properties.engine.audit import audit_engine

    with RayDrawer.for_spec(spec, workers, address, target) as drawer:
        return audit_engine(spec, config, drawer=drawer, **kw)
