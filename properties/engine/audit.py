"""The engine audit: is a whole speculative generate loop lossless, end to end?

``audit_engine(spec, config)`` tests an engine (:mod:`.engine.registry`: ``generate(prompt_ids,
max_new_tokens, seed)`` and ``target_law(context)``) against the law it must reproduce: the
first M new tokens of a lossless engine are a sample of the target's own M-token law, whose
next-token laws ``target_law`` gives. The law is read lazily, only at the prefixes the test needs,
so ``V^M`` is never enumerated. Cases are (prompt, sampling setting) pairs. In order:

1. **Contract.** Every output must be exactly M ids in ``[0, V)``; every law V non-negative
   numbers summing to 1 (within 1e-6). On the case whose first token is most random: equal
   seeds give equal tokens, also with another call in between (state that outlives a call);
   and when the law is not close to a point mass, further seeds must not all reproduce the
   first output (a probability below 1e-9 under the law: ``ignores_seed``). An exception on
   valid input is a violation too. Any violation ends the audit: ``contract_violation``.
2. **Plan.** Each case gets ``n`` samples from ``alpha``, ``tv``, ``power`` and the cells alone
   (never from the clock): the smallest ``n`` whose chi-square test on ``max_cells`` cells at
   the per-look level has the power against every law at TV ``tv`` on the cells
   (:func:`.stats.plan_samples`); a point-mass law (greedy decoding) needs ``n`` with ``(1 -
   tv)^n <= 1 - power``, since any deviation there is a hard failure. The plan and its estimated
   time (from the contract phase's calls) are announced before any sampling.
3. **Sampling with looks.** Cases are sampled round-robin in ``looks`` stages (at n/8, n/4, n/2,
   n for four looks); after each stage every case is tested with
   :func:`.sequence_test.test_sequences` (cells of the joint law and per-position conditional
   tests, Bonferroni) at ``alpha / (cases x looks)``. A case below that level stops the audit:
   ``lossy`` (group-sequential with Bonferroni over the looks, so stopping early costs no
   validity). A sample the law cannot emit stops it at once (p = 0, the sample is the witness).
4. **Verdict.** Each case's p-value is ``looks x`` its smallest look p-value; Holm over the
   cases at ``alpha``: ``lossy`` if any is rejected; otherwise ``pass`` when every case ran its
   plan and ``underpowered`` when the time budget (``budget_seconds``, only a guard) stopped
   some case short; the result lists them and the TV each can vouch for.

Statistics and calibration: proofs_notes/engine_audit.md (measured false-alarm rate of this
procedure at alpha 0.01 over 300 seeded audits of exact engines, and its power on the mutants).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from specproof.properties.audit import stats
from specproof.properties.audit.sequence_test import SequenceTest, test_sequences
from specproof.properties.engine.registry import Engine, EngineSpec, Sampling, Seq
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import SpecproofError, UsageError


@dataclass
class EngineAuditConfig:
    alpha: float = 1e-4  # family-wise, over the cases
    tv: float = 0.1  # the smallest deviation (on the cells) the plan must detect
    power: float = 0.99
    seed: int = 0
    budget_seconds: float = 600.0  # a guard: past it, the audit ends underpowered
    max_cells: int = 64
    min_count: float = 10.0
    samples: int | None = None  # a fixed number of samples per case instead of the plan's
    looks: int = 4
    stop_early: bool = True  # stop at the first case rejected at its look level
    threads: int | None = 1  # torch intra-op threads while sampling (tiny models: 1 is fastest)

    def validate(self) -> None:
        stats.check_probability(self.alpha, "alpha")
        stats.check_probability(self.tv, "tv")
        stats.check_probability(self.power, "power")
        if not self.budget_seconds > 0:
            raise UsageError(f"budget_seconds: must be positive, got {self.budget_seconds}")
        if self.samples is not None and self.samples < 2:
            raise UsageError(f"samples: must be at least 2, got {self.samples}")
        if self.max_cells < 2:
            raise UsageError(f"max_cells: must be at least 2, got {self.max_cells}")
        if not 1 <= self.looks <= 10:
            raise UsageError(f"looks: must be between 1 and 10, got {self.looks}")


@dataclass(frozen=True)
class EngineCase:
    index: int
    prompt: Seq
    sampling: Sampling
    tokens: int

    @property
    def name(self) -> str:
        return f"{self.sampling.label} after [{' '.join(map(str, self.prompt))}]"

    def to_json(self) -> dict[str, Any]:
        return {"prompt": list(self.prompt), "sampling": self.sampling.to_json(), "tokens": self.tokens}


@dataclass
class CaseResult:
    case: EngineCase
    planned: int
    schedule: list[int]
    n: int = 0
    looks: list[tuple[int, float]] = field(default_factory=list)  # (samples, p) at each look
    test: SequenceTest | None = None
    pvalue: float = 1.0
    rejected: bool = False
    hard_failure: dict[str, Any] | None = None
    point_mass: bool = False
    seconds: float = 0.0
    budget_limited: bool = False
    forwards: Counter[int] = field(default_factory=Counter)  # target forwards per call
    power: float = 0.0
    detectable_tv: float = 1.0

    def to_json(self) -> dict[str, Any]:
        t = self.test
        return {
            "case": self.case.to_json(),
            "name": self.case.name,
            "planned_samples": self.planned,
            "schedule": self.schedule,
            "samples": self.n,
            "looks": [{"samples": n, "pvalue": p} for n, p in self.looks],
            "pvalue": self.pvalue,
            "rejected": self.rejected,
            "hard_failure": self.hard_failure,
            "point_mass": self.point_mass,
            "power_at_tv": self.power,
            "detectable_tv": self.detectable_tv,
            "cells": None if t is None else t.cells,
            "unresolved_mass": None if t is None else t.unresolved,
            "uncovered": None if t is None else t.uncovered,
            "test": None if t is None else t.to_json(),
            "description": None if t is None else t.summary(),
            "target_forwards_per_call": {str(k): v for k, v in sorted(self.forwards.items())},
            "seconds": self.seconds,
            "budget_limited": self.budget_limited,
        }


@dataclass
class EngineAuditResult:
    engine: str
    group: str
    doc: str
    config: EngineAuditConfig
    tokens: int
    vocab: int
    expected: str | None = None
    verdict: Verdict = Verdict.PASS
    violation: dict[str, Any] | None = None
    cases: list[CaseResult] = field(default_factory=list)
    seconds: float = 0.0
    per_sample_seconds: float = 0.0
    plan_text: str = ""

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def agrees(self) -> bool | None:
        return None if self.expected is None else self.expected == self.verdict.value

    @property
    def samples(self) -> int:
        return sum(c.n for c in self.cases)

    @property
    def witness(self) -> CaseResult | None:
        bad = [c for c in self.cases if c.rejected]
        return min(bad, key=lambda c: c.pvalue) if bad else None

    def witness_text(self) -> str:
        """One line: where the deviation is (the prefix and the next-token law that deviates)."""
        w = self.witness
        if self.violation:
            return f"[{self.violation['kind']}] {self.violation['detail']}"
        if w is None:
            return ""
        if w.hard_failure:
            return f"{w.case.name}: {w.hard_failure['detail']}"
        if w.test is None:
            return w.case.name
        text = f"{w.case.name}: {w.test.summary()}"
        if "deviates at" not in text and w.test.worst:
            cell = w.test.worst[0]
            text += (
                f"; most deviating cell (prefix of the M tokens) {cell['cell']}: "
                f"{cell['observed']} vs {cell['expected']:.1f}"
            )
        return text

    def short_witness(self) -> str:
        """The witness in one short line: the case, p, and where the law deviates (the prefix and
        the next-token counts observed vs expected), or the violation."""
        if self.violation:
            return f"[{self.violation['kind']}] {self.violation['detail']}"
        w = self.witness
        if w is None:
            return ""
        if w.hard_failure:
            return f"{w.case.name}: {w.hard_failure['detail']}"
        t = w.test
        if t is None:
            return w.case.name
        pos = t.conditional.witness() if t.conditional else None
        if pos is not None and pos.worst is not None and pos.pvalue <= t.p_joint:
            g = pos.worst
            cells = ", ".join(f"{lab}: {o} vs {e:.1f}" for lab, o, e in zip(g.labels, g.observed, g.expected))
            where = f"next token at position {pos.position} after {g.label}: {cells}"
        elif t.worst:
            cell = t.worst[0]
            where = f"cell {cell['cell']}: {cell['observed']} vs {cell['expected']:.1f}"
        else:
            where = ""
        return f"{w.case.name}, {w.n} samples, p = {w.pvalue:.2g}; {where}"

    def summary(self) -> str:
        c = self.config
        head = f"engine {self.engine}: {self.verdict.value.upper()}"
        if self.expected is not None:
            head += f" (expected {self.expected})"
        lines = [head]
        if self.violation:
            v = self.violation
            lines.append(f"  contract violation [{v['kind']}] in {v['case']}: {v['detail']}")
            return "\n".join(lines)
        lines.append(
            f"  {len(self.cases)} cases (M = {self.tokens}, V = {self.vocab}), {self.samples} samples, "
            f"{self.seconds:.1f} s ({1000 * self.per_sample_seconds:.1f} ms per sample); "
            f"family-wise alpha {c.alpha:g} (Holm), {c.looks} looks"
        )
        if self.verdict == Verdict.LOSSY:
            lines.append(f"  witness: {self.witness_text()}")
        elif self.verdict in (Verdict.PASS, Verdict.UNDERPOWERED):
            if c.samples:
                lines.append(f"  no deviation detected at the fixed size of {c.samples} samples per case")
            else:
                word = "every case ran its plan" if self.verdict == Verdict.PASS else "some cases ran short"
                lines.append(
                    f"  no deviation detected; {word} (power {c.power:g} against TV {c.tv:g} on the cells)"
                )
            for r in self.cases:
                mark = " (budget-limited)" if r.budget_limited else ""
                lines.append(
                    f"    {r.case.name}: {r.n}/{r.planned} samples, detects TV {r.detectable_tv:.3g} "
                    f"at power {c.power:g}{mark}"
                )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        c = self.config
        w = self.witness
        return {
            "verdict": self.verdict.value,
            "engine": self.engine,
            "group": self.group,
            "doc": self.doc,
            "expected": self.expected,
            "agrees": self.agrees,
            "alpha": c.alpha,
            "tv": c.tv,
            "power": c.power,
            "seed": c.seed,
            "looks": c.looks,
            "max_cells": c.max_cells,
            "budget_seconds": c.budget_seconds,
            "tokens": self.tokens,
            "vocab": self.vocab,
            "samples": self.samples,
            "seconds": self.seconds,
            "per_sample_seconds": self.per_sample_seconds,
            "plan": self.plan_text,
            "violation": self.violation,
            "witness": None if w is None else w.to_json(),
            "witness_text": self.witness_text(),
            "short_witness": self.short_witness(),
            "cases": [r.to_json() for r in self.cases],
        }


class _Violation(SpecproofError):
    """A contract violation of the engine under audit (ends the audit ``contract_violation``)."""

    def __init__(self, kind: str, detail: str, case: EngineCase) -> None:
        super().__init__(detail)
        self.kind, self.detail, self.case = kind, detail, case


def _seed(*parts: int) -> int:
    state = np.random.SeedSequence([abs(int(x)) for x in parts]).generate_state(1, dtype=np.uint64)[0]
    return int(state >> 2)


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class _Runner:
    """One case: the engine for its setting, the memoized law, validated calls."""

    def __init__(self, engine: Engine, case: EngineCase, vocab: int) -> None:
        self.engine, self.case, self.vocab = engine, case, vocab
        self.memo: dict[Seq, list[float]] = {}

    def law(self, prefix: Seq) -> list[float]:
        if prefix not in self.memo:
            try:
                row = self.engine.target_law(list(self.case.prompt + prefix))
                arr = np.asarray([float(v) for v in row], dtype=np.float64)
            except _Violation:
                raise
            except Exception as e:
                raise _Violation("exception", f"target_law raised {type(e).__name__}: {e}", self.case) from e
            where = f"target_law after {list(self.case.prompt + prefix)}"
            if arr.shape != (self.vocab,):
                raise _Violation(
                    "target_law", f"{where}: {arr.shape[0]} entries, expected V = {self.vocab}", self.case
                )
            if not np.isfinite(arr).all() or (arr < 0).any() or abs(arr.sum() - 1) > 1e-6:
                raise _Violation(
                    "target_law", f"{where}: not a law (sum {arr.sum():.9g}, min {arr.min():.3g})", self.case
                )
            self.memo[prefix] = list(arr / arr.sum())
        return self.memo[prefix]

    def generate(self, seed: int) -> Seq:
        M = self.case.tokens
        try:
            out = self.engine.generate(list(self.case.prompt), M, seed)
        except Exception as e:
            raise _Violation("exception", f"generate raised {type(e).__name__}: {e}", self.case) from e
        if isinstance(out, torch.Tensor):
            out = out.reshape(-1).tolist()
        try:
            seq = tuple(int(x) for x in out)
            if any(int(x) != x for x in out):
                raise ValueError
        except (TypeError, ValueError) as e:
            raise _Violation("type", f"generate returned {out!r}, not a list of token ids", self.case) from e
        if len(seq) != M:
            raise _Violation(
                "length", f"seed {seed}: {len(seq)} tokens returned, {M} asked: {list(seq)}", self.case
            )
        bad = [x for x in seq if not 0 <= x < self.vocab]
        if bad:
            raise _Violation(
                "out_of_range", f"seed {seed}: id {bad[0]} outside [0, {self.vocab}): {list(seq)}", self.case
            )
        return seq

    def forwards(self) -> int | None:
        steps = getattr(self.engine, "last_steps", None)
        if steps:
            return len(steps)
        n = getattr(self.engine, "last_forwards", None)
        return int(n) if isinstance(n, int) else None

    def probability(self, seq: Seq) -> tuple[float, int | None]:
        """P(seq) under the law, and the first position (1-based) with probability 0."""
        p = 1.0
        for d, x in enumerate(seq):
            q = self.law(seq[:d])[x]
            if q <= 0:
                return 0.0, d + 1
            p *= q
        return p, None

    def point_mass(self) -> bool:
        node: Seq = ()
        while len(node) < self.case.tokens:
            row = self.law(node)
            nz = [x for x, v in enumerate(row) if v > 0]
            if len(nz) != 1:
                return False
            node += (nz[0],)
        return True


def _contract(runner: _Runner, seed: int) -> list[float]:
    """Determinism and seed use on one case (module docstring, step 1); returns call times."""
    times = []
    outs = []
    for s in (seed, seed + 1, seed):
        t0 = time.perf_counter()
        outs.append(runner.generate(_seed(s, 7)))
        times.append(time.perf_counter() - t0)
    if outs[0] != outs[2]:
        raise _Violation(
            "nondeterministic",
            f"two calls with the same seed (another call in between) returned {list(outs[0])} "
            f"and {list(outs[2])}",
            runner.case,
        )
    again = runner.generate(_seed(seed, 7))
    if again != outs[0]:
        raise _Violation(
            "nondeterministic",
            f"two consecutive calls with the same seed returned {list(outs[2])} and {list(again)}",
            runner.case,
        )
    p, _ = runner.probability(outs[0])
    if 0 < p < 0.5:
        k = math.ceil(math.log(1e-9) / math.log(p))
        if all(runner.generate(_seed(seed, 8, j)) == outs[0] for j in range(k)):
            raise _Violation(
                "ignores_seed",
                f"{k + 1} different seeds all returned {list(outs[0])}, a sequence of probability {p:.3g} "
                f"under the law (all equal by chance: below {p**k:.1e})",
                runner.case,
            )
    return times


def _plan(config: EngineAuditConfig, point_mass: bool, alpha_look: float) -> int:
    if config.samples:
        return config.samples
    if point_mass:
        return max(2, math.ceil(math.log(1 - config.power) / math.log(1 - config.tv)))
    return stats.plan_samples(config.tv, alpha_look / 2, config.power, config.max_cells - 1)


def _schedule(n: int, looks: int) -> list[int]:
    sizes = sorted({max(1, math.ceil(n / 2**j)) for j in range(looks)})
    return sizes


ProgressFn = Callable[[str, float], None]


def audit_engine(
    spec: EngineSpec,
    config: EngineAuditConfig | None = None,
    progress: ProgressFn | None = None,
    announce: Callable[[str], None] | None = None,
) -> EngineAuditResult:
    """Audit one engine (module docstring). ``announce`` receives the plan before sampling."""
    config = config or EngineAuditConfig()
    config.validate()
    say = progress or (lambda what, frac: None)
    start = time.perf_counter()
    M = spec.tokens
    if not 1 <= M <= 12:
        raise UsageError(f"tokens: M must lie in [1, 12], got {M}")
    result = EngineAuditResult(
        engine=spec.name,
        group=spec.group,
        doc=spec.doc,
        config=config,
        tokens=M,
        vocab=spec.vocab,
        expected=spec.expect,
    )
    cases = [
        EngineCase(i, tuple(prompt), s, M)
        for i, (s, prompt) in enumerate((s, p) for s in spec.samplings for p in spec.prompts)
    ]
    if not cases:
        raise UsageError("an engine audit needs at least one prompt and one sampling setting")
    L = config.looks
    out_of_time = False
    alpha_look = config.alpha / (len(cases) * L)
    runners: list[_Runner] = []
    results: list[CaseResult] = []
    with _threads(config.threads):
        try:
            # 1. build, and the contract on the most random case
            engines: dict[Sampling, Engine] = {}
            for case in cases:
                if case.sampling not in engines:
                    say(f"building {case.sampling.label}", 0.0)
                    try:
                        engines[case.sampling] = spec.build(case.sampling)
                    except Exception as e:
                        raise _Violation(
                            "exception", f"building the engine raised {type(e).__name__}: {e}", case
                        ) from e
                runners.append(_Runner(engines[case.sampling], case, spec.vocab))
            masses = []
            for rn in runners:
                masses.append(rn.point_mass())
            first_max = [max(rn.law(())) for rn in runners]
            chosen = min(range(len(runners)), key=lambda i: first_max[i])
            say("contract checks", 0.0)
            times = _contract(runners[chosen], config.seed)
            per_sample = float(np.median(times))
            for rn, pm in zip(runners, masses):
                n = _plan(config, pm, alpha_look)
                results.append(CaseResult(rn.case, n, [n] if pm else _schedule(n, L), point_mass=pm))
            total = sum(c.planned for c in results)
            estimate = total * per_sample
            lines = [
                f"engine {spec.name}: {len(cases)} cases (prompts x settings), M = {M} new tokens, "
                f"V = {spec.vocab}",
                f"  plan: {total:,} samples for power {config.power:g} against TV {config.tv:g} on up to "
                f"{config.max_cells} cells, family-wise alpha {config.alpha:g}, {L} looks at level "
                f"{alpha_look:.3g} each",
            ]
            for c in results:
                what = (
                    "point mass: any deviation is a hard failure"
                    if c.point_mass
                    else f"looks at {c.schedule}"
                )
                lines.append(f"    {c.case.name}: {c.planned:,} samples ({what})")
            lines.append(
                f"  probe: {1000 * per_sample:.1f} ms per sample -> about {estimate:.0f} s "
                f"(budget {config.budget_seconds:g} s)"
            )
            if estimate > config.budget_seconds:
                lines.append(
                    "  the plan does not fit the budget: unless a deviation is found first, "
                    "the audit will end underpowered"
                )
            result.plan_text = "\n".join(lines)
            if announce:
                announce(result.plan_text)

            # 2-3. sampling, round-robin by looks
            seqs: list[list[Seq]] = [[] for _ in results]
            stop = False
            done_before = 0
            for look in range(L):
                for i, (runner, r) in enumerate(zip(runners, results)):
                    if r.rejected or look >= len(r.schedule):
                        continue
                    target_n = r.schedule[look]
                    t0 = time.perf_counter()
                    while r.n < target_n:
                        if time.perf_counter() - start > config.budget_seconds:
                            out_of_time = True
                            break
                        seq = runner.generate(_seed(config.seed, r.case.index, r.n))
                        f = runner.forwards()
                        if f is not None:
                            r.forwards[f] += 1
                        seqs[i].append(seq)
                        r.n += 1
                        done_before += 1
                        p, zero_at = runner.probability(seq)
                        if zero_at is not None:
                            r.hard_failure = {
                                "sample": r.n - 1,
                                "sequence": list(seq),
                                "position": zero_at,
                                "detail": (
                                    f"sample {r.n - 1} emitted {list(seq)}, whose token "
                                    f"{seq[zero_at - 1]} at position {zero_at} has probability 0 under the "
                                    "target law after "
                                    f"{list(r.case.prompt + seq[: zero_at - 1])}"
                                ),
                            }
                            r.pvalue, r.rejected = 0.0, True
                            r.looks.append((r.n, 0.0))
                            break
                        say(r.case.name, min(1.0, done_before / max(1, total)))
                    r.seconds += time.perf_counter() - t0
                    if r.rejected:
                        stop = config.stop_early
                    elif r.n >= 2 and not r.point_mass and (r.n == target_n or out_of_time):
                        _test(r, runner, seqs[i], config, alpha_look)
                        if r.looks[-1][1] <= alpha_look:
                            r.rejected = True
                            stop = config.stop_early
                    if stop or out_of_time:
                        break
                if stop or out_of_time:
                    break
        except _Violation as v:
            result.verdict = Verdict.CONTRACT_VIOLATION
            result.violation = {"kind": v.kind, "detail": v.detail, "case": v.case.name}
            result.cases = results
            result.seconds = time.perf_counter() - start
            return result

    # 4. verdict: each case's p-value is Bonferroni over its looks; Holm over the cases
    for r in results:
        r.budget_limited = out_of_time and r.n < r.planned and not r.rejected
        if r.looks and not r.hard_failure:
            r.pvalue = min(1.0, L * min(p for _, p in r.looks))
        _power(r, config, alpha_look)
    holm = stats.holm([r.pvalue for r in results], config.alpha)
    for res, rej in zip(results, holm):
        res.rejected = res.rejected or rej
    result.cases = results
    result.per_sample_seconds = sum(r.seconds for r in results) / max(1, sum(r.n for r in results))
    if any(r.rejected for r in results):
        result.verdict = Verdict.LOSSY
    elif any(r.budget_limited for r in results):
        result.verdict = Verdict.UNDERPOWERED
    else:
        result.verdict = Verdict.PASS
    result.seconds = time.perf_counter() - start
    return result


def _test(
    r: CaseResult, runner: _Runner, seqs: list[Seq], config: EngineAuditConfig, alpha_look: float
) -> None:
    t = test_sequences(
        seqs,
        runner.law,
        runner.vocab,
        r.case.tokens,
        alpha=alpha_look,
        max_cells=config.max_cells,
        min_count=config.min_count,
        power=config.power,
    )
    r.test = t
    r.looks.append((len(seqs), t.pvalue))


def _power(r: CaseResult, config: EngineAuditConfig, alpha_look: float) -> None:
    if r.n == 0:
        return
    if r.point_mass:
        r.power = 1.0 - (1.0 - config.tv) ** r.n
        r.detectable_tv = 1.0 - (1.0 - config.power) ** (1.0 / r.n)
        return
    if r.test is None:
        return
    df = max(1, r.test.cells - 1)
    r.power = stats.power_at(r.n, config.tv, alpha_look / 2, df) if r.test.cells > 1 else 0.0
    r.detectable_tv = r.test.detectable_tv if r.test.cells > 1 else 1.0


# --------------------------------------------------------------------------- reports


def report_blocks(results: Sequence[EngineAuditResult], title: str = "specproof engine audit") -> list[Any]:
    """Blocks for :mod:`.report`'s Markdown and HTML writers."""
    import datetime

    from specproof.properties.audit.report import Bars

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out: list[Any] = [("h1", title), ("p", f"Generated {now}.")]
    if results:
        cfg = results[0].config
        out.append(
            (
                "p",
                f"Family-wise alpha {cfg.alpha:g} per engine (Holm over its cases, Bonferroni over "
                f"{cfg.looks} looks); planned for TV {cfg.tv:g} at power {cfg.power:g} on up to "
                f"{cfg.max_cells} cells; seed {cfg.seed}; budget {cfg.budget_seconds:g} s per engine.",
            )
        )
    rows = []
    for r in results:
        agrees = "" if r.agrees is None else ("yes" if r.agrees else "**NO**")
        det = [c.detectable_tv for c in r.cases if c.n]
        rows.append(
            [
                r.engine,
                r.expected or "",
                r.verdict.value,
                agrees,
                str(r.samples),
                f"{max(det):.3f}" if det and r.verdict != Verdict.CONTRACT_VIOLATION else "",
                f"{1000 * r.per_sample_seconds:.1f}",
                f"{r.seconds:.1f}",
                r.short_witness(),
            ]
        )
    head = [
        "engine",
        "expected",
        "verdict",
        "agrees",
        "samples",
        "TV detected (worst case)",
        "ms/sample",
        "s",
    ]
    out.append(("table", ([*head, "witness"], rows)))
    for r in results:
        if r.verdict == Verdict.PASS and len(results) > 1:
            continue
        out.append(("h2", f"{r.engine}: {r.verdict.value}"))
        out.append(("p", r.doc))
        if r.cases:
            planned = sum(c.planned for c in r.cases)
            out.append(
                (
                    "p",
                    f"Plan: {planned:,} samples over {len(r.cases)} cases (M = {r.tokens}, V = {r.vocab}); "
                    f"drawn: {r.samples:,} at {1000 * r.per_sample_seconds:.1f} ms per sample.",
                )
            )
        if r.violation:
            v = r.violation
            out.append(("p", f"Contract violation [{v['kind']}] in {v['case']}: {v['detail']}"))
            continue
        w = r.witness or (min(r.cases, key=lambda c: c.pvalue) if r.cases else None)
        if w is not None:
            label = "Witness" if r.witness else "No case rejected; the closest"
            out.append(
                ("p", f"{label}: {w.case.name}." + (f" {w.hard_failure['detail']}" if w.hard_failure else ""))
            )
            t = w.test
            if t is not None and not w.hard_failure:
                out.append(("p", t.summary()))
                pos = t.conditional.witness() if t.conditional else None
                if pos is not None and pos.worst is not None:
                    g = pos.worst
                    out.append(
                        (
                            "bars",
                            Bars(
                                f"Next token at position {pos.position} after {g.label}: "
                                "observed vs expected",
                                list(g.labels),
                                list(g.observed),
                                list(g.expected),
                            ),
                        )
                    )
        rows = []
        for c in r.cases:
            rows.append(
                [
                    c.case.name,
                    str(c.planned),
                    str(c.n),
                    "0 (hard failure)" if c.hard_failure else f"{c.pvalue:.3g}",
                    f"{c.detectable_tv:.3f}",
                    "" if c.test is None else f"{c.test.unresolved:.3f}",
                    "" if c.test is None else f"{c.test.uncovered:.3f}",
                    _forwards(c.forwards),
                    "**rejected**" if c.rejected else "",
                    "budget" if c.budget_limited else "",
                ]
            )
        out.append(
            (
                "table",
                (
                    [
                        "case",
                        "planned",
                        "samples",
                        "p",
                        f"TV detected at power {r.config.power:g}",
                        "unresolved",
                        "uncovered",
                        "target forwards per call",
                        "",
                        "limited",
                    ],
                    rows,
                ),
            )
        )
    return out


