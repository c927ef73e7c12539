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

Statistics and calibration: proofs_notes/engine_audit.md (measured false-alarm rate of this
procedure at alpha 0.01 over 300 seeded audits of exact engines, and its power on the mutants).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from specproof.properties.audit import stats
from specproof.properties.audit.sequences import check_sequences
from specproof.properties.engine.acceptance import (
    ACCEPTANCE_ALPHA_SHARE,
    AcceptanceStart,
    fold,
    plan_lambda,
    start_acceptance,
)
from specproof.properties.engine.capabilities import capabilities_of
from specproof.properties.engine.checks import (
    Control,
    Reports,
    Speculation,
    compare_reports,
    judge_reports,
    tolerance_from,
)
from specproof.properties.engine.completions import (
    COMPLETIONS_ALPHA_SHARE,
    CompletionsResult,
    check_completions,
    independence_test,
    whole_multiple,
)
from specproof.properties.engine.config import MAX_HORIZON, MAX_TOKENS, EngineAuditConfig
from specproof.properties.engine.contract import (
    Engine,
    EngineSpec,
    EngineUnavailable,
    Generation,
    Sampling,
    Seq,
)
from specproof.properties.engine.contract_checks import check_applied, check_room
from specproof.properties.engine.drawing import DrawAhead, Drawer
from specproof.properties.engine.load import (
    BACKGROUND_ALPHA_SHARE,
    LoadResult,
    check_loads,
    load_checks,
    load_violation,
    only_at,
)
from specproof.properties.engine.metrics import Tally, read_totals, stage_check
from specproof.properties.engine.results import EngineAuditResult, EngineCase, EngineCaseResult
from specproof.properties.engine.runner import (
    GROUP_BYTES,
    CaseRunner,
    EngineViolation,
    Pending,
    check_seed_use,
    sample_seed,
)
from specproof.properties.engine.streaming import stream_check
from specproof.properties.engine.token_stage import TokenStage, plan_detects, plan_limit
from specproof.properties.plan import Budget
from specproof.properties.tokens.power import POOLED_SHARE
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import SpecproofError, UsageError

#: samples of the probe that must all say nothing was drafted before the audit stops, before
#: sampling, as ``no_speculation`` (:meth:`EngineAudit._drafts_at_all`)
FAIL_FAST = 8


class NotSpeculating(SpecproofError):
    """The probe's samples all said nothing was drafted: the plan is not sampled (``no_speculation``)."""

    def __init__(self, samples: int, tokens: int, case: EngineCase, hint: str) -> None:
        super().__init__(f"{samples} samples")
        self.samples, self.tokens, self.case, self.hint = samples, tokens, case, hint


#: a case whose samples end early is drawn at most this many times its planned samples to see its
#: planned tokens (:meth:`EngineAudit._extend`)
EXTEND = 16
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


def look_schedule(n: int, looks: int) -> list[int]:
    """The sample counts at which a case of ``n`` samples is tested: n/2^j, smallest first."""
    return sorted({max(1, math.ceil(n / 2**j)) for j in range(looks)})


ProgressFn = Callable[[str, float], None]


