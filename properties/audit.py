"""The statistical audit of a black-box verifier.

``audit(backend, config)`` runs, in order:

1. **Contract checks.** One small batch of every case through the verifier, each output
   validated (:mod:`.contracts`); then, on the case whose first token is most random, equally
   seeded generators must give equal outputs. Any violation ends the audit: verdict
   ``contract_violation``. (After a ``pass``, the same case checks that the output depends on
   the generator: nine seeds must not all reproduce one output, which a verifier drawing from
   its generator does with probability below 1e-96.)
2. **Planning.** Each case's sample size is planned so the case's test has the requested power
   against any completed-sequence law at TV ``tv`` or more on its cells, at level
   ``alpha / cases`` (:func:`.stats.plan_samples`). The per-row time measured in step 1 gives
   the cost; when the total exceeds the budget, time is shared out (cheap cases get what they
   need, the others equal shares) and each case reports the power it reached instead. Cases
   are sampled cheapest first (by the probes' timings), or by input size when the sample size
   is fixed (``samples``), so that a fixed-size audit's verdict never depends on the machine.
3. **Sampling.** Batches of independent rows: drafts drawn by the case's proposal process,
   the verifier called, the output validated, completed to the horizon with samples of the
   preserved law, and binned into the case's cells. An emitted token that the preserved law
   gives probability 0 is a hard failure (p-value 0) with the row as witness.
4. **Verdict.** Holm's procedure over the cases at family-wise ``alpha``: ``lossy`` when some
   case is rejected, otherwise ``pass`` (no deviation detected at the stated power).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from . import stats
from .backends import Backend
from .battery import Case, Models, build_models, chain_battery, complete, sample_inputs, tree_battery
from .contracts import ContractViolation, call_verifier, check_chain_output, check_tree_output
from .partition import Partition, build_partition

PASS, LOSSY, VIOLATION = "pass", "lossy", "contract_violation"
INCONCLUSIVE = "inconclusive"  # the budget left no time to run a single case (a usage error)
EXIT = {PASS: 0, LOSSY: 1, VIOLATION: 2, INCONCLUSIVE: 2}


@dataclass
class AuditConfig:
    alpha: float = 1e-6
    tv: float = 0.01
    power: float = 0.99
    seed: int = 0
    budget_seconds: float = 60.0
    max_cells: int = 128
    min_count: float = 10.0
    samples: int | None = None  # a fixed sample size per case, instead of the planner's
    batch: int = 8192
    max_batch_bytes: int = 96 * 2**20
    cases: list[Case] | None = None  # instead of the default battery
    stop_early: bool = False  # stop at the first case rejected at alpha / cases (Holm rejects it anyway)
    shrink_seconds: float = 0.0  # after a lossy verdict, time to search smaller witness cases

    def validate(self) -> None:
        stats.check_probability(self.alpha, "alpha")
        stats.check_probability(self.tv, "tv")
        stats.check_probability(self.power, "power")
        if not self.budget_seconds > 0:
            raise ValueError(f"budget_seconds: must be positive, got {self.budget_seconds}")
        if self.samples is not None and self.samples < 2:
            raise ValueError(f"samples: must be at least 2, got {self.samples}")
        if self.max_cells < 2:
            raise ValueError(f"max_cells: must be at least 2, got {self.max_cells}")


@dataclass
class CaseResult:
    case: Case
    planned: int
    n: int = 0
    cells: int = 0
    unresolved: float = 0.0
    statistic: float = 0.0
    p_chi2: float = 1.0
    p_cells: float = 1.0
    pvalue: float = 1.0
    power: float = 0.0
    detectable_tv: float = 1.0
    tv: stats.TVInterval | None = None
    rejected: bool = False
    hard_failure: dict[str, Any] | None = None
    worst: list[dict[str, Any]] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    seconds: float = 0.0
    budget_limited: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.to_json(),
            "description": self.case.describe(),
            "planned_samples": self.planned,
            "samples": self.n,
            "cells": self.cells,
            "unresolved_mass": self.unresolved,
            "chi2": self.statistic,
            "p_chi2": self.p_chi2,
            "p_cells": self.p_cells,
            "pvalue": self.pvalue,
            "power_at_tv": self.power,
            "detectable_tv": self.detectable_tv,
            "tv": None if self.tv is None else self.tv.to_json(),
            "rejected": self.rejected,
            "hard_failure": self.hard_failure,
            "worst_cells": self.worst,
            "emitted_length_counts": self.lengths,
            "seconds": self.seconds,
            "budget_limited": self.budget_limited,
        }


@dataclass
class AuditResult:
    backend: str
    kind: str
    processes: tuple[str, ...]
    law: str
    config: AuditConfig
    verdict: str = PASS
    violation: dict[str, Any] | None = None
    cases: list[CaseResult] = field(default_factory=list)
    seconds: float = 0.0
    expected: str | None = None
    shrunk: CaseResult | None = None
    skipped: list[str] = field(default_factory=list)  # cases the budget left no time to run

    @property
    def exit_code(self) -> int:
        return EXIT[self.verdict]

    @property
    def witness(self) -> CaseResult | None:
        """The smallest rejected case (fewest nodes, then smallest vocabulary)."""
        bad = [c for c in self.cases if c.rejected]
        return min(bad, key=lambda c: (len(c.case.parents), c.case.vocab, c.pvalue)) if bad else None

    def summary(self) -> str:
        c = self.config
        head = f"{self.backend} ({self.kind}; {', '.join(self.processes)}): {self.verdict.upper()}"
        if self.verdict == INCONCLUSIVE:
            return (
                f"{head}\n  no case could run within --budget-seconds {self.config.budget_seconds:g}: "
                "raise the budget"
            )
        if self.verdict == VIOLATION and self.violation:
            v = self.violation
            return f"{head}\n  contract violation [{v['kind']}] in case {v['case']}: {v['detail']}"
        n = sum(r.n for r in self.cases)
        lines = [
            head,
            f"  {len(self.cases)} cases, {n} steps, {self.seconds:.1f} s; "
            f"family-wise alpha {c.alpha:g} (Holm)",
        ]
        if self.verdict == PASS:
            reached = [r for r in self.cases if r.power >= c.power]
            lines.append(
                f"  no deviation detected; power >= {c.power:g} against TV >= {c.tv:g} on "
                f"{len(reached)}/{len(self.cases)} cases"
            )
            short = sorted((r for r in self.cases if r.power < c.power), key=lambda r: -r.detectable_tv)
            for r in short[:3]:
                lines.append(
                    f"    {r.case.name}: {r.n} steps, detects TV {r.detectable_tv:.3g} at power {c.power:g}"
                    + (" (budget-limited)" if r.budget_limited else "")
                )
            if len(short) > 3:
                lines.append(f"    ... and {len(short) - 3} more below the requested power")
            if self.skipped:
                lines.append(f"    not run (no budget left): {', '.join(self.skipped)}")
        else:
            w = self.shrunk or self.witness
            if w is not None:
                what = "shrunk witness" if self.shrunk else "witness"
                lines.append(f"  {what}: {w.case.describe()}")
                if w.hard_failure:
                    lines.append(f"  {w.hard_failure['detail']}")
                else:
                    tv = w.tv
                    lines.append(
                        f"  p = {w.pvalue:.3g}; TV on cells {tv.estimate:.4f} "
                        f"[{tv.low:.4f}, {tv.high:.4f}] ({tv.confidence:.0%})"
                        if tv
                        else f"  p = {w.pvalue:.3g}"
                    )
                    for cell in w.worst[:3]:
                        lines.append(
                            f"    cell {cell['cell']!r}: observed {cell['observed']}, "
                            f"expected {cell['expected']:.1f}"
                        )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        c = self.config
        return {
            "verdict": self.verdict,
            "backend": self.backend,
            "kind": self.kind,
            "processes": list(self.processes),
            "law": self.law,
            "expected": self.expected,
            "alpha": c.alpha,
            "tv": c.tv,
            "power": c.power,
            "seed": c.seed,
            "budget_seconds": c.budget_seconds,
            "seconds": self.seconds,
            "violation": self.violation,
            "witness": None if self.witness is None else self.witness.to_json(),
            "shrunk_witness": None if self.shrunk is None else self.shrunk.to_json(),
            "cases": [r.to_json() for r in self.cases],
            "skipped_cases": self.skipped,
        }


def default_cases(backend: Backend, seed: int) -> list[Case]:
    if backend.kind == "chain":
        return chain_battery(backend.processes, seed=seed)
    cases: list[Case] = []
    for p in backend.processes:
        cases.extend(tree_battery(p, seed=seed))
    return cases


def _seed(*parts: int) -> int:
    return int(
        np.random.SeedSequence([abs(int(x)) for x in parts]).generate_state(1, dtype=np.uint64)[0] >> 1
    )


def _gen(*parts: int) -> torch.Generator:
    return torch.Generator().manual_seed(_seed(*parts))


class _Runner:
    """One case: its models and the verifier call, validated."""

    def __init__(self, backend: Backend, case: Case) -> None:
        self.backend = backend
        self.case = case
        self.models: Models = build_models(case, greedy=backend.law == "greedy")

    def batch_size(self, config: AuditConfig) -> int:
        per_row = self.case.vocab * len(self.case.parents) * 4 * 2
        return max(1, min(config.batch, config.max_batch_bytes // per_row))

    def run(self, batch: int, gen_inputs: torch.Generator, gen_verifier: torch.Generator):
        inputs = sample_inputs(self.models, batch, gen_inputs)
        V = self.case.vocab
        if self.backend.kind == "chain":
            d, dp, tp = inputs.chain_args()
            out = call_verifier(self.backend.fn, d, dp, tp, gen_verifier)
            emitted, lengths = check_chain_output(out, d, V)
        else:
            dp = inputs.draft_probs
            out = call_verifier(
                self.backend.fn, inputs.parents, inputs.tokens, dp, inputs.target_probs, gen_verifier
            )
            emitted, lengths = check_tree_output(out, inputs.parents, inputs.tokens, V)
        return inputs, emitted, lengths


def _violation(e: ContractViolation, case: Case, where: str) -> dict[str, Any]:
    return {"kind": e.kind, "detail": e.detail, "row": e.row, "case": case.name, "during": where}


def _collision(models: Models) -> float:
    """Probability that two independent draws of the first token agree."""
    law = models.preserve_s[models.index_py(models.roots[0], 0)]
    return float((law**2).sum())


def _determinism(runner: _Runner, seed: int, generator_use: bool = False) -> None:
    """Equal seeds give equal outputs; eight other seeds do not all reproduce the first output.

    Rows are enough that a verifier using the generator repeats every first token under another
    seed with probability below 1e-12 per seed (rows are independent under the contract).
    """
    rows = max(8, math.ceil(math.log(1e-12) / math.log(max(_collision(runner.models), 1e-9))))
    inputs = sample_inputs(runner.models, rows, _gen(seed, 99, 1))
    args: tuple[Any, ...]
    if runner.backend.kind == "chain":
        args = inputs.chain_args()
    else:
        args = (inputs.parents, inputs.tokens, inputs.draft_probs, inputs.target_probs)

    def call(s: int) -> list[torch.Tensor]:
        out = call_verifier(runner.backend.fn, *args, _gen(seed, 99, s))
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


def _allocate(need: list[float], budget: float) -> list[float]:
    """Water-filling: each case gets min(need, share) with the shares summing to the budget."""
    if sum(need) <= budget:
        return list(need)
    lo, hi = 0.0, max(need)
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(min(x, mid) for x in need) > budget:
            hi = mid
        else:
            lo = mid
    return [min(x, lo) for x in need]


def _partitions(runner: _Runner, n: int, config: AuditConfig) -> list[Partition]:
    m = runner.models
    if not runner.case.paired:
        return [build_partition(m, n, 0, config.min_count, config.max_cells)]
    pairs = max(1, n // 2)
    side = max(2, int(math.isqrt(config.max_cells)))
    mc = math.sqrt(config.min_count * pairs)
    return [build_partition(m, pairs, s, mc, side) for s in (0, 1)]


def _cell_probs(parts: list[Partition]) -> tuple[np.ndarray, list[str]]:
    if len(parts) == 1:
        return parts[0].probs, parts[0].labels
    a, b = parts
    probs = np.outer(a.probs, b.probs).ravel()
    labels = [f"A[{la}] B[{lb}]" for la in a.labels for lb in b.labels]
    return probs, labels


def _assign(parts: list[Partition], completed: torch.Tensor, sub: torch.Tensor) -> torch.Tensor:
    if len(parts) == 1:
        return parts[0].assign(completed)
    a = parts[0].assign(completed[sub == 0])
    b = parts[1].assign(completed[sub == 1])
    m = min(len(a), len(b))
    return a[:m] * parts[1].cells + b[:m]


def _test(
    r: CaseResult,
    runner: _Runner,
    seqs: torch.Tensor,
    subs: torch.Tensor,
    config: AuditConfig,
    alpha_case: float,
) -> None:
    """Bin the completed sequences on the case's partition (fixed by the law and n) and test."""
    parts = _partitions(runner, len(seqs), config)
    probs, labels = _cell_probs(parts)
    cells = _assign(parts, seqs, subs)
    counts = np.bincount(cells.numpy(), minlength=len(probs))[: len(probs)]
    n = int(counts.sum())
    r.cells = len(probs)
    r.unresolved = float(sum(p.unresolved for p in parts) / len(parts))
    r.statistic, r.p_chi2 = stats.pearson(counts, probs)
    r.p_cells, _ = stats.exact_cells(counts, probs)
    r.pvalue = min(1.0, 2 * min(r.p_chi2, r.p_cells))
    r.tv = stats.tv_interval(counts, probs)
    if len(probs) == 1 and r.unresolved == 0.0:
        # one possible sequence: any deviation emits a zero-probability token, a hard failure
        r.power = 1.0 - (1.0 - config.tv) ** n
        r.detectable_tv = 1.0 - (1.0 - config.power) ** (1.0 / n)
    else:
        r.power = stats.power_at(n, config.tv, alpha_case / 2, len(probs) - 1)
        r.detectable_tv = stats.detectable_tv(n, alpha_case / 2, config.power, len(probs) - 1)
    z = (counts - n * probs) / np.sqrt(np.maximum(n * probs, 1e-300))
    for j in np.argsort(-np.abs(z))[:5]:
        r.worst.append(
            {"cell": labels[j], "observed": int(counts[j]), "expected": float(n * probs[j]), "z": float(z[j])}
        )


