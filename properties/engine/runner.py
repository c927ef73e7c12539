"""One case of an engine audit, run: the engine for its setting, its law read and checked
(memoized), its calls validated, and the contract stage's checks of seed use.

:class:`CaseRunner` is what every stage of :class:`~specproof.properties.engine.audit.EngineAudit`
asks for samples and laws; it reads what the engine offers beyond the two calls through the
engine's checked capabilities (:mod:`.capabilities`), never by looking names up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from specproof.properties.engine.capabilities import (
    CAPABILITIES,
    CapabilityError,
    Offered,
    capabilities_of,
    takes_prompt_len,
)
from specproof.properties.engine.case import EngineCase
from specproof.properties.engine.contract import (
    Engine,
    EngineUnavailable,
    Generation,
    NotStreamed,
    Seq,
    WorkerFault,
)
from specproof.properties.engine.endings import Endings
from specproof.properties.tokens.streams import seed_state
from specproof.reference.errors import AmbiguousLawError, SpecproofError, UsageError
from specproof.reference.memo import Memo


def sample_seed(*parts: int) -> int:
    """The seed of one call, a function of ``parts`` alone (the audit's seed, the case, the index)."""
    # numpy's SeedSequence(parts).generate_state(1, uint64), to the bit, without its per-call cost
    return int(seed_state([abs(int(x)) for x in parts])[0] >> np.uint64(2))


def _ambiguous(e: AmbiguousLawError, case: Any) -> UsageError:
    """The usage error an engine's law that is not pinned down in float32 is: the audit's own
    reading of the setting, not a fault of the engine (reference/sampling.py: ``Sampling.law``)."""
    return UsageError(
        f"{e.argument}: {case.name}: the law at some context of this setting is not pinned down in "
        f"float32 ({e.problem}), so no engine can be held to one law there; audit the setting at a "
        "fixed size that misses such contexts (--samples), or at another value"
    )


class EngineViolation(SpecproofError):
    """A contract violation of the engine under audit (ends the audit ``contract_violation``)."""

    def __init__(self, kind: str, detail: str, case: EngineCase) -> None:
        super().__init__(detail)
        self.kind, self.detail, self.case = kind, detail, case


class Pending:
    """Samples asked for and not read yet (:meth:`CaseRunner.submit`): drawn when read, or already
    being drawn (``started``: an engine that takes requests without waiting, ``submit_many``)."""

    def __init__(self, seeds: list[int], read: Callable[[], list[Generation]], started: bool) -> None:
        self.seeds, self._read, self.started = seeds, read, started

    def result(self) -> list[Generation]:
        """The samples for the seeds, in order, checked as :meth:`CaseRunner.draw`'s are."""
        return self._read()

    def settle(self) -> list[Generation]:
        """What a chunk asked for ahead and never used brought back: its answers waited for, so that
        every answer the server sent is counted (the metrics check); nothing for one never started,
        and what came before a fault for one that failed."""
        if not self.started:
            return []
        try:
            return self._read()
        except EngineUnavailable as e:
            return list(e.done)
        except EngineViolation:
            return []


#: laws after prefixes of at most this many generated tokens are memoized (the cells test reads
#: them at every look); deeper ones, which samples rarely share, are read per group and let go
MEMO_DEPTH = 12
#: bytes of memoized laws kept: past it, the law read longest ago is let go (read again if needed)
MEMO_BYTES = 64 * 2**20
#: bytes of laws read at once for a group of samples (the samples in flight): a chunk of samples
#: is read and scored in groups of at most this many bytes of laws, so memory never grows with it
GROUP_BYTES = 128 * 2**20


class LawMemo(Memo[Seq, np.ndarray]):
    """Laws after shallow prefixes, as read-only arrays, kept while they fit in ``budget`` bytes
    (its ``limit``): past it the law used longest ago is let go first (and read again if asked
    for). The reference models' bounded memo, weighed in bytes."""

    def __init__(self, budget: int = MEMO_BYTES) -> None:
        super().__init__(budget, weigh=lambda row: row.nbytes)


def as_rows(rows: object) -> np.ndarray:
    """An engine's laws as a float array without a copy where they already are one (a torch
    tensor's memory is shared); a list of numbers becomes float64."""
    if isinstance(rows, torch.Tensor):
        rows = rows.detach().cpu().numpy()
    arr = np.asarray(rows)
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    return arr


class CaseRunner:
    """One case: the engine for its setting, the memoized law, validated calls."""

    def __init__(self, engine: Engine, case: EngineCase, vocab: int, offered: Offered | None = None) -> None:
        self.engine, self.case, self.vocab = engine, case, vocab
        self.memo = LawMemo()
        self._chunk: dict[Seq, np.ndarray] = {}  # deeper laws read for the group at hand
        self._ended: dict[int, np.ndarray] = {}  # the one-hot law after an ending token
        try:
            self.offers = offered or capabilities_of(engine)
        except CapabilityError as e:
            raise EngineViolation("capabilities", str(e), case) from e
        #: the end-of-sequence id: a sample may end early on it, and after it the law is one-hot at
        #: it (end of sequence is absorbing; samples are padded with it to M tokens). The engine's
        #: own, else the one its request names; the two must agree
        own = engine.eos_id if "eos" in self.offers else None  # type: ignore[attr-defined]
        asked = case.sampling.eos
        if own is not None and asked is not None and own != asked:
            raise EngineViolation(
                "eos", f"the engine ends samples on id {own}, its request names eos {asked}", case
            )
        self.eos: int | None = own if own is not None else asked
        #: where a sample's output ends (its eos, a stop string: Sampling.end), else None
        ender = case.sampling if self.eos == asked else dataclasses.replace(case.sampling, eos=self.eos)
        self._ender = ender if ender.ends else None
        self._endings: Endings | None = None
        self._with_prompt = "prompt_len" in self.offers

    def optional(self, capability: str, default: Any = None) -> Any:
        """What the engine offers as ``capability`` (its first attribute), or ``default``."""
        if capability not in self.offers:
            return default
        for attr in CAPABILITIES[capability].attrs:
            value = getattr(self.engine, attr, None)
            if value is not None:
                return value
        return default

    @property
    def ends(self) -> bool:
        """Whether a sample may end before M tokens (an end of sequence or a stop string)."""
        return self._ender is not None

    def end(self, seq: Seq) -> int | None:
        """How many tokens of ``seq`` the output keeps when it ended inside it (an eos, a stop
        string; reference/sampling.py), else None."""
        return None if self._ender is None else self._ender.end(seq)

    @contextlib.contextmanager
    def reading(self, what: str) -> Iterator[None]:
        """Around a call of the engine's ``what`` that reads laws: what it raises is the contract
        violation it is (``exception``), except the audit's own faults and the user's (passed
        on) and a law whose cut cannot be pinned down (a usage error naming the case)."""
        try:
            yield
        except (EngineViolation, EngineUnavailable, WorkerFault, UsageError):
            raise
        except AmbiguousLawError as e:
            raise _ambiguous(e, self.case) from e
        except Exception as e:
            raise EngineViolation("exception", f"{what} raised {type(e).__name__}: {e}", self.case) from e

    def law(self, prefix: Seq) -> np.ndarray:
        """The target's next-token law after the prompt and ``prefix`` (a read-only array of V
        probabilities summing to 1), checked and memoized; one-hot at the ending token once
        ``prefix`` has ended (the end is absorbing)."""
        k = self.end(prefix)
        if k is not None:
            return self._one_hot(prefix[k - 1])
        row = self._chunk.get(prefix)
        if row is None:
            row = self.memo.peek(prefix)
        if row is not None:
            return row
        context = list(self.case.prompt + prefix)
        with self.reading("target_law"):
            if self._with_prompt:  # optional keyword: parameters whose law needs the prompt
                law_of: Any = self.engine.target_law
                got = law_of(context, prompt_len=len(self.case.prompt))
            else:
                got = self.engine.target_law(context)
        row = self._checked_law(got, context)
        self._keep(prefix, row)
        return row

    def reads_along(self) -> bool:
        """Whether the laws along a sample come by another path than the law at one prefix:
        the engine's ``target_laws_along`` (teacher forcing in one forward), or a server's read of
        a whole path in one request (``reads_along()`` of an endpoint's engine)."""
        if "teacher_forcing" in self.offers:
            return True
        along = getattr(self.engine, "reads_along", None)
        return bool(callable(along) and along())

    @property
    def along_names(self) -> tuple[str, str]:
        """How a finding names the two reads of one law: (along a path, at the prefix alone)."""
        if "teacher_forcing" in self.offers:
            return "target_laws_along", "target_law"
        return "the law read along the path in one request", "the one-token recipe's law"

    def law_alone(self, prefix: Seq) -> np.ndarray:
        """The law after the prompt and ``prefix`` read at that prefix alone: ``target_law``
        (memoized), or, for an engine whose ``target_law`` may itself read along a path (a
        server's), its ``law_alone`` (the one-token recipe, read afresh, never memoized)."""
        alone = getattr(self.engine, "law_alone", None)
        if not callable(alone) or self.end(prefix) is not None:
            return self.law(prefix)
        context = list(self.case.prompt + prefix)
        with self.reading("law_alone"):
            got = alone(context, prompt_len=len(self.case.prompt)) if self._with_prompt else alone(context)
        return self._checked_law(got, context)

    def _keep(self, prefix: Seq, row: np.ndarray) -> None:
        if len(prefix) > MEMO_DEPTH:
            self._chunk[prefix] = row
        else:
            self.memo.put(prefix, row)

    def _one_hot(self, token: int) -> np.ndarray:
        row = self._ended.get(token)
        if row is None:
            row = np.zeros(self.vocab)
            row[token] = 1.0
            row.flags.writeable = False
            self._ended[token] = row
        return row

    def end_chunk(self) -> None:
        """Let go of the deep laws read for a group of samples (they are scored)."""
        self._chunk.clear()

    @property
    def stops(self) -> bool:
        """Whether the setting has stop strings (the stopping event is then read id by id at each
        position: :meth:`endings`)."""
        return self._ender is not None and bool(self._ender.stop)

    def endings(self, seq: Seq) -> list[np.ndarray] | None:
        """For each observed position of ``seq``, the ids that end the output there (a stop string
        completed, or the end of sequence); None where the setting has no stop strings (the end
        of sequence alone is read by its id)."""
        if self._ender is None or not self._ender.stop:
            return None
        if self._endings is None:
            self._endings = Endings(self._ender)
        return self._endings.after_output(seq[: self.horizon(seq)])

    def horizon(self, seq: Seq) -> int:
        """How many of ``seq``'s tokens are observations: up to and including the token that
        ended it (the padding after it carries nothing)."""
        k = self.end(seq)
        return len(seq) if k is None else k

    def laws_along(self, seq: Seq, checked: bool = True) -> np.ndarray:
        """The target's law at each observed token's own prefix (teacher forcing), ``[m, V]``:
        in one call where the engine offers it (``target_laws_along``), else one law a prefix.
        ``checked=False``: only the shape is checked and the rows are left as the engine gave them
        (not copied, not normalized), for a caller that checks each row as it reads it (the token
        test's scoring: :meth:`not_a_law` words what it finds)."""
        m = self.horizon(seq)
        along = self.optional("teacher_forcing")
        if along is None:
            out = np.empty((m, self.vocab))
            for d in range(m):
                out[d] = self.law(seq[:d])
            return out
        with self.reading("target_laws_along"):
            if takes_prompt_len(along):
                rows = along(list(self.case.prompt), list(seq[:m]), prompt_len=len(self.case.prompt))
            else:
                rows = along(list(self.case.prompt), list(seq[:m]))
        return self._checked_laws(rows, m, "target_laws_along", seq, checked)

    def draft_laws_along(self, seq: Seq, checked: bool = True) -> np.ndarray | None:
        """The draft's law at each observed token's prefix, where the engine tells it
        (``checked`` as for :meth:`laws_along`)."""
        draft = self.optional("draft_law")
        if draft is None:
            return None
        m = self.horizon(seq)
        along = getattr(self.engine, "draft_laws_along", None)  # all at once, where offered
        what = self.draft_source
        with self.reading(what):
            if callable(along):
                rows = along(list(self.case.prompt), list(seq[:m]))
            else:
                rows = [as_rows(draft(list(self.case.prompt + seq[:d]))) for d in range(m)]
        return self._checked_laws(rows, m, what, seq, checked)

    @property
    def draft_source(self) -> str:
        """The method the draft's laws along a sample come from."""
        return "draft_laws_along" if callable(getattr(self.engine, "draft_laws_along", None)) else "draft_law"

    def _checked_laws(self, rows: object, m: int, what: str, seq: Seq, checked: bool = True) -> np.ndarray:
        """``m`` laws of V entries each, as one array, or the contract violation they are; with
        ``checked`` each row is checked to be a law and the rows are normalized (a copy)."""
        try:
            arr = as_rows(rows)
        except (TypeError, ValueError, RuntimeError) as e:
            raise EngineViolation(what, f"{what} after {list(seq)}: not numbers", self.case) from e
        if arr.shape != (m, self.vocab):
            raise EngineViolation(
                what, f"{what} after {list(seq)}: shape {arr.shape}, expected ({m}, {self.vocab})", self.case
            )
        if not checked:
            return arr
        arr = arr.astype(np.float64, copy=False)
        sums, least = arr.sum(axis=1), arr.min(axis=1)
        bad = np.flatnonzero(~((np.abs(sums - 1) <= 1e-6) & (least >= 0)))
        if len(bad):
            d = int(bad[0])
            raise self.not_a_law(what, seq, d, float(sums[d]))
        return arr / sums[:, None]

    def not_a_law(self, what: str, seq: Seq, d: int, total: float) -> EngineViolation:
        """The contract violation of a law along ``seq`` (from ``what``) whose row ``d`` is not a
        law (its sum ``total``: NaN or infinite where an entry is)."""
        return EngineViolation(
            what,
            f"{what}: the law after {list(self.case.prompt + seq[:d])} is not a law (sum {total:.9g})",
            self.case,
        )

    def prefetch(self, seqs: list[Seq]) -> None:
        """Read at once the laws after every proper prefix of ``seqs`` not read yet, where the
        engine reads many at once (``target_laws``: a server answers them concurrently)."""
        many = self.optional("target_laws")
        if many is None:
            return
        need = sorted(
            {
                p
                for s in seqs
                for p in (s[:d] for d in range(self.horizon(s)))
                if p not in self.memo and p not in self._chunk
            }
        )
        if self._ender is not None:
            need = [p for p in need if self.end(p) is None]  # after the end the law is known
        if not need:
            return
        with self.reading("target_laws"):
            contexts = [list(self.case.prompt + p) for p in need]
            if takes_prompt_len(many):  # its own keyword (a family's laws need the prompt's end)
                rows = many(contexts, prompt_len=len(self.case.prompt))
            else:
                rows = many(contexts)
        for p, row in zip(need, rows):
            self._keep(p, self._checked_law(row, list(self.case.prompt + p)))

    def _checked_law(self, row: object, context: list[int]) -> np.ndarray:
        """One law as a read-only float64 array normalized to sum 1, or the contract violation it
        is (not numbers, not V of them, a negative or non-finite entry, a sum off 1 by > 1e-6)."""
        try:
            arr = as_rows(row).astype(np.float64, copy=False)
        except (TypeError, ValueError, RuntimeError) as e:
            raise EngineViolation("target_law", f"target_law after {context}: not numbers", self.case) from e
        where = f"target_law after {context}"
        if arr.shape != (self.vocab,):
            got = f"{arr.shape[0]} entries" if arr.ndim == 1 else f"shape {arr.shape}"
            raise EngineViolation("target_law", f"{where}: {got}, expected V = {self.vocab}", self.case)
        total, least = float(arr.sum()), float(arr.min())
        if not (abs(total - 1) <= 1e-6 and least >= 0):
            raise EngineViolation(
                "target_law", f"{where}: not a law (sum {total:.9g}, min {least:.3g})", self.case
            )
        out = arr / total
        out.flags.writeable = False
        return out

    def generate(self, seed: int) -> Seq:
        """One sample of M tokens, checked against the contract."""
        try:
            out = self.engine.generate(list(self.case.prompt), self.case.tokens, seed)
        except (EngineUnavailable, WorkerFault):
            raise
        except Exception as e:
            raise EngineViolation("exception", f"generate raised {type(e).__name__}: {e}", self.case) from e
        return self.check_tokens(out, seed)

    def draw(self, seeds: list[int], report: bool = False) -> list[Generation]:
        """Samples for ``seeds`` in order, with what the engine said about each: through its
        ``generate_many`` when it has one (many at once), else one ``generate`` at a time."""
        many = self.optional("generate_many")
        if many is None:
            out = []
            for s in seeds:
                seq = self.generate(s)
                counters = self.optional("counters") or {}
                out.append(
                    Generation(
                        seq,
                        counters.get("drafted"),
                        counters.get("accepted"),
                        self.forwards(),
                        None,
                        self.steps(),
                    )
                )
            return out
        try:
            gens = self._many(many, "generate_many", seeds, report)
        except EngineUnavailable as e:
            e.done = [self._checked(g, s) for g, s in zip(e.done, seeds)]
            raise
        return [self._checked(g, s) for g, s in zip(gens, seeds)]

    def submit(self, seeds: list[int]) -> Pending:
        """The samples for ``seeds``, asked for now where the engine takes requests without waiting
        (``submit_many``: the requests go out at once), else drawn by :meth:`draw` when read."""
        fn = self.optional("submit")
        if fn is None:
            return Pending(seeds, lambda: self.draw(seeds), started=False)
        try:
            handle = fn(list(self.case.prompt), self.case.tokens, seeds)
        except (EngineUnavailable, EngineViolation, WorkerFault):
            raise
        except Exception as e:
            raise EngineViolation(
                "exception", f"submit_many raised {type(e).__name__}: {e}", self.case
            ) from e

        def read() -> list[Generation]:
            try:
                gens = self._many(lambda *a, **k: handle.result(), "submit_many", seeds, False)
            except EngineUnavailable as e:
                e.done = [self._checked(g, s) for g, s in zip(e.done, seeds)]
                raise
            return [self._checked(g, s) for g, s in zip(gens, seeds)]

        return Pending(seeds, read, started=True)

    def draw_stream(self, seeds: list[int], report: bool = False) -> list[Generation]:
        """The samples for ``seeds`` with their answers streamed (``generate_stream``), padded as
        :meth:`draw`'s are but not refused (the streaming check compares them with the whole ones)."""
        return [
            self._padded(g) for g in self._many(self.optional("stream"), "generate_stream", seeds, report)
        ]

    def _many(self, fn: Any, name: str, seeds: list[int], report: bool) -> list[Generation]:
        """``fn(prompt, M, seeds, report=...)``'s samples, one a seed, or the violation it is."""
        try:
            gens = list(fn(list(self.case.prompt), self.case.tokens, seeds, report=report))
        except (EngineUnavailable, EngineViolation, NotStreamed, WorkerFault):
            raise
        except Exception as e:
            raise EngineViolation("exception", f"{name} raised {type(e).__name__}: {e}", self.case) from e
        if len(gens) != len(seeds):
            raise EngineViolation(
                "length", f"{name} returned {len(gens)} samples for {len(seeds)} seeds", self.case
            )
        return gens

    def _padded(self, g: Generation) -> Generation:
        """A streamed sample as :meth:`check_tokens` would pad it (ended early on the end of
        sequence), but never refused: what differs from the whole answer is the finding."""
        seq = tuple(int(x) for x in g.tokens)
        M = self.case.tokens
        if len(seq) < M and seq and self.end(seq) == len(seq):
            seq = seq + (seq[-1],) * (M - len(seq))
        return dataclasses.replace(g, tokens=seq)

    def _checked(self, g: Generation, seed: int) -> Generation:
        seq = self.check_tokens(g.tokens, seed)
        return g if seq == g.tokens else dataclasses.replace(g, tokens=seq)

    def check_tokens(self, out: object, seed: int) -> Seq:
        """``out`` as M token ids in ``[0, V)``, or the contract violation it is."""
        M = self.case.tokens
        if isinstance(out, torch.Tensor):
            out = out.reshape(-1).tolist()
        try:
            seq = tuple(int(x) for x in out)  # type: ignore[attr-defined]
            if any(int(x) != x for x in out):  # type: ignore[attr-defined]
                raise ValueError
        except (TypeError, ValueError) as e:
            raise EngineViolation(
                "type", f"generate returned {out!r}, not a list of token ids", self.case
            ) from e
        bad = [x for x in seq if not 0 <= x < self.vocab]
        if bad:
            raise EngineViolation(
                "out_of_range", f"seed {seed}: id {bad[0]} outside [0, {self.vocab}): {list(seq)}", self.case
            )
        k = self.end(seq)
        if k is not None and k < len(seq):
            if seq[k - 1] == self.eos:
                kind, what = "after_eos", f"end of sequence {self.eos}"
            else:
                hit = self.case.sampling.stopped_by(seq)
                kind, what = (
                    "after_stop",
                    f"the stop string {hit!r}, completed by token {k} (id {seq[k - 1]})",
                )
            raise EngineViolation(
                kind, f"seed {seed}: {len(seq) - k} token(s) after {what}: {list(seq)}", self.case
            )
        if len(seq) < M and seq and k == len(seq):
            seq = seq + (seq[-1],) * (M - len(seq))  # ended early: padded, the end being absorbing
        if len(seq) != M:
            raise EngineViolation(
                "length", f"seed {seed}: {len(seq)} tokens returned, {M} asked: {list(seq)}", self.case
            )
        return seq

    def steps(self) -> tuple[int, ...] | None:
        """Tokens emitted by each target step of the last call, where the engine says
        (``last_steps``)."""
        steps = getattr(self.engine, "last_steps", None) if "steps" in self.offers else None
        return None if not steps else tuple(int(x) for x in steps)

    def forwards(self) -> int | None:
        """Target forwards of the last call, where the engine counts them (``last_steps`` or
        ``last_forwards``)."""
        if "steps" not in self.offers:
            return None
        steps = getattr(self.engine, "last_steps", None)
        if steps:
            return len(steps)
        n = getattr(self.engine, "last_forwards", None)
        return int(n) if isinstance(n, int) else None

    def probability(self, seq: Seq) -> tuple[float, int | None]:
        """P(seq) under the law, and the first position (1-based) with probability 0."""
        p = 1.0
        for d, x in enumerate(seq):
            q = float(self.law(seq[:d])[x])
            if q <= 0:
                return 0.0, d + 1
            p *= q
        return p, None

    def point_mass(self) -> bool:
        """Whether the M-token law is a single sequence (greedy decoding)."""
        node: Seq = ()
        while len(node) < self.case.tokens:
            nz = np.flatnonzero(self.law(node) > 0)
            if len(nz) != 1:
                return False
            node += (int(nz[0]),)
        return True


def argmax_path(runner: CaseRunner, tokens: int) -> Seq:
    """The law's greedy sequence of ``tokens`` tokens (ties to the smallest id)."""
    out: list[int] = []
    for _ in range(tokens):
        out.append(int(np.argmax(runner.law(tuple(out)))))  # the first of equal maxima
    return tuple(out)


def check_seed_use(runner: CaseRunner, seed: int, clock: Callable[[], float]) -> list[float]:
    """Determinism and seed use on one case (module docstring, stage 1); returns call times."""
    times, outs = [], []
    for s in (seed, seed + 1, seed):
        t0 = clock()
        outs.append(runner.generate(sample_seed(s, 7)))
        times.append(clock() - t0)
    if outs[0] != outs[2]:
        raise EngineViolation(
            "nondeterministic",
            f"two calls with the same seed (another call in between) returned {list(outs[0])} "
            f"and {list(outs[2])}",
            runner.case,
        )
    again = runner.generate(sample_seed(seed, 7))
    if again != outs[0]:
        raise EngineViolation(
            "nondeterministic",
            f"two consecutive calls with the same seed returned {list(outs[2])} and {list(again)}",
            runner.case,
        )
    p, _ = runner.probability(outs[0])
    if 0 < p < 0.5:
        k = math.ceil(math.log(1e-9) / math.log(p))
        if all(runner.generate(sample_seed(seed, 8, j)) == outs[0] for j in range(k)):
            lead = ""
            if outs[0] == argmax_path(runner, len(outs[0])):
                lead = "sampling replaced by greedy decoding: every seed returned the law's argmax path. "
            raise EngineViolation(
                "ignores_seed",
                f"{lead}{k + 1} different seeds all returned {list(outs[0])}, a sequence of probability "
                f"{p:.3g} under the law (all equal by chance: below {p**k:.1e})",
                runner.case,
            )
    return times
