"""A pool of Ray actors that answers jobs in job order, whatever order they finish in.

:meth:`Pool.ordered` dispatches jobs to the actors (at most ``depth`` in flight on each, a
bounded window ahead of the consumer) and yields each job's answer in job order. An actor that
dies mid-job (killed, its node lost, out of memory) is replaced by a fresh one and every job it
held is dispatched again: a job is a function of its arguments alone (seeds, not state), so its
answer is the same, and since answers are keyed by job index nothing is counted twice or lost.
More than ``max_restarts`` replacements, no answer from any actor for ``stall_seconds``, or a
cluster that went away raise :class:`PoolFailure`; the consumer ends its audit on what it holds.

Ray is imported here only, when a pool starts (``pip install 'specproof[ray]'``).
"""

from __future__ import annotations

import os
import pickle
import time
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from specproof.reference.errors import SpecproofError, UsageError

#: object store of a local Ray instance this module starts: the answers are small arrays
LOCAL_OBJECT_STORE = 256 * 2**20


class PoolFailure(SpecproofError):
    """The pool cannot go on: workers kept dying, none answered, or the cluster went away."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def ray_module() -> Any:
    try:
        import ray
    except ImportError as e:
        raise UsageError(
            "--workers/--ray: Ray is not installed; pip install 'specproof[ray]' (or ray itself)"
        ) from e
    return ray


def connect(address: str | None, workers: int | None, cpus_per_worker: float) -> bool:
    """Join the cluster at ``address`` (``auto``, ``host:port``, ``ray://host:port``), or start a
    local one (no address) with room for the workers; True when this call started Ray."""
    ray = ray_module()
    if ray.is_initialized():
        return False
    quiet: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    try:
        if address in (None, "", "local"):
            cpus = max(os.cpu_count() or 1, int(-(-(workers or 1) * cpus_per_worker // 1)))
            ray.init(num_cpus=cpus, object_store_memory=LOCAL_OBJECT_STORE, **quiet)
        else:
            ray.init(address=address, **quiet)
    except Exception as e:
        raise UsageError(
            f"--ray {address or '(local)'}: cannot start or join Ray: {type(e).__name__}: {e}"
        ) from e
    return True


def placed(
    address: str | None, workers: int | None, cpus_per_worker: float, gpus_per_worker: float | None
) -> tuple[bool, int, float]:
    """Ray joined or started (:func:`connect`), and the actors' placement: how many (``workers``,
    else one per GPU of the cluster when it has any, else one per CPU) and the GPUs each takes
    (``gpus_per_worker``, else 1 on a cluster with GPUs, else 0). Returns (started, workers, gpus)."""
    started = connect(address, workers, cpus_per_worker)
    resources = ray_module().cluster_resources()
    if gpus_per_worker is None:
        gpus_per_worker = 1.0 if resources.get("GPU", 0) >= 1 else 0.0
    if workers is None:
        workers = int(resources.get("GPU", 0)) if gpus_per_worker else int(resources.get("CPU", 1))
    return started, max(1, workers), gpus_per_worker


@dataclass
class PoolStats:
    """What a pool did: jobs answered, the bytes of their answers, actors replaced, jobs re-run."""

    jobs: int = 0
    bytes_up: int = 0  # answers' payloads, as pickled (wire.payload_bytes)
    bytes_down: int = 0  # jobs' arguments, as pickled
    restarts: int = 0
    rerun: int = 0
    started: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "restarts": self.restarts,
            "rerun": self.rerun,
        }


class Pool:
    """``workers`` actors of class ``cls`` built with ``args`` (module docstring)."""

    def __init__(
        self,
        cls: type,
        args: tuple[Any, ...],
        workers: int,
        cpus: float = 1.0,
        gpus: float = 0.0,
        max_restarts: int | None = None,
        stall_seconds: float = 600.0,
    ) -> None:
        if not isinstance(workers, int) or workers < 1:
            raise UsageError(f"--workers: must be an integer >= 1, got {workers!r}")
        ray = ray_module()
        self.ray = ray
        self.remote = ray.remote(cls)
        self.args, self.cpus, self.gpus = args, cpus, gpus
        self.max_restarts = 2 * workers if max_restarts is None else max_restarts
        self.stall_seconds = stall_seconds
        self.stats = PoolStats()
        #: called after each round of dispatches with the pool (a test kills an actor here)
        self.on_dispatch: Callable[[Pool], None] | None = None
        try:
            self.actors = [self._new() for _ in range(workers)]
        except Exception as e:
            raise UsageError(f"--workers: cannot start {workers} Ray actors: {type(e).__name__}: {e}") from e

    def _new(self) -> Any:
        return self.remote.options(
            num_cpus=self.cpus, num_gpus=self.gpus, max_restarts=0, max_task_retries=0
        ).remote(*self.args)

    def _replace(self, slot: int, why: str) -> None:
        self.stats.restarts += 1
        if self.stats.restarts > self.max_restarts:
            raise PoolFailure(f"workers died {self.stats.restarts} times (last: {why})")
        try:
            self.actors[slot] = self._new()
        except Exception as e:
            raise PoolFailure(f"cannot start a worker in place of a dead one: {type(e).__name__}: {e}") from e

    def each(self, method: str, *args: Any) -> list[Any]:
        """``method(*args)`` on every actor, answered (a warm-up); a dead actor answers None."""
        refs = [getattr(a, method).remote(*args) for a in self.actors]
        out = []
        for ref in refs:
            try:
                out.append(self.ray.get(ref, timeout=self.stall_seconds))
            except self.ray.exceptions.RayError as e:
                out.append(f"{type(e).__name__}: {e}")
        return out

    def ordered(
        self, method: str, jobs: Sequence[tuple[Any, ...]], depth: int = 2, window: int | None = None
    ) -> Generator[Any, None, None]:
        """Each job's answer (``actor.method(*job)``), in job order (module docstring). Closing
        the iterator early cancels what is still queued."""
        ray = self.ray
        errors = ray.exceptions
        n = len(jobs)
        window = max(1, window or n)
        answers: dict[int, Any] = {}
        inflight: dict[Any, tuple[int, int, Any]] = {}  # ref -> (job, slot, actor)
        load = [0] * len(self.actors)
        retry: deque[int] = deque()
        next_job = next_out = 0
        try:
            while next_out < n:
                while True:  # dispatch: the least loaded actor, retries first, within the window
                    slot = min(range(len(self.actors)), key=lambda s: load[s])
                    if load[slot] >= depth:
                        break
                    if retry:
                        j = retry.popleft()
                    elif next_job < n and next_job < next_out + window:
                        j, next_job = next_job, next_job + 1
                    else:
                        break
                    actor = self.actors[slot]
                    try:
                        ref = getattr(actor, method).remote(*jobs[j])
                    except errors.RayError as e:
                        raise PoolFailure(f"the cluster refused a job: {type(e).__name__}: {e}") from e
                    inflight[ref] = (j, slot, actor)
                    load[slot] += 1
                    self.stats.bytes_down += len(pickle.dumps(jobs[j], protocol=5))
                if self.on_dispatch is not None:
                    self.on_dispatch(self)
                while next_out in answers:
                    yield answers.pop(next_out)
                    next_out += 1
                if next_out >= n:
                    break
                if not inflight:
                    continue
                t0 = time.monotonic()
                try:
                    ready, _ = ray.wait(list(inflight), num_returns=1, timeout=self.stall_seconds)
                except errors.RayError as e:
                    raise PoolFailure(f"the cluster went away: {type(e).__name__}: {e}") from e
                if not ready:
                    raise PoolFailure(
                        f"no worker answered for {time.monotonic() - t0:.0f} s ({len(inflight)} jobs in "
                        "flight): the cluster is gone or has no room for the workers"
                    )
                for ref in ready:
                    j, slot, actor = inflight.pop(ref)
                    load[slot] -= 1
                    try:
                        answer = ray.get(ref)
                    except (errors.RayActorError, errors.WorkerCrashedError) as e:
                        if self.actors[slot] is actor:  # the first of its jobs to fail replaces it
                            self._replace(slot, f"{type(e).__name__}")
                        retry.append(j)
                        self.stats.rerun += 1
                        continue
                    except errors.RayTaskError as e:  # the worker's code raised (not an audit finding)
                        answer = ("build_failed", f"a worker raised {type(e.cause).__name__}: {e.cause}")
                    except errors.RayError as e:
                        raise PoolFailure(f"the cluster went away: {type(e).__name__}: {e}") from e
                    answers[j] = answer
                    self.stats.jobs += 1
                    if isinstance(answer, tuple) and answer and answer[0] in ("ok", "unavailable"):
                        self.stats.bytes_up += int(answer[-1])
        finally:
            for ref in inflight:
                try:
                    ray.cancel(ref)
                except Exception:  # already done, or the cluster is gone
                    pass

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.kill(a)
            except Exception:
                pass
        self.actors = []


class PoolClient:
    """What a driver-side user of a :class:`Pool` (a drawer, a caller) shares: it stops the
    actors on :meth:`close` or on leaving a ``with`` block. Ray itself, when this process started
    it, stays up for the next audit of the process (an engine group) and stops when it exits."""

    pool: Pool

    def start(
        self,
        actor: Any,
        recipe: Any,
        paths: Any,
        workers: int | None,
        address: str | None,
        cpus_per_worker: float = 1.0,
        gpus_per_worker: float | None = None,
        threads: int | None = 1,
        max_restarts: int | None = None,
        stall_seconds: float = 600.0,
    ) -> None:
        """Join or start Ray, place the actors (:func:`placed`) and start the pool of ``actor``s,
        each built from ``(recipe, paths, threads)``."""
        self.recipe = recipe
        self.started_ray, self.workers, gpus = placed(address, workers, cpus_per_worker, gpus_per_worker)
        self.pool = Pool(
            actor, (recipe, paths, threads), self.workers, cpus_per_worker, gpus, max_restarts, stall_seconds
        )

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