def _forwards(hist: Counter[int]) -> str:
    if not hist:
        return ""
    n = sum(hist.values())
    mean = sum(k * v for k, v in hist.items()) / n
    return f"mean {mean:.2f} ({min(hist)}-{max(hist)})"


def write_report(
    path: str, results: Sequence[EngineAuditResult], title: str = "specproof engine audit"
) -> None:
    """Markdown, or HTML for ``.html``/``.htm``, with :mod:`.report`'s writers."""
    from specproof.properties.audit.report import to_html, to_markdown

    blocks = report_blocks(results, title)
    text = to_html(blocks) if path.lower().endswith((".html", ".htm")) else to_markdown(blocks)
    with open(path, "w") as f:
        f.write(text)


# --------------------------------------------------------------------------- command line

#: The engine audit's defaults where the shared ``specproof audit`` options default to the
#: verifier audit's (an engine sample costs milliseconds, a verifier row microseconds).
ENGINE_DEFAULTS: dict[str, float] = {"alpha": 1e-4, "tv": 0.1, "cells": 64, "budget_seconds": 600.0}


class _Default(float):
    """A default value of a shared option, marked so that the engine audit can tell it from an
    explicit one (it behaves as the plain float everywhere else)."""


def add_cli_arguments(parser: Any) -> None:
    """The options of ``specproof audit engine TARGET`` beyond the shared ones (``--alpha``,
    ``--tv``, ``--power``, ``--seed``, ``--samples``, ``--cells``, ``--budget-seconds``,
    ``--json``, ``--report``, ``--progress``), whose verifier defaults the engine audit replaces
    with :data:`ENGINE_DEFAULTS` unless they are given."""
    for action in parser._actions:
        if action.dest in ENGINE_DEFAULTS and isinstance(action.default, (int, float)):
            action.default = _Default(action.default)
    g = parser.add_argument_group(
        "engine audit (specproof audit engine TARGET)",
        "TARGET: a registered engine (specproof backends) or module:attr giving an engine, a factory "
        "factory(temperature=, top_k=, top_p=) -> engine, or an EngineSpec. Defaults for engines: "
        "--alpha 1e-4 --tv 0.1 --cells 64 --budget-seconds 600.",
    )
    g.add_argument(
        "--prompt", action="append", metavar="IDS", help="prompt token ids, e.g. '0 6' or 0,6 (repeatable)"
    )
    g.add_argument(
        "--tokens", type=int, metavar="M", help="new tokens per sample, the law's horizon (default 4)"
    )
    g.add_argument(
        "--temperature", action="append", type=float, metavar="T", help="sampling temperature (repeatable)"
    )
    g.add_argument("--top-k", type=int, metavar="K", help="top-k for every setting")
    g.add_argument("--top-p", type=float, metavar="P", help="top-p for every setting")
    g.add_argument(
        "--looks", type=int, default=4, help="interim looks per case, for early stopping (default 4)"
    )
    g.add_argument(
        "--engine-group",
        action="append",
        metavar="GROUP",
        help="with no TARGET: audit every available engine of GROUP (reference, mutant, alternative, hf, "
        "vllm, sglang, optimized, all) against what it declares",
    )


