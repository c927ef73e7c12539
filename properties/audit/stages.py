"""The statistical audit of a black-box verifier, an instrument whose reading depends on the
plan and the seed, never on the clock.

``audit(backend, config)`` runs five named stages (:class:`Audit`):

1. **smoke** — coverage before power, whatever the budget. Every battery case once, a few rows
   each: the contract (:mod:`.contracts`), the zero-probability hard failure; the id-range
   probes (:mod:`.probes`: laws on ids ``V - 1``, ``2**15``, ``2**16 +- 1``, ``2**24 + 1``);
   equal seeds must give equal outputs. The calls are timed, which only *estimates* the plan's
   duration.
2. **plan** — each case's sample size from ``alpha``, ``tv``, ``power`` and its cells alone
   (:func:`.stats.plan_samples`; ``--samples`` fixes it instead); memory-bound cases (V above
   :data:`.battery.LARGE_VOCAB`) are planned for ``large_vocab_tv``. Every call has a fixed
   number of rows (from the case's size), so the draws never depend on timing.
3. **sample** — cases in coverage order (:func:`.battery.coverage_order`), each to its plan.
   The budget is a guard: a case whose estimated cost exceeds what is left is not run, and a
   case running when the budget ends stops at a call boundary. Either makes the verdict
   ``underpowered``, never ``pass``.
4. **test** — per case, Pearson's test and an exact cell test on the joint law's cells
   (:mod:`.partition`) and the per-position tests of the next-token laws (:mod:`.conditional`),
   combined by Bonferroni.
5. **verdict** — Holm over the cases (a case not run counts as p = 1): ``lossy`` if one is
   rejected; ``pass`` if every case ran its plan (power >= ``power`` against TV >= its planned
   TV on its cells); ``underpowered`` otherwise. A verifier that passes must still draw from its
   generator. ``contract_violation`` ends the audit at the first violation; a hang (a call past
   ``call_timeout``) is the violation ``timeout``. Ctrl-C ends it ``interrupted`` with what ran.

The same verifier, seed and options give the same verdict and the same JSON (timings aside) on
any machine whose budget covers the plan (tests/test_audit_instrument.py slows the clock).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import torch

from specproof.properties.audit import stats
from specproof.properties.audit.battery import (
    LARGE_VOCAB,
    Case,
    Completion,
    Models,
    build_models,
    chain_battery,
    complete,
    coverage_order,
    sample_inputs,
    tree_battery,
)
from specproof.properties.audit.config import AuditConfig
from specproof.properties.audit.evaluate import TESTS_PER_CASE, evaluate_case
from specproof.properties.audit.probes import BIG_V, Probe, check_probe, probes
from specproof.properties.audit.results import (
    INTERRUPTED,
    LOSSY,
    PASS,
    UNDERPOWERED,
    VIOLATION,
    AuditResult,
    CaseResult,
)
from specproof.properties.conformance.backends import Backend
from specproof.properties.conformance.contracts import (
    ContractViolation,
    call_verifier,
    check_chain_output,
    check_tree_output,
    narrowing_hint,
)
from specproof.properties.plan import Budget
from specproof.reference.errors import SpecproofError, UsageError

#: rows of a row-at-a-time reference rule run beside a witness (its lengths are compared as shares)
REFERENCE_ROWS = 4096
#: the exact rule whose emitted lengths are shown beside a witness, per process
REFERENCE_RULES = {
    "iid_chain": "torch.token",
    "onehot_chain": "torch.token",
    "iid_siblings": "reference.mss",
    "wor_siblings": "reference.rrs",
    "topk_siblings": "reference.target_only",
    "onehot_siblings": "reference.rrs",
}


def reference_rule(kind: str, process: str, law: str) -> str:
    """The registered exact rule a witness's emitted lengths are compared with."""
    if law == "greedy":
        return "reference.greedy"
    return REFERENCE_RULES.get(process, "reference.strict")


