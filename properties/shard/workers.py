"""The workers: plain classes that :mod:`.pool` makes Ray actors. Each builds its own replica
(of an engine per sampling setting, or of a verifier) from a recipe (:mod:`.recipe`), on first
use, and answers shards of the audit's draws. A worker never raises for what an audit must
report: a replica that cannot be built, a contract violation, an engine that stopped answering
come back as tagged tuples, so the driver attributes each to its shard in index order.

Tags: ``("ok", packed, bytes)``, ``("violation", ...)`` (the engine's kind and detail, or the
verifier's kind, detail, row and traceback), ``("unavailable", detail, packed, bytes)`` (an engine
that failed after its retries, with the samples it completed), ``("build_failed", detail)``.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from typing import Any

import numpy as np
import torch

from specproof.properties.shard.recipe import BackendRecipe, EngineRecipe
from specproof.properties.shard.wire import pack_call, pack_generations, payload_bytes
from specproof.reference.errors import SpecproofError


class BuildFailed(SpecproofError):
    """A replica this worker could not build (its first failure, given again)."""


def _setup(paths: list[str], threads: int | None) -> None:
    for p in paths:  # after the worker's own entries: never shadow what it has
        if p not in sys.path and os.path.isdir(p):
            sys.path.append(p)
    if threads:
        torch.set_num_threads(threads)


def _where() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "threads": torch.get_num_threads(),
        "cpu_seconds": time.process_time(),  # the worker's CPU time so far (the benchmark reads it)
    }


def _failure(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


class EngineWorker:
    """Draws shards of an engine audit's samples on its own replica of the engine."""

    def __init__(self, recipe: EngineRecipe, paths: list[str], threads: int | None) -> None:
        _setup(paths, threads)
        self.recipe = recipe
        self.engines: dict[Any, Any] = {}
        self.failed: dict[Any, str] = {}

    def ready(self) -> dict[str, Any]:
        return _where()

    def _engine(self, sampling: Any) -> Any:
        if sampling in self.failed:
            raise BuildFailed(self.failed[sampling])
        if sampling not in self.engines:
            try:
                self.engines[sampling] = self.recipe.build(sampling)
            except Exception as e:
                self.failed[sampling] = _failure(e)
                raise
        return self.engines[sampling]

    def prepare(self, samplings: list[Any]) -> str | None:
        """Build the replicas ahead of the first shard (a warm-up); why one failed, else None."""
        for s in samplings:
            try:
                self._engine(s)
            except Exception as e:
                return _failure(e)
        return None

    def draw(self, case: Any, vocab: int, seeds: np.ndarray) -> tuple[Any, ...]:
        from specproof.properties.engine.contract import EngineUnavailable, WorkerFault
        from specproof.properties.engine.runner import CaseRunner, EngineViolation

        try:
            engine = self._engine(case.sampling)
        except WorkerFault as e:  # the engine's own worker, on this actor: a fault, not a finding
            return ("fault", f"building {self.recipe.label} for {case.sampling.label}: {e}")
        except Exception as e:
            return ("build_failed", f"building {self.recipe.label} for {case.sampling.label}: {_failure(e)}")
        runner = CaseRunner(engine, case, vocab)
        try:
            gens = runner.draw([int(s) for s in seeds])
        except WorkerFault as e:
            return ("fault", str(e))
        except EngineViolation as v:
            return ("violation", v.kind, v.detail)
        except EngineUnavailable as e:
            packed = pack_generations(e.done, vocab, case.tokens)
            return ("unavailable", e.detail, packed, payload_bytes(packed))
        packed = pack_generations(gens, vocab, case.tokens)
        return ("ok", packed, payload_bytes(packed))


class VerifierWorker:
    """Runs calls of a verifier audit's sampling stage on its own replica of the verifier."""

    def __init__(self, recipe: BackendRecipe, paths: list[str], threads: int | None) -> None:
        _setup(paths, threads)
        self.recipe = recipe
        self.backend: Any = None
        self.failed: str | None = None
        self.runners: dict[str, Any] = {}

    def ready(self) -> dict[str, Any]:
        return _where()

    def prepare(self, samplings: list[Any]) -> str | None:
        try:
            self._backend()
        except Exception as e:
            return _failure(e)
        return None

    def _backend(self) -> Any:
        if self.failed is not None:
            raise BuildFailed(self.failed)
        if self.backend is None:
            try:
                self.backend = self.recipe.build()
            except Exception as e:
                self.failed = _failure(e)
                raise
        return self.backend

    def call(self, case: Any, timeout: float | None, seed: int, k: int, rows: int) -> tuple[Any, ...]:
        from specproof.properties.audit.stages import Caller, Runner
        from specproof.properties.conformance.contracts import ContractViolation

        try:
            backend = self._backend()
        except Exception as e:
            return ("build_failed", f"loading verifier {self.recipe.label}: {_failure(e)}")
        runner = self.runners.get(case.name)
        if runner is None or runner.case != case:
            runner = self.runners[case.name] = Runner(backend, case, timeout)
        runner.timeout = timeout
        try:
            inputs, emitted, lens, comp = Caller.call(runner, seed, k, rows)
        except ContractViolation as e:
            return ("violation", e.kind, e.detail, e.row, e.traceback)
        except Exception as e:  # outside the verifier call (it is wrapped): the worker's own fault
            return ("build_failed", f"call {k} of {case.name}: {_failure(e)}\n{traceback.format_exc()}")
        packed = pack_call(inputs, emitted, lens, comp, case.vocab)
        return ("ok", packed, payload_bytes(packed))