ProgressFn = Callable[[str, float], None]


def audit(
    backend: Backend, config: AuditConfig | None = None, progress: ProgressFn | None = None
) -> AuditResult:
    """Audit one backend (see the module docstring)."""
    config = config or AuditConfig()
    config.validate()
    start = time.perf_counter()
    cases = config.cases if config.cases is not None else default_cases(backend, config.seed)
    result = AuditResult(backend.name, backend.kind, backend.processes, backend.law, config)
    say = progress or (lambda what, frac: None)

    # 1. contracts, and the cost of each case (per row and per call, from two probe sizes)
    runners: dict[int, _Runner] = {}
    skipped: list[int] = []
    checking = cases[0]
    per_row: dict[int, float] = {}
    per_call: dict[int, float] = {}
    first_cost = 0.0
    try:
        probe_order = sorted(range(len(cases)), key=lambda j: cases[j].vocab * len(cases[j].parents))
        for pos, i in enumerate(probe_order):
            case = cases[i]
            checking = case
            if pos > 0 and time.perf_counter() - start > 0.5 * config.budget_seconds and not config.samples:
                skipped.extend(probe_order[pos:])  # no time left even to probe them
                break
            if pos > 0 and not config.samples:
                # a cost linear in the input size, from the smallest case: skip a case whose
                # probe alone would take a quarter of the budget
                first = cases[probe_order[0]]
                scale = (case.vocab * len(case.parents)) / (first.vocab * len(first.parents))
                if 3 * first_cost * scale > 0.25 * config.budget_seconds:
                    skipped.append(i)
                    continue
            say(f"contract check {case.name}", 0.0)
            runner = _Runner(backend, case)
            runners[i] = runner
            if pos == 0:
                small, big = 2, min(runner.batch_size(config), 256)
            elif first_cost > 1e-3 or (first_cost > 1e-5 and case.vocab > 1000):
                small, big = 1, 2  # a slow verifier (or a slow one at this vocabulary): probe little
            else:
                small, big = 2, min(runner.batch_size(config), 256 if first_cost < 1e-4 else 16)
            times = []
            for j, rows in enumerate((small, big)):
                t0 = time.perf_counter()
                runner.run(rows, _gen(config.seed, i, 0, 2 * j), _gen(config.seed, i, 0, 2 * j + 1))
                times.append(time.perf_counter() - t0)
                if pos == 0 and j == 0 and times[0] / small > 1e-3:
                    big = min(big, 8)
            b = max((times[1] - times[0]) / (big - small), times[1] / big / 4, 1e-7)
            per_row[i] = b
            per_call[i] = max(0.0, times[1] - b * big)
            first_cost = first_cost if pos else b
        candidates = [r for r in runners.values() if not r.case.paired and _collision(r.models) <= 0.9]
        entropic = min(candidates, key=lambda r: _collision(r.models)) if candidates else None
        if entropic is not None:
            checking = entropic.case
            _determinism(entropic, config.seed)
    except ContractViolation as e:
        result.verdict = VIOLATION
        result.violation = _violation(e, checking, "contract check")
        result.seconds = time.perf_counter() - start
        return result

    # 2. plan: rows per case (a paired case needs two rows per observation)
    alpha_case = config.alpha / len(cases)
    base = config.samples or stats.plan_samples(config.tv, alpha_case / 2, config.power, config.max_cells - 1)
    results = [CaseResult(case, base * (2 if case.paired else 1)) for case in cases]

    def cost(i: int, rows: int) -> float:
        return rows * per_row[i] + math.ceil(rows / runners[i].batch_size(config)) * per_call[i]

    # the probes mis-predict (warm-up, caches); learn the ratio actual / predicted as cases finish
    spent = {"predicted": 0.0, "actual": 0.0}

    def factor() -> float:
        if spent["predicted"] <= 0:
            return 1.0
        return min(5.0, max(0.2, spent["actual"] / spent["predicted"]))

    # 3. sample, cheapest cases first, re-sharing the remaining time before each case: a case
    #    whose share covers its planned size runs to it; the others stop when their share is spent
    # With a fixed sample size (--samples) the order is by input size (vocabulary x nodes, then
    # the battery's order), not by the probes' timings, so that the verdict (and which case
    # stops an early-stopping audit) does not depend on the machine.
    if config.samples:
        order = sorted(runners, key=lambda j: (cases[j].vocab * len(cases[j].parents), j))
    else:
        order = sorted(runners, key=lambda j: per_row[j])
    ran: list[int] = []
    try:
        for pos, i in enumerate(order):
            runner, r = runners[i], results[i]
            ran.append(i)
            t0 = time.perf_counter()
            remaining = config.budget_seconds * 0.85 - (t0 - start)
            if remaining <= 0 and not config.samples:
                ran.pop()
                skipped.append(i)
                continue
            needs = [cost(j, results[j].planned) * factor() for j in order[pos:]]
            share = _allocate(needs, max(0.0, remaining))[0]
            allowance = math.inf if config.samples or share >= needs[0] else share
            bs = runner.batch_size(config)
            seqs, subs = [], []
            lengths = np.zeros(len(runner.case.parents) + 1, dtype=np.int64)
            got, k = 0, 0
            while got < r.planned and (got < 2 or time.perf_counter() - t0 < allowance):
                k += 1
                left = allowance - (time.perf_counter() - t0)
                affordable = int(left / (per_row[i] * factor())) if math.isfinite(left) else r.planned
                b = min(bs, r.planned - got, max(2, affordable))
                b += b % 2 if runner.case.paired else 0
                inputs, emitted, lens = runner.run(b, _gen(config.seed, i, k, 0), _gen(config.seed, i, k, 1))
                comp = complete(runner.models, inputs, emitted, lens, _gen(config.seed, i, k, 2))
                lengths += np.bincount(lens.numpy(), minlength=len(lengths))[: len(lengths)]
                got += b
                if comp.zero_row is not None and comp.zero_position is not None:
                    row, pos = comp.zero_row, comp.zero_position
                    r.hard_failure = {
                        "detail": (
                            f"row {row} of batch {k} emitted token {int(comp.completed[row, pos])} "
                            "at position "
                            f"{pos + 1}, which the {backend.law} law gives probability 0 (emitted: "
                            f"{emitted[row, : int(lens[row])].tolist()}; "
                            f"drafts: {inputs.tokens[row, 1:].tolist()})"
                        ),
                        "tokens": inputs.tokens[row].tolist(),
                        "parents": inputs.parents[row].tolist(),
                        "emitted": emitted[row, : int(lens[row])].tolist(),
                        "position": pos + 1,
                    }
                    break
                seqs.append(comp.completed)
                subs.append(inputs.sub)
                say(runner.case.name, (pos + got / r.planned) / len(cases))
            r.n = got
            r.budget_limited = got < r.planned
            r.lengths = lengths.tolist()
            if r.hard_failure:
                r.pvalue = r.p_chi2 = r.p_cells = 0.0
                r.seconds = time.perf_counter() - t0
                if config.stop_early:
                    break
                continue
            _test(r, runner, torch.cat(seqs), torch.cat(subs), config, alpha_case)
            r.seconds = time.perf_counter() - t0
            spent["predicted"] += cost(i, got)
            spent["actual"] += r.seconds
            if config.stop_early and r.pvalue <= alpha_case:
                break
    except ContractViolation as e:
        result.verdict = VIOLATION
        result.violation = _violation(e, runner.case, "sampling")
        result.cases = [results[j] for j in sorted(ran)]
        result.seconds = time.perf_counter() - start
        return result

    # 4. verdict
    # cases skipped by an early stop count as not rejected (p = 1): Holm over all of them
    results = [results[j] for j in sorted(ran)]
    result.skipped = [cases[j].name for j in sorted(skipped)]
    pvalues = [r.pvalue for r in results] + [1.0] * (len(cases) - len(results))
    rejected = stats.holm(pvalues, config.alpha)[: len(results)]
    for r, rej in zip(results, rejected):
        r.rejected = rej
    result.cases = results
    result.verdict = LOSSY if any(rejected) else PASS
    if not results:
        result.verdict = INCONCLUSIVE
    if result.verdict == PASS and entropic is not None and backend.law != "greedy":
        # A verifier found lossless must still draw from its generator (checked after the
        # statistics: a lossy verifier may be deterministic for the very reason it is lossy).
        try:
            _determinism(entropic, config.seed, generator_use=True)
        except ContractViolation as e:
            result.verdict = VIOLATION
            result.violation = _violation(e, entropic.case, "generator check")
    if result.verdict == LOSSY and config.shrink_seconds > 0 and result.witness is not None:
        say("shrinking the witness", 1.0)
        result.shrunk = shrink(backend, result.witness, config, alpha_case)
    result.seconds = time.perf_counter() - start
    return result