def mark_after_finding(res: AuditResult) -> None:
    """Cases left unplanned or unrun once a finding ended the audit (stop early, a hard failure
    in the smoke stage): not run because of the finding, which a report says in one line."""
    for r in res.cases:
        if r.status == "planned" or (r.status == "not_run" and not r.reason):
            r.status = "after_finding"
            r.reason = "not run: the audit stopped at its first finding"


def default_cases(backend: Backend, seed: int) -> list[Case]:
    if backend.kind == "chain":
        return chain_battery(backend.processes, seed=seed)
    cases: list[Case] = []
    for p in backend.processes:
        cases.extend(tree_battery(p, seed=seed))
    return cases


def derive_seed(*parts: int) -> int:
    return int(
        np.random.SeedSequence([abs(int(x)) for x in parts]).generate_state(1, dtype=np.uint64)[0] >> 1
    )


def case_key(case: Case) -> int:
    """A case's seed key: a hash of its name, so a case draws the same inputs wherever it sits
    in a battery (a replay audits the witness case alone and sees the same data)."""
    return zlib.crc32(case.name.encode())


def call_seeds(seed: int, case: Case, call: int) -> tuple[int, int, int]:
    """Seeds of one call: (inputs, verifier's generator, completion). Call 0 is the smoke stage."""
    key = case_key(case)
    return tuple(derive_seed(seed, key, call, j) for j in range(3))  # type: ignore[return-value]


def _gen(s: int) -> torch.Generator:
    return torch.Generator().manual_seed(s)


