"""The engine audit: is a whole speculative generate loop lossless, end to end?

``audit_engine(spec, config)`` tests an engine (:mod:`.contract`: ``generate(prompt_ids,
max_new_tokens, seed)`` and ``target_law(context)``) against the law it must reproduce: the
first M new tokens of a lossless engine are a sample of the target's own M-token law, whose
next-token laws ``target_law`` gives. The law is read lazily, only at the prefixes the test needs,
so ``V^M`` is never enumerated. Cases are (prompt, sampling setting) pairs. :class:`EngineAudit`
runs the stages in order:

1. **contract** — build the engine per setting. Every output must be exactly M ids in
   ``[0, V)``; every law V non-negative numbers summing to 1 (within 1e-6). On the case whose
   first token is most random: equal seeds give equal tokens, also with another call in between
   (state that outlives a call); and when the law is not close to a point mass, further seeds
   must not all reproduce the first output (a probability below 1e-9 under the law:
   ``ignores_seed``). An exception on valid input is a violation too. Any violation ends the
   audit: ``contract_violation``.
2. **plan** — each case gets ``n`` samples from ``alpha``, ``tv``, ``power`` and the cells alone
   (never from the clock): the smallest ``n`` whose chi-square test on ``max_cells`` cells at
   the per-look level has the power against every law at TV ``tv`` on the cells
   (:func:`.stats.plan_samples`); a point-mass law (greedy decoding) needs ``n`` with ``(1 -
   tv)^n <= 1 - power``, since any deviation there is a hard failure. The plan and its estimated
   time (from the contract stage's calls) are announced before any sampling.
3. **sample** — cases are sampled round-robin in ``looks`` stages (at n/8, n/4, n/2, n for four
   looks); sample ``i`` of case ``c`` is drawn with a seed derived from (seed, c, i) alone.
   After each stage every case is tested with :func:`.sequences.check_sequences` (cells of the
   joint law and per-position conditional tests, Bonferroni) at ``alpha / (cases x looks)``. A
   case below that level stops the audit: ``lossy`` (group-sequential with Bonferroni over the
   looks, so stopping early costs no validity). A sample the law cannot emit stops it at once
   (p = 0, the sample is the witness). The budget (:class:`~specproof.properties.plan.Budget`,
   a guard with an injectable clock) ends sampling at a sample boundary.
4. **verdict** — each case's p-value is ``looks x`` its smallest look p-value; Holm over the
   cases at ``alpha``: ``lossy`` if any is rejected; otherwise ``pass`` when every case ran its
   plan and ``underpowered`` when the budget stopped some case short; the result lists them and
   the TV each can vouch for. Ctrl-C ends the audit ``interrupted`` with what ran.

Beside the law tests, the workload axes (the same cases at several places: alone and loaded, cold
and warm, one completion a request and several) and the side checks (speculation, acceptance, the
server's metrics, reported probabilities, streaming, the axes' own checks) are plug-ins
(:mod:`.plugins`): this module runs them at their hooks and names none of them.

Statistics and calibration: proofs_notes/engine_audit.md (measured false-alarm rate of this
procedure at alpha 0.01 over 300 seeded audits of exact engines, and its power on the mutants).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from specproof.properties.audit import stats
from specproof.properties.audit.sequences import check_sequences
from specproof.properties.engine import axes as axes_
from specproof.properties.engine import planning, plugins, probe
from specproof.properties.engine.case import EngineCase, EngineCaseResult
from specproof.properties.engine.config import MAX_HORIZON, MAX_TOKENS, EngineAuditConfig
from specproof.properties.engine.contract import (
    Engine,
    EngineSpec,
    EngineUnavailable,
    Generation,
    Sampling,
    Seq,
    WorkerFault,
)
from specproof.properties.engine.contract_checks import check_applied, check_room
from specproof.properties.engine.drawing import DrawAhead, Drawer
from specproof.properties.engine.planning import EXTEND, look_schedule
from specproof.properties.engine.plugin import Finding
from specproof.properties.engine.results import EngineAuditResult
from specproof.properties.engine.runner import (
    GROUP_BYTES,
    CaseRunner,
    EngineViolation,
    Pending,
    check_seed_use,
    sample_seed,
)
from specproof.properties.engine.token_stage import TokenStage
from specproof.properties.plan import Budget
from specproof.properties.verdicts import Verdict, most_severe
from specproof.reference.errors import UsageError

__all__ = [
    "ENGINE_PACKAGES",
    "EngineAudit",
    "EngineAuditConfig",
    "audit_engine",
    "look_schedule",
    "sample_seed",
]

#: the packages whose versions an engine audit's JSON records
ENGINE_PACKAGES = ("specproof", "torch", "transformers", "vllm", "sglang")


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside the block (left alone for None), restored after."""
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