def _option(args: Any, name: str) -> Any:
    v = getattr(args, name, None)
    if v is None or isinstance(v, _Default):
        return ENGINE_DEFAULTS[name]
    return v


def _prompts(raw: list[str] | None) -> list[Seq] | None:
    if not raw:
        return None
    out = []
    for text in raw:
        try:
            ids = tuple(int(x) for x in text.replace(",", " ").split())
        except ValueError as e:
            raise UsageError(f"--prompt: {text!r} is not a list of token ids") from e
        if not ids or any(x < 0 for x in ids):
            raise UsageError(f"--prompt: {text!r} must hold at least one non-negative id")
        out.append(ids)
    return out


def _samplings(args: Any, spec: EngineSpec) -> list[Sampling] | None:
    temps = getattr(args, "temperature", None)
    top_k, top_p = getattr(args, "top_k", None), getattr(args, "top_p", None)
    if not temps and top_k is None and top_p is None:
        return None
    base = temps or [s.temperature for s in spec.samplings]
    return [Sampling(t, top_k, top_p) for t in base]


def config_from_args(args: Any) -> EngineAuditConfig:
    budget = _option(args, "budget_seconds")
    config = EngineAuditConfig(
        alpha=float(_option(args, "alpha")),
        tv=float(_option(args, "tv")),
        power=float(getattr(args, "power", 0.99) or 0.99),
        seed=int(getattr(args, "seed", 0) or 0),
        budget_seconds=float(budget),
        max_cells=int(_option(args, "cells")),
        samples=getattr(args, "samples", None),
        looks=int(getattr(args, "looks", 4) or 4),
    )
    config.validate()
    return config