class Runner:
    """One case: its models and the verifier call, validated."""

    def __init__(self, backend: Backend, case: Case, timeout: float | None = None) -> None:
        self.backend = backend
        self.case = case
        self.timeout = timeout
        self.models: Models = build_models(case, greedy=backend.law == "greedy")

    def batch_size(self, config: AuditConfig) -> int:
        """Rows per call: fixed by the case's size and the config, never by timing."""
        per_row = self.case.vocab * len(self.case.parents) * 4 * 2
        b = max(2, min(config.batch, config.max_batch_bytes // per_row))
        return b + (b % 2 if self.case.paired else 0)

    def run(self, rows: int, gen_inputs: torch.Generator, gen_verifier: torch.Generator):
        inputs = sample_inputs(self.models, rows, gen_inputs)
        V = self.case.vocab
        if self.backend.kind == "chain":
            d, dp, tp = inputs.chain_args()
            out = call_verifier(self.backend.fn, d, dp, tp, gen_verifier, timeout=self.timeout)
            emitted, lengths = check_chain_output(out, d, V)
        else:
            out = call_verifier(
                self.backend.fn,
                inputs.parents,
                inputs.tokens,
                inputs.draft_probs,
                inputs.target_probs,
                gen_verifier,
                timeout=self.timeout,
            )
            emitted, lengths = check_tree_output(out, inputs.parents, inputs.tokens, V)
        return inputs, emitted, lengths


def _collision(models: Models) -> float:
    """Probability that two independent draws of the first token agree."""
    law = models.preserve_s[models.index_py(models.roots[0], 0)]
    return float((law**2).sum())


def _determinism(runner: Runner, seed: int, generator_use: bool = False) -> None:
    """Equal seeds give equal outputs; eight other seeds do not all reproduce the first output.

    Rows are enough that a verifier using the generator repeats every first token under another
    seed with probability below 1e-12 per seed (rows are independent under the contract).
    """
    rows = max(8, math.ceil(math.log(1e-12) / math.log(max(_collision(runner.models), 1e-9))))
    inputs = sample_inputs(runner.models, rows, _gen(derive_seed(seed, 99, 1)))
    args: tuple[Any, ...]
    if runner.backend.kind == "chain":
        args = inputs.chain_args()
    else:
        args = (inputs.parents, inputs.tokens, inputs.draft_probs, inputs.target_probs)

    def call(s: int) -> list[torch.Tensor]:
        out = call_verifier(runner.backend.fn, *args, _gen(derive_seed(seed, 99, s)), timeout=runner.timeout)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        return [torch.as_tensor(o).clone() for o in outs]

    a = call(2)
    if not generator_use:
        if any(not torch.equal(x, y) for x, y in zip(a, call(2))):
            raise ContractViolation(
                "nondeterministic", "two calls with generators seeded alike returned different outputs"
            )
        return
    for s in range(3, 11):
        if any(not torch.equal(x, y) for x, y in zip(a, call(s))):
            return
    raise ContractViolation(
        "ignores_generator",
        f"{rows} rows gave identical outputs under nine different generator seeds; a verifier that uses its "
        "generator does so with probability below 1e-96 (a fixed or global seed, or no randomness at all)",
    )


# --------------------------------------------------------------------------- where calls run
# (a hook: specproof.properties.shard spreads the sampling stage's calls over Ray workers)

#: one call's outputs: inputs, emitted tokens, emitted lengths, and the completion
CallOutput = tuple[Any, Any, torch.Tensor, Completion]


class CallsUnavailable(SpecproofError):
    """The workers that draw a case's calls stopped (one cannot build its verifier, the cluster
    went away): the case ends short with what it drew, the cases after it are not run, and the
    verdict is ``underpowered`` (or ``lossy`` on what was drawn), never ``pass``."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Caller:
    """Where the sampling stage's calls run: here, one at a time, lazily. Another caller (a pool
    of workers, each with its own replica of the backend) must yield, for calls k = 1, 2, ... of
    ``rows`` rows each, what call k gives here, in call order (a call is a function of the seed,
    the case and k alone), raise a call's ``ContractViolation`` when that call is reached, and
    ``CallsUnavailable`` when it cannot go on. ``parallel``: calls it runs at once (only the
    plan's time estimates use it)."""

    parallel = 1

    @staticmethod
    def call(runner: Runner, seed: int, k: int, rows: int) -> CallOutput:
        """Call ``k`` of the case, ``rows`` rows (what a worker runs too)."""
        s_in, s_ver, s_comp = call_seeds(seed, runner.case, k)
        inputs, emitted, lens = runner.run(rows, _gen(s_in), _gen(s_ver))
        return inputs, emitted, lens, complete(runner.models, inputs, emitted, lens, _gen(s_comp))

    def calls(
        self, runner: Runner, config: AuditConfig, rows: list[int]
    ) -> Generator[CallOutput, None, None]:
        for k, b in enumerate(rows, 1):
            yield self.call(runner, config.seed, k, b)


ProgressFn = Callable[[str, float], None]
PlanFn = Callable[["AuditResult", float], None]


class Audit:
    """One audit, stage by stage (module doc). Holds the state the stages share."""

    def __init__(
        self,
        backend: Backend,
        config: AuditConfig,
        progress: ProgressFn | None = None,
        on_plan: PlanFn | None = None,
        clock: Callable[[], float] = time.perf_counter,
        caller: Caller | None = None,
    ) -> None:
        config.validate()
        self.backend = backend
        self.caller = caller or Caller()
        self.stopped: str | None = None  # why the caller stopped (CallsUnavailable), if it did
        self.config = config
        self.say = progress or (lambda what, frac: None)
        self.on_plan = on_plan
        self.clock = clock
        self.budget = Budget(config.budget_seconds, clock)
        self.cases = config.cases if config.cases is not None else default_cases(backend, config.seed)
        if not self.cases:
            raise UsageError("cases: an audit needs at least one case")
        self.alpha_case = config.alpha / len(self.cases)
        self.result = AuditResult(backend.name, backend.kind, backend.processes, backend.law, config)
        self.runners: dict[int, Runner] = {}
        self.cost: dict[int, tuple[float, float]] = {}  # estimated seconds per row, per call
        self.smoke_times: dict[int, tuple[int, float]] = {}  # rows, seconds of each smoke call
        self.entropic: Runner | None = None
        self.done = False

    # -- stages ---------------------------------------------------------------------------------

    def run(self) -> AuditResult:
        previous = torch.get_num_threads()
        if self.config.threads is not None:
            torch.set_num_threads(self.config.threads)
        try:
            self.smoke()
            if not self.done:
                self.plan()
                self.sample()
            if not self.done:
                self.verdict()
            mark_after_finding(self.result)
            self.reference_lengths()
            self.shrink()
        except KeyboardInterrupt:
            self.result.verdict = INTERRUPTED
        finally:
            torch.set_num_threads(previous)
        self.result.seconds = self.budget.elapsed()
        return self.result

    def smoke(self) -> None:
        """Coverage before power: each case and probe once, cheap and deterministic. Small
        vocabularies first, then the id-range probes, then the memory-bound cases."""
        c, res = self.config, self.result
        res.cases = [CaseResult(case, 0, c.case_tv(case), index=i) for i, case in enumerate(self.cases)]
        order = coverage_order(self.cases)
        steps: list[int | Probe] = [i for i in order if self.cases[i].vocab <= LARGE_VOCAB]
        steps += probes(self.backend.kind, self.backend.processes, c.wide_probe) if c.probes else []
        steps += [i for i in order if self.cases[i].vocab > LARGE_VOCAB]
        where, index = "", None
        try:
            for pos, step in enumerate(steps):
                if isinstance(step, Probe):
                    where, index = step.name, None
                    self.say(f"smoke {step.name}", 0.05 * pos / len(steps))
                    try:
                        found = self._probe(step)
                    except ContractViolation as e:
                        if e.kind != "raised" or step.vocab <= BIG_V:
                            raise
                        # beyond every real vocabulary: refusing it is a limit, not a bug
                        res.smoke.append(
                            {"check": f"id range: {step.describe()}", "ok": None, "refused": e.detail}
                        )
                        continue
                    res.smoke.append({"check": f"id range: {step.describe()}", "ok": found is None})
                    if found is not None and not self.done:
                        res.finding = dict(found, probe=step.name, during="smoke stage (id-range probe)")
                        res.verdict = LOSSY
                        self.done = True
                    continue
                i = step
                case = self.cases[i]
                where, index = case.name, i
                self.say(f"smoke {case.name}", 0.05 * pos / len(steps))
                runner = Runner(self.backend, case, c.call_timeout)
                self.runners[i] = runner
                rows = self._rows_of_call(i, 0)
                s_in, s_ver, s_comp = call_seeds(c.seed, case, 0)
                t0 = self.clock()
                inputs, emitted, lengths = runner.run(rows, _gen(s_in), _gen(s_ver))
                self.smoke_times[i] = (rows, self.clock() - t0)
                comp = complete(runner.models, inputs, emitted, lengths, _gen(s_comp))
                ok = comp.zero_row is None
                res.smoke.append({"check": f"contract and zero mass: {case.name}", "rows": rows, "ok": ok})
                if not ok and not self.done:  # lossy; the contract checks of the rest still run
                    r = res.cases[i]
                    self._hard_failure(r, runner, inputs, emitted, lengths, comp, 0)
                    r.status, r.n, r.rejected = "ran", rows, True
                    r.pvalue = r.p_chi2 = r.p_cells = r.p_positions = 0.0
                    res.verdict = LOSSY
                    self.done = True
            if self.done:  # a hard failure: lossy, and every contract check passed
                return
            candidates = [
                r for r in self.runners.values() if not r.case.paired and _collision(r.models) <= 0.9
            ]
            self.entropic = min(candidates, key=lambda r: _collision(r.models)) if candidates else None
            if self.entropic is not None:
                where, index = self.entropic.case.name, None
                _determinism(self.entropic, c.seed)
                res.smoke.append(
                    {"check": f"equal seeds, equal outputs: {self.entropic.case.name}", "ok": True}
                )
            self._time_calls(order)
        except ContractViolation as e:
            self._violation(e, where, "smoke stage", index, 0)

    def plan(self) -> None:
        """Samples per case from the statistics alone; the estimate only informs the budget guard."""
        c = self.config
        for i, r in enumerate(self.result.cases):
            if c.smoke_only(r.case):
                r.status, r.reason, r.planned = (
                    "smoke_only",
                    "the plan gives this vocabulary the smoke stage only",
                    0,
                )
                continue
            base = c.samples or stats.plan_samples(
                r.tv_planned, self.alpha_case / TESTS_PER_CASE, c.power, c.max_cells - 1
            )
            r.planned = base * (2 if r.case.paired else 1)
            r.estimate = self._estimate(i, r.planned) / self.caller.parallel
        if self.on_plan is not None:
            self.on_plan(self.result, self.budget.left())

    def sample(self) -> None:
        """Cases in coverage order, each to its plan; the budget only guards."""
        c, res = self.config, self.result
        order = coverage_order(self.cases)
        total = sum(r.planned for r in res.cases) or 1
        done_rows = 0
        for i in order:
            r, runner = res.cases[i], self.runners[i]
            if r.status == "smoke_only":
                continue
            if self.stopped is not None:
                r.status, r.reason = "not_run", f"not run: {self.stopped}"
                continue
            if self.budget.exhausted() or r.estimate > self.budget.left():
                r.status = "not_run"
                r.reason = (
                    "the budget is spent"
                    if self.budget.exhausted()
                    else f"its plan needs about {r.estimate:.0f} s, {self.budget.left():.0f} s of budget left"
                )
                continue
            t0 = self.clock()
            bs = runner.batch_size(c)
            runner.timeout = max(c.call_timeout, 20 * self._estimate(i, bs))
            seqs, subs = [], []
            lengths = np.zeros(len(r.case.parents) + 1, dtype=np.int64)
            got, k = 0, 0
            calls = self.caller.calls(runner, c, [min(bs, r.planned - j) for j in range(0, r.planned, bs)])
            try:
                while got < r.planned:
                    if got and self.budget.exhausted():
                        r.reason = f"the budget ran out after {got} of {r.planned} steps"
                        break
                    k += 1
                    b = min(bs, r.planned - got)
                    try:
                        inputs, emitted, lens, comp = next(calls)
                    except CallsUnavailable as e:
                        self.stopped = e.detail
                        r.reason = f"sampling stopped after {got} of {r.planned} steps: {e.detail}"
                        break
                    lengths += np.bincount(lens.numpy(), minlength=len(lengths))[: len(lengths)]
                    got += b
                    if comp.zero_row is not None:
                        self._hard_failure(r, runner, inputs, emitted, lens, comp, k)
                        break
                    seqs.append(comp.completed)
                    subs.append(inputs.sub)
                    self.say(r.case.name, 0.05 + 0.95 * (done_rows + got) / total)
            except ContractViolation as e:
                r.n = got
                self._violation(e, r.case.name, "sampling", i, k)
                return
            finally:
                calls.close()
            if got == 0:  # the caller stopped before the case's first call
                r.status = "not_run"
                continue
            done_rows += r.planned
            r.n = got
            r.status = "ran" if got >= r.planned else "short"
            r.lengths = lengths.tolist()
            r.seconds = self.clock() - t0
            if r.hard_failure:
                r.status = "ran"
                r.pvalue = r.p_chi2 = r.p_cells = r.p_positions = 0.0
                if c.stop_early:
                    break
                continue
            evaluate_case(r, runner, torch.cat(seqs), torch.cat(subs), c, self.alpha_case)
            if c.stop_early and r.pvalue <= self.alpha_case:
                break
        mark_after_finding(res)

    def verdict(self) -> None:
        res, c = self.result, self.config
        pvalues = [r.pvalue if r.status in ("ran", "short") else 1.0 for r in res.cases]
        for r, rej in zip(res.cases, stats.holm(pvalues, c.alpha)):
            r.rejected = rej
        if any(r.rejected for r in res.cases):
            res.verdict = LOSSY
            return
        res.verdict = UNDERPOWERED if res.short else PASS
        if self.entropic is not None and self.backend.law != "greedy":
            # A verifier found lossless must still draw from its generator (checked after the
            # statistics: a lossy verifier may be deterministic for the very reason it is lossy).
            try:
                _determinism(self.entropic, c.seed, generator_use=True)
            except ContractViolation as e:
                self._violation(e, self.entropic.case.name, "generator check", None, None)

    def reference_lengths(self) -> None:
        """Beside the witness's emitted lengths, those of an exact reference rule on the same
        inputs (the same seeded calls): where they agree, acceptance was right and the deviation
        is in the token emitted after it. At most :data:`REFERENCE_ROWS` rows."""
        w = self.result.witness
        if self.result.verdict != LOSSY or w is None or w.hard_failure or not w.n:
            return
        name = reference_rule(self.backend.kind, w.case.process, self.backend.law)
        from specproof.properties.conformance.backends import REGISTRY

        ref = REGISTRY.get((self.backend.kind, name))
        if ref is None or ref.name == self.backend.name:
            return
        runner, c = Runner(ref, w.case, self.config.call_timeout), self.config
        lengths = np.zeros(len(w.case.parents) + 1, dtype=np.int64)
        rows, k = min(w.n, REFERENCE_ROWS if ref.speed == "python" else w.n), 0
        bs = self.runners[w.index].batch_size(c)
        try:
            while int(lengths.sum()) < rows:
                k += 1
                s_in, s_ver, _ = call_seeds(c.seed, w.case, k)
                _, _, lens = runner.run(min(bs, rows - int(lengths.sum())), _gen(s_in), _gen(s_ver))
                lengths += np.bincount(lens.numpy(), minlength=len(lengths))[: len(lengths)]
        except ContractViolation:
            return
        w.reference, w.reference_lengths = name, lengths.tolist()

    def shrink(self) -> None:
        c, res = self.config, self.result
        w = res.witness
        if res.verdict != LOSSY or c.shrink <= 0 or w is None:
            return
        self.say("shrinking the witness", 1.0)
        from specproof.properties.audit.shrink import shrink

        res.shrunk, res.note = shrink(self.backend, w, c, self.alpha_case)

    # -- helpers --------------------------------------------------------------------------------

    def _probe(self, probe: Probe) -> dict[str, Any] | None:
        gen = _gen(derive_seed(self.config.seed, 77, probe.vocab))
        out = call_verifier(self.backend.fn, *probe.args, gen, timeout=self.config.call_timeout)
        return check_probe(probe, out)

    def _time_calls(self, order: list[int]) -> None:
        """Estimate seconds per call and per row: one more, larger call on the first case and on
        the largest one (their outputs are validated, not used). Only the estimates depend on
        it, never what is sampled or tested."""
        c = self.config
        sizes = {i: self.cases[i].vocab * len(self.cases[i].parents) for i in order}
        timed = [order[0]] + ([max(order, key=lambda i: sizes[i])] if len(order) > 1 else [])
        fits = []
        for i in dict.fromkeys(timed):
            runner, (r0, t0) = self.runners[i], self.smoke_times[i]
            per_row = t0 / r0
            r1 = int(min(runner.batch_size(c), max(2 * r0, 0.3 / max(per_row, 1e-7))))
            r1 += r1 % 2 if runner.case.paired else 0
            s_in, s_ver, _ = call_seeds(c.seed, self.cases[i], 10**6)
            start = self.clock()
            runner.run(r1, _gen(s_in), _gen(s_ver))
            t1 = self.clock() - start
            row = max((t1 - t0) / max(1, r1 - r0), t1 / r1 / 4, 1e-8)
            fits.append((sizes[i], row, max(0.0, t1 - row * r1)))
        call = max(f[2] for f in fits)
        if len(fits) == 2 and fits[1][0] > fits[0][0]:
            (x0, y0, _), (x1, y1, _) = fits
            slope = max(0.0, (y1 - y0) / (x1 - x0))
            base = max(1e-8, y0 - slope * x0)
        else:
            slope, base = 0.0, fits[0][1]
        for i in order:
            self.cost[i] = (base + slope * sizes[i], call)

    def _estimate(self, i: int, rows: int) -> float:
        per_row, per_call = self.cost.get(i, (1e-4, 1e-3))
        bs = self.runners[i].batch_size(self.config) if i in self.runners else rows
        return rows * per_row + math.ceil(rows / max(1, bs)) * per_call

    def _violation(
        self, e: ContractViolation, case: str, where: str, index: int | None, call: int | None
    ) -> None:
        v: dict[str, Any] = {"kind": e.kind, "detail": e.detail, "row": e.row, "case": case, "during": where}
        if e.traceback:
            v["traceback"] = e.traceback
        if index is not None and call is not None:
            v["regenerate"] = {
                "case": self.cases[index].to_json(),
                "seed": self.config.seed,
                "index": index,
                "call": call,
                "rows": self._rows_of_call(index, call),
            }
        self.result.verdict = VIOLATION
        self.result.violation = v
        self.done = True

    def _rows_of_call(self, index: int, call: int) -> int:
        case, c = self.cases[index], self.config
        if call == 0:
            return c.smoke_rows + (c.smoke_rows % 2 if case.paired else 0)
        r = self.result.cases[index]
        bs = self.runners[index].batch_size(c)
        return min(bs, max(2, r.planned - (call - 1) * bs)) if r.planned else bs

    def _hard_failure(self, r: CaseResult, runner: Runner, inputs, emitted, lens, comp, call: int) -> None:
        """A token with probability 0. When it is a support id narrowed (a 16-bit wrap, a float
        round trip), the verifier mangled an id: an ``id_narrowing`` contract violation."""
        row, pos = comp.zero_row, comp.zero_position
        assert row is not None and pos is not None
        y = int(comp.completed[row, pos])
        for x in runner.models.support.tolist():
            hint = narrowing_hint(y, int(x))
            if hint:
                raise ContractViolation(
                    "id_narrowing",
                    f"call {call}, row {row} emitted {emitted[row, : int(lens[row])].tolist()} "
                    f"(drafts {inputs.tokens[row, 1:].tolist()}): {y} has probability 0{hint}",
                    row,
                )
        r.hard_failure = {
            "detail": (
                f"row {row} of call {call} emitted token {int(comp.completed[row, pos])} at position "
                f"{pos + 1}, which the {self.backend.law} law gives probability 0 (emitted: "
                f"{emitted[row, : int(lens[row])].tolist()}; drafts: {inputs.tokens[row, 1:].tolist()})"
            ),
            "tokens": inputs.tokens[row].tolist(),
            "parents": inputs.parents[row].tolist(),
            "emitted": emitted[row, : int(lens[row])].tolist(),
            "position": pos + 1,
            "row": row,
            "call": call,
            "rows": int(emitted.shape[0]),
        }


def audit(
    backend: Backend,
    config: AuditConfig | None = None,
    progress: ProgressFn | None = None,
    on_plan: PlanFn | None = None,
    clock: Callable[[], float] = time.perf_counter,
    caller: Caller | None = None,
) -> AuditResult:
    """Audit one backend (see the module docstring). ``caller`` runs the sampling stage's calls
    (here by default; :mod:`specproof.properties.shard` spreads them over workers)."""
    return Audit(backend, config or AuditConfig(), progress, on_plan, clock, caller).run()


def plan_table(result: AuditResult, budget_left: float) -> str:
    """The plan, as printed before sampling: cases in coverage order, samples and estimates."""
    c = result.config
    rows = sorted(result.cases, key=lambda r: coverage_order([x.case for x in result.cases]).index(r.index))
    total = sum(r.estimate for r in rows)
    lines = [
        f"plan for {result.backend}: {len(rows)} cases, {sum(r.planned for r in rows):,} steps, "
        f"about {total:.0f} s (estimated from the smoke stage); budget guard {c.budget_seconds:g} s",
        f"  each case: power {c.power:g} against TV >= its planned TV on its cells, level "
        f"{c.alpha:g} / {len(rows)} cases (Holm)",
    ]
    for r in rows:
        lines.append(
            f"  {r.case.name:32s} {r.planned:>10,} steps  TV {r.tv_planned:<6g} ~{r.estimate:7.1f} s"
        )
    if total > budget_left:
        lines.append(
            f"  warning: the plan needs about {total:.0f} s but {budget_left:.0f} s of budget remain; "
            "cases that do not fit are not run and the verdict will be underpowered "
            f"(raise --budget-seconds to about {1.2 * total:.0f}, or raise --tv)"
        )
    return "\n".join(lines)