def smaller_cases(case: Case) -> list[Case]:
    """One-step-smaller variants: fewer drafts (a prefix of the tree), then a single pair style."""
    out = []
    for n in range(2, len(case.parents)):
        out.append(replace(case, parents=case.parents[:n], name=f"{case.name}>{n - 1}nodes"))
    if len(case.styles) > 1:
        for style in case.styles:
            out.append(replace(case, styles=(style,), name=f"{case.name}>{style}"))
    return out


def shrink(
    backend: Backend, witness: CaseResult, config: AuditConfig, alpha_case: float
) -> CaseResult | None:
    """Greedy search for a smaller case that is still rejected.

    Each candidate is tested at ``alpha_case / 64`` (at most 64 candidates are tried), so a
    reported shrunk witness is itself a finding at the audit's per-case level.
    """
    deadline = time.perf_counter() + config.shrink_seconds
    current, best, tried = witness.case, None, 0
    while time.perf_counter() < deadline and tried < 64:
        for cand in smaller_cases(current):
            if time.perf_counter() >= deadline or tried >= 64:
                break
            tried += 1
            left = deadline - time.perf_counter()
            sub = AuditConfig(
                alpha=alpha_case / 64,
                tv=config.tv,
                power=config.power,
                seed=config.seed,
                budget_seconds=max(1.0, min(left, config.shrink_seconds / 4)),
                max_cells=config.max_cells,
                min_count=config.min_count,
                cases=[cand],
                stop_early=True,
            )
            r = audit(backend, sub)
            if r.verdict == LOSSY and r.cases and r.cases[0].rejected:
                current, best = cand, r.cases[0]
                break
        else:
            break
    return best
