"""Where and in what order the engine audit's sample stage draws: :class:`Drawer` (here, by the
case's own engine; a drawer of workers spreads the same seeds over replicas) and
:class:`DrawAhead` (the stage's chunks asked for ahead, so a server draws while the audit reads
laws and scores; proofs_notes/endpoint_audit.md claim 2b says why nothing else changes)."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import TYPE_CHECKING

from specproof.properties.engine.contract import Generation
from specproof.properties.engine.runner import CaseRunner, Pending, sample_seed
from specproof.reference.errors import InternalError

if TYPE_CHECKING:
    from specproof.properties.engine.audit import EngineAudit


class Drawer:
    """Where the law test's samples are drawn: here, by the case's own engine. A drawer that
    spreads them over workers (each with its own replica of the engine) must return, for the
    seeds it is given, the samples those seeds give, in the seeds' order: a sample is a function
    of its seed alone, so who drew it never changes the audit."""

    def chunk(self, runner: CaseRunner) -> int:
        """Samples to ask for at once: many for an engine that draws many at once, else one (so
        that the budget is checked between samples)."""
        if "generate_many" in runner.offers:
            return max(1, int(runner.optional("batch", 1)))
        return 1

    def draw(self, runner: CaseRunner, seeds: list[int]) -> list[Generation]:
        return runner.draw(seeds)

    def submit(self, runner: CaseRunner, seeds: list[int]) -> Pending:
        """The samples for ``seeds``, asked for now where they are drawn here by an engine that
        takes requests without waiting (``submit_many``), else drawn by :meth:`draw` when read (a
        drawer of workers draws in its own way)."""
        if type(self).draw is Drawer.draw:
            return runner.submit(seeds)
        return Pending(seeds, lambda: self.draw(runner, seeds), started=False)


#: chunks kept asked for beyond the one being scored, where they are drawn without waiting
#: (:meth:`Drawer.submit`): the server draws them while the audit reads the laws, scores the chunk
#: at hand and tests a case at its look
AHEAD = 2


class DrawAhead:
    """The sample stage's chunks in the order it takes them (look by look, case by case, index
    order within a case), asked for :data:`AHEAD` beyond the one taken. Which chunks exist is
    fixed by the plan (the seeds by their indices, the chunk size), never by timing: the order is
    the stage's own, and a chunk's samples all count unless its case stops inside it. What was
    asked for and is not taken (a case rejected, the stage stopped) is settled (:meth:`settle`):
    its answers are waited for and handed back, so that every answer the server sent is counted."""

    def __init__(self, audit: EngineAudit) -> None:
        self.audit = audit
        self.queue: collections.deque[tuple[int, int, Pending]] = collections.deque()
        self.settled: list[Generation] = []
        self._order = self._plan()

    def _plan(self) -> Iterator[tuple[int, int, Pending]]:
        """The chunks in the stage's order, made as they are asked for, skipping a case once it
        stopped (rejected) and every case once the token test crossed."""
        a = self.audit
        res = a.result
        asked = [r.n for r in res.cases]
        for look in range(a.config.looks):
            for i, (runner, r) in enumerate(zip(a.runners, res.cases)):
                if look >= len(r.schedule):
                    continue
                size = a.drawer.chunk(runner)
                while asked[i] < r.schedule[look] and not r.rejected and not res.token_rejected:
                    k = range(asked[i], min(r.schedule[look], asked[i] + size))
                    seeds = [sample_seed(a.config.seed, r.case.index, j) for j in k]
                    yield i, asked[i], a.drawer.submit(runner, seeds)
                    asked[i] += len(seeds)

    def _fill(self, depth: int) -> None:
        while len(self.queue) < depth:
            nxt = next(self._order, None)
            if nxt is None:
                return
            self.queue.append(nxt)

    def take(self, case: int, start: int) -> Pending:
        """The chunk of case ``case`` from sample ``start`` on (chunks asked for before it and no
        longer wanted are settled); the ones after it are asked for before it is read."""
        while True:
            self._fill(1)
            if not self.queue:
                raise InternalError(f"no chunk of case {case} from sample {start} in the plan")
            i, first, pending = self.queue.popleft()
            if (i, first) == (case, start):
                self._fill(AHEAD)
                return pending
            self.settled += pending.settle()

    def settle(self) -> list[Generation]:
        """The samples of every chunk asked for and not taken, waited for (:class:`Pending`)."""
        out, self.settled = self.settled, []
        while self.queue:
            out += self.queue.popleft()[2].settle()
        return out