ProgressFn = Callable[[str, float], None]


class EngineAudit:
    """One engine audit, stage by stage (module docstring); holds the state the stages share."""

    def __init__(
        self,
        spec: EngineSpec,
        config: EngineAuditConfig | None = None,
        progress: ProgressFn | None = None,
        announce: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        drawer: Drawer | None = None,
    ) -> None:
        self.config = config = config or EngineAuditConfig()
        self.drawer = drawer or Drawer()
        config.validate()
        self.cells_on, self.tokens_on = config.tests(spec.tokens)
        top = MAX_TOKENS if self.cells_on else MAX_HORIZON
        if not 1 <= spec.tokens <= top:
            why = (
                " (the cells test of the joint law: --test tokens takes longer horizons)"
                if self.cells_on
                else ""
            )
            raise UsageError(f"tokens: M must lie in [1, {top}]{why}, got {spec.tokens}")
        self.spec = spec
        self.say = progress or (lambda what, frac: None)
        self.announce = announce
        self.clock = clock
        self.budget = Budget(config.budget_seconds, clock)
        #: the workload axes the spec asks for, each with its values (:mod:`.plugins`)
        self.axes = axes_.asked(spec, plugins.AXES)
        self.cases = axes_.cases(spec, self.axes)
        for s in spec.samplings:
            s.check_vocab(spec.vocab)  # ids a request names (logit bias, bad words, eos) exist
        #: the side checks (:mod:`.plugins`), fresh for this audit
        self.checks = plugins.checks()
        self.variants = axes_.Variants(spec.name, self.axes)
        self.tokens: TokenStage | None = None
        self.planned_tokens = 0
        self.result = EngineAuditResult(
            engine=spec.name,
            group=spec.group,
            doc=spec.doc,
            config=config,
            tokens=spec.tokens,
            vocab=spec.vocab,
            expected=spec.expect,
        )
        self._share_alpha()
        self.runners: list[CaseRunner] = []
        self.per_sample = 0.0  # seconds, estimated by the probe (only for the plan's estimate)
        self.stage = "contract"  # the stage running (named in a violation)
        self.probe_chunk = 1  # samples drawn at once when the time per sample was probed
        self.fit = ""  # where the plan does not fit the budget: what would (said in the plan)
        self.out_of_time = False

    # -- what the plug-ins read ----------------------------------------------------------------

    def values(self, axis: str) -> tuple[Any, ...]:
        """The values asked on ``axis`` (empty: not asked)."""
        return next((values for a, values in self.axes if a.name == axis), ())

    def single(self, case: EngineCase) -> bool:
        """Whether a request of ``case`` gives one sample of its seed (every axis says so)."""
        return all(a.single(case.at(a.name)) for a, _ in self.axes)

    def plain(self, case: EngineCase) -> bool:
        """Whether ``case`` sits at every axis's plain place (where seed use is checked)."""
        return all(a.base(case.at(a.name), values) for a, values in self.axes)

    def groups(self, gens: list[Generation]) -> list[list[Generation]]:
        """A chunk's samples in groups whose laws take at most :data:`.runner.GROUP_BYTES` (at
        least one sample a group): what is held at once never grows with the chunk."""
        per = max(1, GROUP_BYTES // (8 * self.spec.vocab * max(1, self.spec.tokens)))
        return [gens[i : i + per] for i in range(0, len(gens), per)]

    # -- the stages ----------------------------------------------------------------------------

    def run(self) -> EngineAuditResult:
        res = self.result
        with torch_threads(self.config.threads):
            try:
                steps = (
                    ("contract", self.contract),
                    ("plan", self.plan),
                    ("sample", self.sample),
                    ("checks", self.run_checks),
                    ("verdict", self.verdict),
                )
                for name, step in steps:
                    self.stage = name
                    step()
            except EngineViolation as v:
                res.violation = {"kind": v.kind, "detail": v.detail, "case": v.case.name, "stage": self.stage}
                if self._law_rejected():
                    # a deviation found first is the verdict; the later fault is stated beside it
                    self.verdict()
                else:
                    res.verdict = Verdict.CONTRACT_VIOLATION
            except EngineUnavailable as e:
                res.fault = e.detail
                self.verdict()
            except probe.NotSpeculating as n:
                res.early = n.text()
                res.verdict = Verdict.NO_SPECULATION
            except WorkerFault as e:
                # the audit's own side failed, not the engine: stated, and never the declared verdict
                res.worker_fault = f"{type(e).__name__} in the {self.stage} stage: {e}"
                res.verdict = Verdict.ERROR
            except KeyboardInterrupt:
                res.verdict = Verdict.INTERRUPTED
        drawn = sum(r.seconds for r in res.cases)
        res.per_sample_seconds = drawn / res.samples if res.samples else None
        describe = self.runners[0].optional("describe") if self.runners else None
        if callable(describe):
            res.description = dict(describe())  # after every stage, so its counts are the audit's
        res.seconds = self.budget.elapsed()
        return res

    def contract(self) -> None:
        """Build the engine per setting (at each case's place on the axes); the checks start;
        seed use and determinism on the most random plain case; the probe; each case's plan."""
        engines: dict[Sampling, Engine] = {}
        for case in self.cases:
            if case.sampling not in engines:
                self.say(f"building {case.sampling.label}", 0.0)
                try:
                    engines[case.sampling] = self.spec.build(case.sampling)
                except (UsageError, EngineUnavailable, WorkerFault):
                    raise
                except Exception as e:
                    raise EngineViolation(
                        "exception", f"building the engine raised {type(e).__name__}: {e}", case
                    ) from e
            self.runners.append(
                CaseRunner(self.variants.at(engines[case.sampling], case), case, self.spec.vocab)
            )
        for rn in self.runners:
            check_applied(rn, engines, self.spec.build, self.result.notes)
            check_room(rn, self.result.notes)
            if rn.case.sampling.output_scoped and not rn._with_prompt:
                self.result.notes.append(
                    f"{rn.case.name}: parameters that count only the generated tokens are asked, and the "
                    "engine's target_law takes no prompt_len: its law cannot know where the prompt ends "
                    "(a correct engine written so is judged against the law it gives)"
                )
        for check in self.checks:
            check.start(self)
        self._share_alpha()
        if self.tokens_on:
            # with the cells test beside it each case keeps its own plan (that test is per case);
            # alone, the token test pools the cases (proofs_notes/token_audit.md, claim 6)
            self.tokens = TokenStage.start(
                self.runners, self.alpha_tokens, self.config.seed, pooled=not self.cells_on
            )
            self.planned_tokens = self.tokens.plan_tokens(
                self.config.tv, self.alpha_tokens, self.config.power
            )
        masses = [rn.point_mass() for rn in self.runners]
        first_max = [float(np.max(rn.law(()))) for rn in self.runners]
        # seed use is checked here at the axes' plain places (the others: the checks stage)
        low = [i for i, rn in enumerate(self.runners) if self.plain(rn.case)]
        chosen = min(low or range(len(self.runners)), key=lambda i: first_max[i])
        self.say("contract checks", 0.0)
        times = check_seed_use(self.runners[chosen], self.config.seed, self.clock)
        self.per_sample = float(np.median(times))
        probe.probe_chunk(self, self.runners[chosen])
        for rn, pm in zip(self.runners, masses):
            n = planning.planned(self, pm)
            schedule = [n] if pm else look_schedule(n, self.config.looks)
            for axis, _ in self.axes:
                n, schedule = axis.schedule(rn.case.at(axis.name), n, schedule)
            self.result.cases.append(EngineCaseResult(rn.case, n, schedule, point_mass=pm))
        for check in self.checks:
            check.planned(self)

    def _share_alpha(self) -> None:
        """The law tests' alpha: the audit's, less the side checks' shares (a quarter each for the
        background requests' token test, an acceptance test and the independence tests where they
        run); split between the cells test and the token test where both run, and over the cases'
        looks."""
        share = 1 - sum(check.alpha_share(self) for check in self.checks)
        main = self.config.alpha * share
        both = self.cells_on and self.tokens_on
        self.alpha_cells = main / 2 if both else main
        self.alpha_tokens = main / 2 if both else main
        self.alpha_look = self.alpha_cells / (len(self.cases) * self.config.looks)

    def plan(self) -> None:
        """State the plan and its estimated time before any sampling (``announce``)."""
        res = self.result
        res.plan_text = planning.plan_text(self)
        res.fit = self.fit
        if self.announce:
            self.announce(res.plan_text)

    def sample(self) -> None:
        """The law test's samples (:meth:`_sample`), between the checks' hooks around it."""
        for check in self.checks:
            check.before_sampling(self)
        self._sample()
        for check in self.checks:
            check.after_sampling(self)

    def _sample(self) -> None:
        """Round-robin over the cases, one look at a time; test each case at its look. Samples are
        drawn in chunks (one sample for an engine without ``generate_many``); the budget and a
        fault stop sampling at a chunk boundary, and every sample drawn is kept, in index order."""
        res, c = self.result, self.config
        seqs: list[list[Seq]] = [[] for _ in res.cases]
        total = max(1, sum(r.planned for r in res.cases))
        chunks = DrawAhead(self)
        interrupted = False
        try:
            for look in range(c.looks):
                for i, (runner, r) in enumerate(zip(self.runners, res.cases)):
                    if r.rejected or look >= len(r.schedule):
                        continue
                    if self._look(i, look, runner, r, seqs[i], chunks, total):
                        return
            self._extend(seqs)
        except KeyboardInterrupt:
            interrupted = True  # Ctrl-C: nothing more is waited for (the client cancels on close)
            raise
        finally:
            if not interrupted:
                for g in chunks.settle():  # asked for ahead, not used: still the server's answers
                    for check in self.checks:
                        check.answer(self, g)

    def _look(
        self,
        i: int,
        look: int,
        runner: CaseRunner,
        r: EngineCaseResult,
        seqs: list[Seq],
        chunks: DrawAhead,
        total: int,
    ) -> bool:
        """Case ``i``'s samples up to its look ``look``, then its tests there; True where the
        audit stops (a rejection with ``stop_early``, the budget, a fault)."""
        res, c = self.result, self.config
        t0 = self.clock()
        while r.n < r.schedule[look] and not r.rejected and not res.token_rejected:
            if self.budget.exhausted():
                self.out_of_time = True
                break
            if not self._draw(runner, r, seqs, chunks.take(i, r.n)):
                break
            self.say(r.case.name, min(1.0, self.result.samples / total))
        r.seconds += self.clock() - t0
        if self.tokens is not None and self.tokens.flush(r.case.index):
            res.token_rejected = True
        if self.cells_on and not r.rejected and r.n >= 2 and not r.point_mass:
            if r.n == r.schedule[look] or self.out_of_time or res.fault or res.token_rejected:
                self._test(r, runner, seqs)
        stop = r.rejected or res.token_rejected
        return bool((stop and c.stop_early) or self.out_of_time or res.fault)

    def _extend(self, seqs: list[list[Seq]]) -> None:
        """The token test's plan counts tokens scored, not samples: where samples that ended early
        (an end of sequence, a stop string) left a case short of its planned tokens, more of its
        samples are drawn, in index order (sample ``i``'s seed from (seed, case, i) as ever), until
        it has seen them, the budget or a fault stops it, or it has drawn :data:`EXTEND` times its
        planned samples (then it ran short, and says so)."""
        res, c, stage = self.result, self.config, self.tokens
        if stage is None or c.samples:
            return
        for i, (runner, r) in enumerate(zip(self.runners, res.cases)):
            if r.rejected or r.point_mass:
                continue
            t0 = self.clock()
            while stage.seen(r.case.index) < self.planned_tokens and not res.token_rejected:
                if r.n >= EXTEND * r.planned:
                    r.short_of_tokens = True
                    break
                if self.budget.exhausted():
                    self.out_of_time = True
                    break
                seeds = [
                    sample_seed(c.seed, r.case.index, j) for j in range(r.n, r.n + self.drawer.chunk(runner))
                ]
                before = r.n
                if not self._draw(runner, r, seqs[i], self.drawer.submit(runner, seeds)):
                    break
                r.extended += r.n - before
            r.seconds += self.clock() - t0
            if stage.flush(r.case.index):
                res.token_rejected = True
            if ((r.rejected or res.token_rejected) and c.stop_early) or self.out_of_time or res.fault:
                return

    def _draw(self, runner: CaseRunner, r: EngineCaseResult, seqs: list[Seq], chunk: Pending) -> bool:
        """The next chunk of the case's samples, number ``r.n`` on (sample ``i``'s seed from
        (seed, case, i) alone). A token the law gives probability 0 rejects the case at once; the
        samples after it in the chunk are not counted. False when the engine stopped answering."""
        try:
            gens = chunk.result()
        except EngineUnavailable as e:
            gens = e.done
            self.result.fault = f"{e.detail} (after {r.n + len(gens)} samples of {r.case.name})"
        for g in gens:
            for check in self.checks:
                check.answer(self, g)
        for group in self.groups(gens):
            try:
                runner.prefetch([g.tokens for g in group])  # the group's laws, read at once
            except EngineUnavailable as e:
                # samples whose laws cannot be read cannot be tested: not counted (the verdict is
                # underpowered, with this fault stated)
                self.result.fault = f"{e.detail} (reading the target law)"
                return False
            try:
                if self._score(runner, r, seqs, group):
                    break
            finally:
                runner.end_chunk()  # the group is scored: its deep laws are let go
        return self.result.fault is None

    def _score(
        self, runner: CaseRunner, r: EngineCaseResult, seqs: list[Seq], group: list[Generation]
    ) -> bool:
        """Count and score a group of samples in order; True when the case or the token test
        rejected inside it (the samples after that one are not counted)."""
        for g in group:
            self._count(runner, r, seqs, g)
            if r.rejected:
                return True
            if self.tokens is not None:
                try:
                    crossed = self.tokens.add(runner, r.n - 1, g)
                except EngineUnavailable as e:
                    self.result.fault = f"{e.detail} (reading the laws along the samples)"
                    return True
                if crossed:  # the samples after the block that crossed are not counted
                    self.result.token_rejected = True
                    return True
        return False

    def _count(self, runner: CaseRunner, r: EngineCaseResult, seqs: list[Seq], g: Generation) -> None:
        seq = g.tokens
        if g.forwards is not None:
            r.forwards[g.forwards] += 1
        for check in self.checks:
            check.sample(self, runner, r, g)
        r.n += 1
        if not self.cells_on:
            return  # the token test scores every token, an impossible one included (and keeps none)
        seqs.append(seq)
        _, zero_at = runner.probability(seq)
        if zero_at is None:
            return
        r.hard_failure = {
            "sample": r.n - 1,
            "sequence": list(seq),
            "position": zero_at,
            "detail": (
                f"sample {r.n - 1} emitted {list(seq)}, whose token {seq[zero_at - 1]} at position "
                f"{zero_at} has probability 0 under the target law after "
                f"{list(r.case.prompt + seq[: zero_at - 1])}"
            ),
        }
        r.pvalue, r.rejected = 0.0, True
        r.looks.append((r.n, 0.0))

    def run_checks(self) -> None:
        """The checks stage: each side check's own run (:mod:`.plugins`), in the table's order, with
        seeds of their own (never those of the law test), a fixed number per case."""
        c, res = self.config, self.result
        if c.report_samples == 0 or res.fault or res.verdict == Verdict.INTERRUPTED:
            return
        for check in self.checks:
            check.run(self)

    def _test(self, r: EngineCaseResult, runner: CaseRunner, seqs: list[Seq]) -> None:
        c = self.config
        runner.prefetch(seqs)
        t = check_sequences(
            seqs,
            runner.law,
            runner.vocab,
            r.case.tokens,
            alpha=self.alpha_look,
            max_cells=c.max_cells,
            min_count=c.min_count,
            power=c.power,
        )
        r.test = t
        r.looks.append((len(seqs), t.pvalue))
        if t.pvalue <= self.alpha_look:
            r.rejected = True

    def verdict(self) -> None:
        """Bonferroni over each case's looks, Holm over the cases (module docstring, stage 4); the
        token test's reading; then the verdict: the most severe of the law tests' finding and the
        side checks' (:func:`~specproof.properties.verdicts.most_severe`: ``lossy``, a contract
        violation, ``no_speculation``, ``acceptance_low``, ``misreported``, ``underpowered`` where a
        case ran short, else ``pass``), the first violation found stated, and the factor a deviation
        lives on."""
        res = self.result
        findings = [f for check in self.checks for f in check.findings(self)]
        findings.append(self._law_finding())
        # a check that names the cause (dependent completions) is stated before the level the law
        # tests located it at
        res.factor = next((f.factor for f in findings if f.factor), "") or axes_.only_at(res.cases)
        res.verdict = most_severe([f.verdict for f in findings])
        ranked = sorted(findings, key=lambda f: -f.verdict.severity)
        for f in ranked:
            if f.violation is not None and res.violation is None:
                res.violation = f.violation

    def _law_finding(self) -> Finding:
        """The law tests' finding (``lossy``, ``underpowered`` where a case ran short or a fault
        stopped sampling, else ``pass``), each case's power read."""
        res, c = self.result, self.config
        for r in res.cases:
            seen_short = (
                self.tokens is not None
                and not c.samples
                and not r.point_mass
                and (self.tokens.seen(r.case.index) < self.planned_tokens)
            )
            r.budget_limited = (
                (self.out_of_time or res.fault is not None or r.short_of_tokens)
                and (r.n < r.planned or seen_short)
                and not r.rejected
            )
            if r.looks and not r.hard_failure:
                r.pvalue = min(1.0, c.looks * min(p for _, p in r.looks))
            r.collapsed = r.test is not None and r.test.cells <= 1 and not r.point_mass and not r.rejected
            self._power(r)
        if self.cells_on:
            for r, rej in zip(res.cases, stats.holm([r.pvalue for r in res.cases], self.alpha_cells)):
                r.rejected = r.rejected or rej
        self._read_tokens()
        # a case whose joint test had one cell tested nothing of the joint law: said; not a pass
        # unless the token test, which needs no cells, ran its plan
        untested = [r for r in res.cases if r.collapsed and self.tokens is None]
        if any(r.rejected for r in res.cases) or res.token_rejected:
            return Finding(Verdict.LOSSY)
        if res.fault is not None or untested or any(r.budget_limited for r in res.cases):
            return Finding(Verdict.UNDERPOWERED)
        return Finding(Verdict.PASS)

    def _read_tokens(self) -> None:
        """The token test's reading into the result (and its finding, onto the case it names)."""
        res = self.result
        if self.tokens is None:
            return
        res.token_test = self.tokens.to_json()
        res.token_test["planned_tokens_per_case"] = self.planned_tokens
        if "pooled" in res.token_test:
            res.token_test["pooled"]["detects_per_token_tv"] = self.tokens.pooled_detects(
                self.alpha_tokens, self.config.power
            )
        res.token_rejected = self.tokens.test.rejected
        if res.token_rejected:
            lead = self.tokens.test.finding()
            if lead is not None:
                res.cases[lead["case"]].token_finding = lead

    def _law_rejected(self) -> bool:
        """Whether some look already rejected the law (Holm at the verdict can only add to it)."""
        res = self.result
        return res.token_rejected or any(r.rejected for r in res.cases)

    def _power(self, r: EngineCaseResult) -> None:
        c = self.config
        if r.n == 0:
            return
        if self.tokens is not None:
            r.observed_tokens = self.tokens.cases[r.case.index].tokens
            r.token_detects = self.tokens.detects(r.case.index, self.alpha_tokens, c.power)
        if r.point_mass:
            r.power = 1.0 - (1.0 - c.tv) ** r.n
            r.detectable_tv = 1.0 - (1.0 - c.power) ** (1.0 / r.n)
            return
        if r.test is None:
            return
        df = max(1, r.test.cells - 1)
        r.power = stats.power_at(r.n, c.tv, self.alpha_look / 2, df) if r.test.cells > 1 else 0.0
        r.detectable_tv = r.test.detectable_tv if r.test.cells > 1 else 1.0


def audit_engine(
    spec: EngineSpec,
    config: EngineAuditConfig | None = None,
    progress: ProgressFn | None = None,
    announce: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    drawer: Drawer | None = None,
) -> EngineAuditResult:
    """Audit one engine (module docstring). ``announce`` receives the plan before sampling;
    ``drawer`` draws the law test's samples (here by default). The worker processes the spec's
    engines started are stopped when it ends (``spec.close``), whatever the verdict."""
    try:
        return EngineAudit(spec, config, progress, announce, clock, drawer).run()
    finally:
        if spec.close is not None:
            spec.close()