def _idle(r: EngineCaseResult) -> bool:
    """Whether a case shows speculation off: nothing drafted, or drafts never accepted where the
    samples differ. A point-mass case (greedy decoding) draws one path again and again, so drafts
    never accepted there are one observation repeated, not a sign that speculation is off: its
    summary line says speculation was not tested in it, and the verdict does not turn on it."""
    sp = r.speculation
    return sp.status == "none" and not (r.point_mass and sp.idle == "drafts never accepted")


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
        self.loads = check_loads(spec.loads)
        levels: tuple[int | None, ...] = self.loads or (None,)
        caches: tuple[str | None, ...] = ("cold", "warm") if spec.prefix_cache else (None,)
        self.n_completions = check_completions(spec.completions, bool(self.loads or spec.prefix_cache))
        counts: tuple[int | None, ...] = (1, self.n_completions) if self.n_completions > 1 else (None,)
        self.cases = [
            EngineCase(i, tuple(prompt), s, spec.tokens, level, cache, k)
            for i, (s, prompt, level, cache, k) in enumerate(
                (s, p, level, cache, k)
                for s in spec.samplings
                for p in spec.prompts
                for level in levels
                for cache in caches
                for k in counts
            )
        ]
        if not self.cases:
            raise UsageError("an engine audit needs at least one prompt and one sampling setting")
        for s in spec.samplings:
            s.check_vocab(spec.vocab)  # ids a request names (logit bias, bad words, eos) exist
        self._share_alpha(acceptance=False)
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
        if self.loads:
            self.result.load = LoadResult(self.loads)
        if self.n_completions > 1:
            self.result.completions = CompletionsResult(self.n_completions)
        #: per case with n completions a request: (choice, tokens) of each sample, in order
        self.choices: dict[int, list[tuple[int | None, Seq]]] = {}
        self.runners: list[CaseRunner] = []
        self._loaded: dict[tuple[Any, ...], Engine] = {}  # engines at a load level or warm
        self.per_sample = 0.0  # seconds, estimated by the contract stage (only for the plan's estimate)
        self.stage = "contract"  # the stage running (named in a violation)
        self.probe_chunk = 1  # samples drawn at once when the time per sample was probed
        self.fit = ""  # where the plan does not fit the budget: what would (said in the plan)
        self.out_of_time = False
        self.accept = AcceptanceStart()  # the acceptance tests (:mod:`.acceptance`), from the contract stage
        self.shares: dict[int, list[float]] = {}  # per case: each sample's accepted share
        self.tally = Tally()  # the counters of every answer the sample stage got (:mod:`.metrics`)

    def run(self) -> EngineAuditResult:
        res = self.result
        with torch_threads(self.config.threads):
            try:
                steps = (
                    ("contract", self.contract),
                    ("plan", self.plan),
                    ("sample", self.sample),
                    ("checks", self.checks),
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
            except NotSpeculating as n:
                res.early = (
                    f"stopped before sampling: none of the {n.samples} samples of {n.tokens} tokens the "
                    f"probe drew in {n.case.name} drafted a token (the engine's own counters), so the law "
                    "under speculation cannot be tested" + (f"; likely cause: {n.hint}" if n.hint else "")
                )
                res.verdict = Verdict.NO_SPECULATION
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
        """Build the engine per setting; seed use and determinism on the most random case."""
        engines: dict[Sampling, Engine] = {}
        for case in self.cases:
            if case.sampling not in engines:
                self.say(f"building {case.sampling.label}", 0.0)
                try:
                    engines[case.sampling] = self.spec.build(case.sampling)
                except (UsageError, EngineUnavailable):
                    raise
                except Exception as e:
                    raise EngineViolation(
                        "exception", f"building the engine raised {type(e).__name__}: {e}", case
                    ) from e
            self.runners.append(
                CaseRunner(self._at_load(engines[case.sampling], case), case, self.spec.vocab)
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
        self._start_acceptance()
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
        # seed use is checked here at the lowest level asked (the levels above: the checks stage)
        low = [
            i
            for i, rn in enumerate(self.runners)
            if rn.case.load == min(self.loads, default=None) and (rn.case.completions or 1) == 1
        ]
        chosen = min(low or range(len(self.runners)), key=lambda i: first_max[i])
        self.say("contract checks", 0.0)
        times = check_seed_use(self.runners[chosen], self.config.seed, self.clock)
        self.per_sample = float(np.median(times))
        self._probe_chunk(self.runners[chosen])
        for rn, pm in zip(self.runners, masses):
            n = self._planned(pm)
            schedule = [n] if pm else look_schedule(n, self.config.looks)
            k = rn.case.completions or 1
            if k > 1:  # every request of the law test whole: k completions each
                n, schedule = whole_multiple(n, k), sorted({whole_multiple(x, k) for x in schedule})
            self.result.cases.append(EngineCaseResult(rn.case, n, schedule, point_mass=pm))
        acc = self.result.acceptance
        if acc is not None:
            planned = sum(self.result.cases[i].planned for i in self.accept.cases) * self.spec.tokens // 2
            acc.lam = plan_lambda(acc.alpha, planned)

    def _start_acceptance(self) -> None:
        """The acceptance tests where they apply (:mod:`.acceptance`), with their share of the
        family-wise alpha taken from the law tests'."""
        on_axis = bool(self.loads or self.spec.prefix_cache)
        self.accept = start_acceptance(self.runners, self.config.alpha * ACCEPTANCE_ALPHA_SHARE, on_axis)
        self.result.acceptance, self.result.axis_acceptance = self.accept.oracle, self.accept.axis
        if self.accept.runs:
            self._share_alpha(acceptance=True)

    def _share_alpha(self, acceptance: bool) -> None:
        """The law tests' alpha: the audit's, less the background requests' token test's share
        where a load axis is asked, an acceptance test's where one runs and the independence
        tests' where a completions axis is asked (a quarter each); split between the
        cells test and the token test where both run, and over the cases' looks."""
        share = (
            1
            - BACKGROUND_ALPHA_SHARE * bool(self.loads)
            - ACCEPTANCE_ALPHA_SHARE * acceptance
            - COMPLETIONS_ALPHA_SHARE * (self.n_completions > 1)
        )
        main = self.config.alpha * share
        both = self.cells_on and self.tokens_on
        self.alpha_cells = main / 2 if both else main
        self.alpha_tokens = main / 2 if both else main
        self.alpha_look = self.alpha_cells / (len(self.cases) * self.config.looks)

    def _at_load(self, engine: Engine, case: EngineCase) -> Engine:
        """The case's engine at its load level (:mod:`.load`) or after a prefix-cache hit, built
        once per setting and level."""
        if case.cache == "warm":
            why = "it cannot be asked to reuse a cached prompt (profile llamacpp can)"
            return self._variant(engine, case, "prefix_cache", "at_cache", (), why)
        if case.completions is not None and case.completions > 1:
            why = "it cannot be asked for several completions a request (a served engine can)"
            return self._variant(engine, case, "completions", "at_completions", (case.completions,), why)
        if case.load is None:
            return engine
        why = "it cannot be audited with a given number of requests in flight (a served engine can)"
        return self._variant(engine, case, "load", "at_load", (case.load,), why)

    def _variant(
        self, engine: Engine, case: EngineCase, capability: str, attr: str, args: tuple[Any, ...], why: str
    ) -> Engine:
        key = (case.sampling, attr, args)
        if key not in self._loaded:
            at = getattr(engine, attr, None) if capability in capabilities_of(engine) else None
            if at is None:
                option = "loads" if capability == "load" else capability
                raise UsageError(f"{option}: {self.spec.name} offers no {attr}(): {why}")
            try:
                self._loaded[key] = at(*args)
            except (UsageError, EngineUnavailable):
                raise
            except Exception as e:
                call = f"{attr}({', '.join(map(str, args))})"
                raise EngineViolation("exception", f"{call} raised {type(e).__name__}: {e}", case) from e
        return self._loaded[key]

    def _probe_chunk(self, rn: CaseRunner) -> None:
        """Time one chunk drawn, its laws read and its tokens scored as sampling does it (many at
        once where the engine draws many: one call at a time overstates the time of an engine
        that serves many at once, a server at concurrency 8 announced 2,816 s for a run of 609 s;
        two samples where it draws one at a time), on seeds of its own. Only the plan's estimate
        reads it; no sample of the probe is tested."""
        chunk = Drawer().chunk(rn)  # here, by the case's own engine: workers draw only the law test's
        seeds = [sample_seed(self.config.seed, rn.case.index, 4 * 10**6 + j) for j in range(max(2, chunk))]
        t0 = self.clock()
        gens = rn.draw(seeds) if chunk > 1 else [g for s in seeds for g in rn.draw([s])]
        for group in self._groups(gens):
            rn.prefetch([g.tokens for g in group])
            if self.tokens is not None:
                for g in group:
                    self.tokens.probe(rn, g)
            rn.end_chunk()
        self.per_sample = (self.clock() - t0) / len(seeds)
        self.probe_chunk = len(seeds)
        self._drafts_at_all(rn, gens)

    def _drafts_at_all(self, rn: CaseRunner, gens: list[Generation]) -> None:
        """Fail fast: where the engine's counters say that none of at least :data:`FAIL_FAST`
        samples of the probe (more drawn where it drew fewer) drafted a token, at a horizon with
        room for drafts and a law that is not a point mass, sampling the whole plan would end
        ``no_speculation``: the audit stops here, before sampling, with the likely cause."""
        if self.spec.tokens < 2 or rn.point_mass() or not gens or any(g.drafted is None for g in gens):
            return
        extra = 0
        while not any(g.drafted for g in gens) and len(gens) < FAIL_FAST:
            gens = gens + rn.draw([sample_seed(self.config.seed, rn.case.index, 5 * 10**6 + extra)])
            extra += 1
        if any(g.drafted for g in gens) or any(g.drafted is None for g in gens):
            return
        for g in gens:  # the evidence: the probe's counters (none of its samples is tested)
            self.result.speculation.add(g)
        raise NotSpeculating(
            len(gens), self.spec.tokens, rn.case, str(getattr(rn.engine, "no_draft_hint", "") or "")
        )

    def _planned(self, point_mass: bool) -> int:
        """Samples per case, from the statistics alone: a point mass needs enough tokens that any
        deviation of per-token TV ``tv`` shows as a hard failure; else the token test's tokens per
        case (in samples of M), or the cells test's plan where it runs alone."""
        c, m = self.config, self.spec.tokens
        if c.samples:
            return c.samples
        if point_mass:
            per = m if self.tokens_on else 1
            return max(2, math.ceil(math.log(1 - c.power) / (per * math.log(1 - c.tv))))
        if self.tokens_on:
            return max(2, math.ceil(self.planned_tokens / m))
        return stats.plan_samples(c.tv, self.alpha_look / 2, c.power, c.max_cells - 1)

    def plan(self) -> None:
        """State the plan and its estimated time before any sampling (``announce``)."""
        c, res, spec = self.config, self.result, self.spec
        total = sum(r.planned for r in res.cases)
        estimate = total * self.per_sample
        lines = [
            f"engine {spec.name}: {len(self.cases)} cases (prompts x settings), M = {spec.tokens} new "
            f"tokens, V = {spec.vocab}; family-wise alpha {c.alpha:g}",
        ]
        if self.tokens_on:
            lines += self._token_plan_lines()
        if self.cells_on:
            lines.append(
                f"  cells test of the joint law: on up to {c.max_cells} cells of the first M tokens, alpha "
                f"{self.alpha_cells:g}, {c.looks} looks at level {self.alpha_look:.3g} each"
            )
        for r in res.cases:
            what = "point mass: any deviation is a hard failure" if r.point_mass else f"looks at {r.schedule}"
            lines.append(f"    {r.case.name}: {r.planned:,} samples ({what})")
        lines += [f"  note: {n}" for n in res.notes]
        lines.append(
            f"  probe: {1000 * self.per_sample:.1f} ms per sample ({self.probe_chunk} drawn, their laws "
            f"read and scored as sampling does it) -> about {estimate:.0f} s (budget {c.budget_seconds:g} s)"
        )
        self.fit = self._fit(estimate)
        if self.fit:
            lines.append(
                "  the plan does not fit the budget: unless a deviation is found first, the audit will end "
                f"underpowered; {self.fit}"
            )
        res.fit = self.fit
        res.plan_text = "\n".join(lines)
        if self.announce:
            self.announce(res.plan_text)

    def _fit(self, estimate: float) -> str:
        """Where the plan's estimate exceeds the budget: the per-token TV whose plan would fit it
        and the budget that would fit this plan (empty where it fits, or the plan is a fixed size)."""
        c = self.config
        if estimate <= c.budget_seconds or c.samples or estimate <= 0:
            return ""
        budget = math.ceil(1.25 * estimate / 60) * 60  # with a margin, in whole minutes
        tv = self._tv_fitting(c.budget_seconds / estimate) if self.tokens is not None else None
        words = f"--budget-seconds {budget:g} fits it"
        if tv is not None:
            words = f"--tv {tv:.2g} would fit the budget ({c.tv:g} asked), or " + words
        return words

    def _tv_fitting(self, ratio: float) -> float | None:
        """The smallest per-token TV of two significant digits (on a 5 % grid above the plan's)
        whose token plan is at most ``ratio`` times the plan's, or None below 0.45."""
        assert self.tokens is not None
        c, now, tv = self.config, self.planned_tokens, self.config.tv
        while True:
            step = 10.0 ** (math.floor(math.log10(tv * 1.05)) - 1)
            tv = math.ceil(tv * 1.05 / step - 1e-9) * step
            if tv > 0.45:
                return None
            if self.tokens.plan_tokens(tv, self.alpha_tokens, c.power) <= ratio * now:
                return float(f"{tv:.2g}")

    def _token_plan_lines(self) -> list[str]:
        c, stage = self.config, self.tokens
        if stage is None:
            return []
        n = self.planned_tokens
        cases = len(self.cases)
        pooled = stage.test.pooled is not None
        what = (
            f"for power {c.power:g} against a per-token TV of {c.tv:g}" if not c.samples else "a fixed size"
        )
        if pooled and not c.samples:
            what += " shared by every case"
        lines = [
            f"  token test (every token against the law at its own prefix; anytime-valid, alpha "
            f"{self.alpha_tokens:g}): {n:,} tokens per case {what} (sharpening or flattening, drift to "
            "the argmax: the plan's statistics)",
        ]
        if pooled:
            alone = stage.alone_detects(n, self.alpha_tokens, c.power)
            lines.append(
                f"    pooled: one family of statistics fed every case's tokens holds {POOLED_SHARE:g} of the "
                f"wealth, the cases' own the rest; a deviation in one case alone is detected at a per-token "
                f"TV of {alone['mean']:.3g} (sharpening) or {alone['greedy']:.3g} (to the argmax) by its "
                f"{n:,} tokens"
            )
        if not c.samples:
            detects = plan_detects(n * cases if pooled else n, self.alpha_tokens, c.power, cases, pooled)
            limit = plan_limit(c.tv, self.alpha_tokens, c.power)
            lines.append(
                f"    at that size the cells of the transform detect a TV of {detects:.3g}; the most "
                f"powerful test of the plan's deviation needs {limit:,} tokens (the information limit)"
            )
        if not c.samples and any(rn.ends for rn in self.runners):
            lines.append(
                "    samples may end early (an end of sequence, a stop string): a case then draws more until "
                f"it has scored its planned tokens (at most {EXTEND} times its planned samples)"
            )
        if not all(stage.blocks.values()):
            told = [rn for rn in self.runners if "steps" in rn.offers and "sequential" not in rn.offers]
            if told:
                lines.append(
                    "    the index in the speculative step is not tested: the engine tells its steps but "
                    "does not declare its verification sequential"
                )
        return lines

    def sample(self) -> None:
        """The law test's samples (:meth:`_sample`), with the server's own metrics read before and
        after where the engine offers them (:mod:`.metrics`)."""
        meter = next((rn for rn in self.runners if "metrics" in rn.offers), None)
        before = read_totals(meter)
        self._sample()
        why = "the load axis's background requests draft too" if self.loads else ""
        if self.result.fault:
            why = "a fault: requests whose answers never came may have been counted"
        self.result.metrics = stage_check(meter, before, read_totals(meter), self.tally, why)

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
                    t0 = self.clock()
                    while r.n < r.schedule[look] and not r.rejected and not res.token_rejected:
                        if self.budget.exhausted():
                            self.out_of_time = True
                            break
                        if not self._draw(runner, r, seqs[i], chunks.take(i, r.n)):
                            break
                        self.say(r.case.name, min(1.0, self.result.samples / total))
                    r.seconds += self.clock() - t0
                    if self.tokens is not None and self.tokens.flush(r.case.index):
                        res.token_rejected = True
                    if self.cells_on and not r.rejected and r.n >= 2 and not r.point_mass:
                        if r.n == r.schedule[look] or self.out_of_time or res.fault or res.token_rejected:
                            self._test(r, runner, seqs[i])
                    stop = r.rejected or res.token_rejected
                    if (stop and c.stop_early) or self.out_of_time or res.fault:
                        return
            self._extend(seqs)
        except KeyboardInterrupt:
            interrupted = True  # Ctrl-C: nothing more is waited for (the client cancels on close)
            raise
        finally:
            if not interrupted:
                for g in chunks.settle():  # asked for ahead, not used: still the server's answers
                    self.tally.add(g.drafted, g.accepted)

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
            self.tally.add(g.drafted, g.accepted)
        for group in self._groups(gens):
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

    def _groups(self, gens: list[Generation]) -> list[list[Generation]]:
        """A chunk's samples in groups whose laws take at most :data:`.runner.GROUP_BYTES` (at
        least one sample a group): what is held at once never grows with the chunk."""
        per = max(1, GROUP_BYTES // (8 * self.spec.vocab * max(1, self.spec.tokens)))
        return [gens[i : i + per] for i in range(0, len(gens), per)]

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
        r.speculation.add(g)
        self.result.speculation.add(g)
        if r.case.index in self.accept.cases and self.accept.oracle and self.accept.rule:
            fold(self.accept.oracle, runner, g, self.accept.rule)
        if (r.case.completions or 1) > 1:
            self.choices.setdefault(r.case.index, []).append((g.choice, g.tokens))
        if self.result.axis_acceptance is not None and g.drafted:
            self.shares.setdefault(r.case.index, []).append((g.accepted or 0) / g.drafted)
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

    def checks(self) -> None:
        """Beside the law (:mod:`.checks`): the control on the speculation-off twin, then the
        probabilities the engine reports, checked against the law within the control's tolerance.
        Seeds of their own (never those of the law test), a fixed number per case."""
        c, res = self.config, self.result
        if c.report_samples == 0 or res.fault or res.verdict == Verdict.INTERRUPTED:
            return
        self._reports_and_control()
        if not res.fault:
            self._stream_check()
        if res.load is not None and not res.fault:
            self._load_checks(res.load)
        if res.completions is not None:
            self._independence(res.completions)

    def _independence(self, out: CompletionsResult) -> None:
        """Each n-completion case's independence test (:mod:`.completions`), Bonferroni over them."""
        cases = [r for r in self.result.cases if (r.case.completions or 1) > 1]
        alpha = self.config.alpha * COMPLETIONS_ALPHA_SHARE / max(1, len(cases))
        for r in cases:
            seen = self.choices.get(r.case.index, [])
            out.tests.append(independence_test(seen, alpha, r.case.name, out.completions))

    def _stream_check(self) -> None:
        """Streamed answers against whole ones (:func:`.streaming.stream_check`)."""
        stream_check(self.runners, self.config, self.result, self.say)

    def _reports_and_control(self) -> None:
        c, res = self.config, self.result
        # the control compares a seed's samples with and without speculation: one completion a request
        twins = [rn.optional("twin") if (rn.case.completions or 1) == 1 else None for rn in self.runners]
        if any(t is not None for t in twins):
            res.control = self._control(twins)
        offered = [rn for rn in self.runners if rn.optional("reports", False)]
        if not offered:
            return
        res.reports.tolerance, res.reports.tolerance_from = tolerance_from(res.control)
        counts = Speculation()
        for rn in offered:
            seeds = [sample_seed(c.seed, rn.case.index, 10**6 + j) for j in range(c.report_samples)]
            self.say(f"reports {rn.case.name}", 1.0)
            try:
                gens = rn.draw(seeds, report=True)
            except EngineUnavailable as e:
                res.fault = f"{e.detail} (while drawing samples with probabilities requested)"
                res.reports.stop(res.fault)
                return
            except EngineViolation as v:
                res.reports.stop(f"[{v.kind}] {v.detail}")
                raise
            for g in gens:
                counts.add(g)
            compare_reports(gens, rn.law, res.reports, rn.end)
        res.speculation.reported = {
            "samples": counts.samples,
            "counted": counts.counted,
            "drafted": counts.drafted,
            "accepted": counts.accepted,
        }
        judge_reports(res.reports)

    def _load_checks(self, load: LoadResult) -> None:
        """The load axis's checks (:func:`.load.load_checks`)."""
        load_checks(self.runners, self.config, self.spec.vocab, load, self.say)

    def _control(self, twins: list[Engine | None]) -> Control:
        """The twin's reported probabilities against the recipe's laws (the numerical tolerance),
        and the same seeds with and without speculation (the seed-coupled share)."""
        c, control = self.config, Control()
        diffs = Reports()
        for rn, twin in zip(self.runners, twins):
            if twin is None:
                continue
            twin_runner = CaseRunner(twin, rn.case, rn.vocab)
            self.say(f"control {rn.case.name}", 1.0)
            try:
                if twin_runner.optional("reports", False):
                    seeds = [
                        sample_seed(c.seed, rn.case.index, 2 * 10**6 + j) for j in range(c.report_samples)
                    ]
                    compare_reports(twin_runner.draw(seeds, report=True), rn.law, diffs, rn.end)
                seeds = [sample_seed(c.seed, rn.case.index, 3 * 10**6 + j) for j in range(c.report_samples)]
                ours, theirs = rn.draw(seeds), twin_runner.draw(seeds)
            except EngineUnavailable as e:
                control.notes.append(f"{rn.case.name}: the control stopped: {e.detail}")
                continue
            control.coupled += len(seeds)
            control.identical += sum(a.tokens == b.tokens for a, b in zip(ours, theirs))
            same = sum(x == y for a, b in zip(ours, theirs) for x, y in zip(a.tokens, b.tokens))
            control.identical_tokens = (control.identical_tokens or 0.0) + same
        if control.coupled:
            control.identical_tokens = (control.identical_tokens or 0.0) / (
                control.coupled * self.spec.tokens
            )
        if diffs.checked:
            control.samples, control.tolerance = diffs.samples, diffs.max_error
        return control

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
        """Bonferroni over each case's looks, Holm over the cases (module docstring, stage 4);
        then, when the law held: ``no_speculation`` when the engine's counters show nothing
        drafted or accepted, ``acceptance_low`` when it accepted fewer drafts than its declared
        rule predicts (:mod:`.acceptance`), ``misreported`` when its reported probabilities are not
        the law's (or its own metrics not its answers' counters: :mod:`.metrics`),
        ``underpowered`` when a case ran short (the budget or a fault), else ``pass``."""
        res, c = self.result, self.config
        if res.acceptance is not None:
            res.acceptance.judge()
        if res.axis_acceptance is not None and res.axis_acceptance.status == "not_run":
            res.axis_acceptance.judge(res.cases, self.shares)
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
        if self.tokens is not None:
            res.token_test = self.tokens.to_json()
            res.token_test["planned_tokens_per_case"] = self.planned_tokens
            if "pooled" in res.token_test:
                res.token_test["pooled"]["detects_per_token_tv"] = self.tokens.pooled_detects(
                    self.alpha_tokens, c.power
                )
            res.token_rejected = self.tokens.test.rejected
            if res.token_rejected:
                lead = self.tokens.test.finding()
                if lead is not None:
                    res.cases[lead["case"]].token_finding = lead
        # a case whose joint test had one cell tested nothing of the joint law: said; not a pass
        # unless the token test, which needs no cells, ran its plan
        untested = [r for r in res.cases if r.collapsed and self.tokens is None]
        load = res.load
        dependent = res.completions is not None and bool(res.completions.rejected)
        # dependent completions are the cause a law test at that level also sees: named first
        res.factor = res.completions.factor() if dependent and res.completions else only_at(res.cases)
        seeds_bad = None if load is None else load.violation
        if (
            any(r.rejected for r in res.cases)
            or res.token_rejected
            or (load and load.background_lossy)
            or dependent
        ):
            res.verdict = Verdict.LOSSY
            if seeds_bad is not None and res.violation is None:
                res.violation = load_violation(seeds_bad)
        elif seeds_bad is not None:
            res.violation = load_violation(seeds_bad)
            res.verdict = Verdict.CONTRACT_VIOLATION
        elif res.streaming.status == "differs":
            f = res.streaming.first or {}
            res.violation = {
                "kind": "stream_differs",
                "detail": (
                    f"{res.streaming.hard} of {res.streaming.samples} seeds answered other tokens or text "
                    f"streamed than whole; seed {f.get('seed')}: {f.get('what')}"
                ),
                "case": self.cases[0].name,
                "stage": "checks",
            }
            res.verdict = Verdict.CONTRACT_VIOLATION
        elif res.speculation.status == "none" or any(_idle(r) for r in res.cases):
            res.verdict = Verdict.NO_SPECULATION
        elif (res.acceptance is not None and res.acceptance.status == "low") or (
            res.axis_acceptance is not None and res.axis_acceptance.status == "low"
        ):
            res.verdict = Verdict.ACCEPTANCE_LOW
        elif (
            res.reports.status in ("wrong", "absent")
            or res.streaming.status == "reports_differ"
            or (res.acceptance is not None and res.acceptance.contradicted)
            or res.metrics.status == "differ"
        ):
            res.verdict = Verdict.MISREPORTED
        elif res.fault is not None or untested or any(r.budget_limited for r in res.cases):
            res.verdict = Verdict.UNDERPOWERED
        else:
            res.verdict = Verdict.PASS

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
    ``drawer`` draws the law test's samples (here by default)."""
    return EngineAudit(spec, config, progress, announce, clock, drawer).run()