def versions() -> dict[str, str]:
    import importlib.metadata
    import platform

    out = {"python": platform.python_version(), "machine": platform.machine()}
    for pkg in ("specproof", "torch", "transformers", "vllm", "sglang"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def run_cli(args: Any) -> int:
    """``specproof audit engine TARGET ...`` (or ``--engine-group G``); returns the exit status:
    the verdict's for one engine; for a group, 0 when every verdict is the declared one, 1
    otherwise; 4 on a usage error."""
    import json
    import sys

    from specproof.properties.engine.registry import (
        ENGINES,
        EngineTargetError,
        _ensure_registered,
        resolve_engine,
        with_options,
    )
    from specproof.properties.verdicts import USAGE_ERROR

    def fail(msg: str) -> int:
        print(f"specproof audit engine: {msg}", file=sys.stderr)
        return USAGE_ERROR

    try:
        config = config_from_args(args)
        prompts = _prompts(getattr(args, "prompt", None))
        tokens = getattr(args, "tokens", None)
        if tokens is not None and not 1 <= tokens <= 12:
            raise UsageError(f"--tokens: must lie in [1, 12], got {tokens}")
        groups: list[str] = list(getattr(args, "engine_group", None) or [])
        target = getattr(args, "target", None)
        if target and groups:
            raise UsageError("give TARGET or --engine-group, not both")
        if not target and not groups:
            raise UsageError(
                "TARGET: missing; usage: specproof audit engine TARGET (or --engine-group GROUP)"
            )
        if target:
            specs = [resolve_engine(target)]
        else:
            _ensure_registered()
            known = {s.group for s in ENGINES.values()} | {"all"}
            bad = [g for g in groups if g not in known]
            if bad:
                raise UsageError(f"--engine-group: unknown {bad[0]!r}; known: {', '.join(sorted(known))}")
            specs = [s for s in ENGINES.values() if "all" in groups or s.group in groups]
        specs = [with_options(s, prompts, _samplings(args, s), tokens) for s in specs]
    except (ValueError, EngineTargetError) as e:
        return fail(str(e))
    show = getattr(args, "progress", "auto") == "on" or (
        getattr(args, "progress", "auto") == "auto" and sys.stderr.isatty() and not _under_ci()
    )
    results, skipped = [], []
    for spec in specs:
        ok, why = spec.available()
        if not ok:
            skipped.append({"engine": spec.name, "reason": why})
            print(f"{spec.name}: not run ({why})")
            continue

        def bar(what: str, frac: float, _name: str = spec.name) -> None:
            if show:
                done = int(30 * max(0.0, min(1.0, frac)))
                sys.stderr.write(f"\r{_name[:34]:<34} [{'#' * done}{'.' * (30 - done)}] {what[:28]:<28}")
                sys.stderr.flush()

        try:
            res = audit_engine(spec, config, progress=bar, announce=print)
        except KeyboardInterrupt:
            print(f"\n{spec.name}: interrupted", file=sys.stderr)
            return Verdict.INTERRUPTED.exit_code
        except ValueError as e:
            return fail(f"{spec.name}: {e}")
        if show:
            sys.stderr.write("\n")
        print(res.summary())
        results.append(res)
    doc = {"versions": versions(), "results": [r.to_json() for r in results], "not_run": skipped}
    if getattr(args, "json", None):
        with open(args.json, "w") as f:
            json.dump(doc if len(specs) > 1 else (results[0].to_json() if results else doc), f, indent=2)
            f.write("\n")
    if getattr(args, "report", None) and results:
        write_report(args.report, results)
    if len(specs) == 1 and not getattr(args, "engine_group", None):
        return results[0].exit_code if results else USAGE_ERROR
    disagree = [r for r in results if r.agrees is False]
    for r in disagree:
        print(f"DISAGREES: {r.engine}: {r.verdict.value}, declared {r.expected}")
    return 1 if disagree else 0


def _under_ci() -> bool:
    import os

    return bool(os.environ.get("CI"))


# --------------------------------------------------------------------------- calibration


def _clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    from scipy import stats as st

    a = 1 - level
    lo = 0.0 if k == 0 else float(st.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(st.beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def calibration(
    runs: int = 300,
    samples: int = 300,
    alpha: float = 0.01,
    power_runs: int = 20,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """False alarms of the audit (4 looks, fixed size) on exact engines over ``runs`` seeds at
    ``alpha``, and the rejection rate of each lossy mutant loop on its witness case over
    ``power_runs`` seeds at the default suite's level; ``python -m
    specproof.properties.engine.audit --calibrate`` writes docs/measurements/engine-audit-calibration.*."""
    from specproof.properties.engine.registry import T07 as T_07
    from specproof.properties.engine.registry import T1 as T_1
    from specproof.properties.engine.registry import resolve_engine, with_options

    out: dict[str, Any] = {
        "versions": versions(),
        "alpha": alpha,
        "runs": runs,
        "samples": samples,
        "exact": [],
    }
    for name in ("reference.direct", "reference.draft.token"):
        spec = with_options(resolve_engine(name), prompts=[(0, 6)], samplings=[T_1])
        t0 = time.perf_counter()
        alarms, pmins = 0, []
        for s in range(runs):
            r = audit_engine(spec, EngineAuditConfig(alpha=alpha, samples=samples, seed=1000 + s))
            alarms += r.verdict == Verdict.LOSSY
            pmins.append(r.cases[0].pvalue)
        lo, hi = _clopper_pearson(alarms, runs)
        row = {
            "engine": name,
            "case": "T=1 after [0 6], M = 4",
            "runs": runs,
            "samples": samples,
            "false_alarms": alarms,
            "rate": alarms / runs,
            "ci95": [lo, hi],
            "seconds": time.perf_counter() - t0,
        }
        say(f"{name}: {alarms}/{runs} false alarms at alpha {alpha:g} (95% CI [{lo:.3f}, {hi:.3f}])")
        out["exact"].append(row)
    out["power"] = []
    cases = [
        ("mutant.greedy_draft_soft_law", (0, 6), T_1, 300),
        ("mutant.no_kv_rollback", (5, 2, 5, 2), T_07, 700),
        ("mutant.temperature_target_only", (0, 6), T_07, 700),
        ("mutant.late_features", (5, 2, 5, 2), T_07, 700),
    ]
    for name, prompt, s_, n in cases:
        spec = with_options(resolve_engine(name), prompts=[prompt], samplings=[s_])
        t0 = time.perf_counter()
        hits, used = 0, []
        for s in range(power_runs):
            r = audit_engine(spec, EngineAuditConfig(alpha=1e-3, samples=n, seed=2000 + s))
            hits += r.verdict == Verdict.LOSSY
            used.append(r.cases[0].n)
        lo, hi = _clopper_pearson(hits, power_runs)
        out["power"].append(
            {
                "engine": name,
                "case": f"{s_.label} after {list(prompt)}",
                "samples": n,
                "alpha": 1e-3,
                "runs": power_runs,
                "rejected": hits,
                "ci95": [lo, hi],
                "mean_samples_used": float(np.mean(used)),
                "seconds": time.perf_counter() - t0,
            }
        )
        say(f"{name}: rejected in {hits}/{power_runs} runs at {n} samples (mean {np.mean(used):.0f} used)")
    return out


def calibration_markdown(doc: dict[str, Any]) -> str:
    v = doc["versions"]
    lines = [
        "# Engine audit: calibration and power",
        "",
        f"Measured with `python -m specproof.properties.engine.audit --calibrate` (specproof "
        f"{v.get('specproof', '?')}, torch {v.get('torch', '?')}, Python {v['python']}).",
        "",
        f"False alarms of exact engines: each run is one audit (4 looks, Bonferroni over them; "
        f"{doc['samples']} samples; alpha {doc['alpha']:g}), seeds 1000 on.",
        "",
        "| engine | case | runs | samples/run | alpha | false alarms | rate [95% CI] |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in doc["exact"]:
        lines.append(
            f"| {r['engine']} | {r['case']} | {r['runs']} | {r['samples']} | {doc['alpha']:g} | "
            f"{r['false_alarms']} | {r['rate']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] |"
        )
    lines += [
        "",
        "Power on the mutant loops (the cases and sizes of tests/test_engine_audit.py, alpha 1e-3, "
        "seeds 2000 on):",
        "",
        "| mutant | case | samples | runs | rejected [95% CI] | mean samples used (early stop) |",
        "|---|---|---:|---:|---|---:|",
    ]
    for r in doc["power"]:
        lines.append(
            f"| {r['engine']} | {r['case']} | {r['samples']} | {r['runs']} | {r['rejected']} "
            f"[{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] | {r['mean_samples_used']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m specproof.properties.engine.audit")
    ap.add_argument("--calibrate", action="store_true", help="measure false alarms and power")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--power-runs", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    a = ap.parse_args(argv)
    if not a.calibrate:
        ap.print_help()
        return 4
    doc = calibration(a.runs, a.samples, power_runs=a.power_runs)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(calibration_markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
