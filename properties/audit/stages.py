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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from specproof.properties.audit import stats
from specproof.properties.audit.battery import (
    LARGE_VOCAB,
    Case,
    Models,
    build_models,
    chain_battery,
    complete,
    coverage_order,
    sample_inputs,
    tree_battery,
)
from specproof.properties.audit.conditional import ConditionalResult, battery_tests
from specproof.properties.audit.partition import Partition, build_partition
from specproof.properties.audit.probes import BIG_V, Probe, check_probe, probes
from specproof.properties.conformance.backends import Backend
from specproof.properties.conformance.contracts import (
    ContractViolation,
    call_verifier,
    check_chain_output,
    check_tree_output,
    narrowing_hint,
)
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError

PASS, LOSSY, VIOLATION = Verdict.PASS, Verdict.LOSSY, Verdict.CONTRACT_VIOLATION
UNDERPOWERED, INTERRUPTED = Verdict.UNDERPOWERED, Verdict.INTERRUPTED
EXIT = {v: v.exit_code for v in Verdict}
#: tests combined per case (Bonferroni): chi-square and exact cells on the joint law, per position
TESTS_PER_CASE = 3


@dataclass
class AuditConfig:
    alpha: float = 1e-6
    tv: float = 0.01
    power: float = 0.99
    seed: int = 0
    budget_seconds: float = 600.0  # a guard: what cannot finish in it makes the verdict underpowered
    #: the TV planned for the memory-bound cases (V > LARGE_VOCAB); None: they get the smoke
    #: stage only (contract, zero mass), no samples and no power claimed for them
    large_vocab_tv: float | None = 0.2
    max_cells: int = 128
    min_count: float = 10.0
    samples: int | None = None  # a fixed sample size per case, instead of the planner's
    batch: int = 8192  # rows per verifier call (fewer where the rows are large)
    max_batch_bytes: int = 96 * 2**20
    cases: list[Case] | None = None  # instead of the default battery
    probes: bool = True  # the id-range probes of the smoke stage
    wide_probe: bool = True  # also the probe at V = 2**24 + 2 (float32 round trips of ids)
    stop_early: bool = False  # stop at the first case rejected at alpha / cases (Holm rejects it anyway)
    shrink: int = 0  # after a lossy verdict, at most this many smaller candidate cases
    shrink_seconds: float = 60.0  # a guard on shrinking
    call_timeout: float = 120.0  # seconds before a call counts as a hang (raised for slow verifiers)
    smoke_rows: int = 4
    #: torch threads during the audit (restored after): 1 by default, so that reductions run in
    #: one order on every machine, and because contended intra-op threads slow small tensor
    #: operations by several times on a busy machine; None leaves torch's setting alone
    threads: int | None = 1

    def validate(self) -> None:
        stats.check_probability(self.alpha, "alpha")
        stats.check_probability(self.tv, "tv")
        stats.check_probability(self.power, "power")
        if self.large_vocab_tv is not None:
            stats.check_probability(self.large_vocab_tv, "large_vocab_tv")
        if not self.budget_seconds > 0:
            raise UsageError(f"budget_seconds: must be positive, got {self.budget_seconds}")
        if self.samples is not None and self.samples < 2:
            raise UsageError(f"samples: must be at least 2, got {self.samples}")
        if self.max_cells < 2:
            raise UsageError(f"max_cells: must be at least 2, got {self.max_cells}")
        if self.batch < 2:
            raise UsageError(f"batch: must be at least 2, got {self.batch}")
        if not self.call_timeout > 0:
            raise UsageError(f"call_timeout: must be positive, got {self.call_timeout}")
        if self.shrink < 0:
            raise UsageError(f"shrink: must be >= 0, got {self.shrink}")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"threads: must be >= 1 (or None), got {self.threads}")

    def case_tv(self, case: Case) -> float:
        if case.vocab <= LARGE_VOCAB:
            return self.tv
        return 1.0 if self.large_vocab_tv is None else max(self.tv, self.large_vocab_tv)

    def smoke_only(self, case: Case) -> bool:
        return case.vocab > LARGE_VOCAB and self.large_vocab_tv is None

    def to_json(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "tv": self.tv,
            "power": self.power,
            "seed": self.seed,
            "budget_seconds": self.budget_seconds,
            "large_vocab_tv": self.large_vocab_tv,
            "max_cells": self.max_cells,
            "min_count": self.min_count,
            "samples": self.samples,
            "batch": self.batch,
            "probes": self.probes,
            "wide_probe": self.wide_probe,
            "stop_early": self.stop_early,
            "shrink": self.shrink,
            "threads": self.threads,
        }


@dataclass
class Budget:
    """The time guard. ``clock`` is injectable so tests can slow time down."""

    seconds: float
    clock: Callable[[], float] = time.perf_counter
    start: float = field(init=False)

    def __post_init__(self) -> None:
        self.start = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def exhausted(self) -> bool:
        return self.left() <= 0


@dataclass
class CaseResult:
    case: Case
    planned: int
    tv_planned: float = 0.0
    status: str = "planned"  # planned, ran, short (stopped by the budget), not_run
    reason: str = ""  # why short or not run
    estimate: float = 0.0  # estimated seconds of the plan (from the smoke stage)
    n: int = 0
    cells: int = 0
    unresolved: float = 0.0
    statistic: float = 0.0
    p_chi2: float = 1.0
    p_cells: float = 1.0
    p_positions: float = 1.0
    pvalue: float = 1.0
    power: float = 0.0
    detectable_tv: float = 1.0
    tv: stats.TVInterval | None = None
    positions: ConditionalResult | None = None
    rejected: bool = False
    hard_failure: dict[str, Any] | None = None
    worst: list[dict[str, Any]] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    seconds: float = 0.0
    index: int = -1  # the case's index in the audit (its seeds derive from it)

    @property
    def budget_limited(self) -> bool:
        return self.status in ("short", "not_run")

    @property
    def uncovered(self) -> float:
        return 1.0 if self.positions is None else self.positions.uncovered

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.to_json(),
            "description": self.case.describe(),
            "index": self.index,
            "status": self.status,
            "reason": self.reason,
            "planned_samples": self.planned,
            "planned_tv": self.tv_planned,
            "samples": self.n,
            "cells": self.cells,
            "unresolved_mass": self.unresolved,
            "uncovered_by_positions": self.uncovered,
            "chi2": self.statistic,
            "p_chi2": self.p_chi2,
            "p_cells": self.p_cells,
            "p_positions": self.p_positions,
            "pvalue": self.pvalue,
            "power_at_tv": self.power,
            "detectable_tv": self.detectable_tv,
            "tv": None if self.tv is None else self.tv.to_json(),
            "rejected": self.rejected,
            "hard_failure": self.hard_failure,
            "worst_cells": self.worst,
            "positions": None if self.positions is None else self.positions.to_json(),
            "emitted_length_counts": self.lengths,
        }

    def timings(self) -> dict[str, float]:
        return {"seconds": self.seconds, "estimated_seconds": self.estimate}


@dataclass
class AuditResult:
    backend: str
    kind: str
    processes: tuple[str, ...]
    law: str
    config: AuditConfig
    verdict: Verdict = PASS
    violation: dict[str, Any] | None = None
    cases: list[CaseResult] = field(default_factory=list)  # every case, run or not, in battery order
    seconds: float = 0.0
    expected: str | None = None
    shrunk: CaseResult | None = None
    smoke: list[dict[str, Any]] = field(default_factory=list)  # what the smoke stage checked
    target: str | None = None  # how to name the verifier again (for replay)
    finding: dict[str, Any] | None = None  # a wrong id found by an id-range probe (a hard failure)
    note: str = ""  # e.g. why shrinking stopped

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def ran(self) -> list[CaseResult]:
        return [r for r in self.cases if r.status in ("ran", "short")]

    @property
    def not_run(self) -> list[CaseResult]:
        return [r for r in self.cases if r.status in ("not_run", "planned")]

    @property
    def short(self) -> list[CaseResult]:
        """Cases that did not reach the stated power: stopped early, not run, or planned below it."""
        return [
            r
            for r in self.cases
            if r.status != "smoke_only" and (r.status != "ran" or r.power < self.config.power)
        ]

    @property
    def smoke_only(self) -> list[CaseResult]:
        """Cases the plan gave the smoke stage alone (``large_vocab_tv=None``): no power claimed."""
        return [r for r in self.cases if r.status == "smoke_only"]

    @property
    def skipped(self) -> list[str]:  # the earlier name of not_run, as names
        return [r.case.name for r in self.not_run]

    @property
    def witness(self) -> CaseResult | None:
        """The smallest rejected case (fewest nodes, then smallest vocabulary)."""
        bad = [c for c in self.cases if c.rejected]
        return min(bad, key=lambda c: (len(c.case.parents), c.case.vocab, c.pvalue)) if bad else None

    def vouched_tv(self) -> float:
        """The TV every case can vouch for at the stated power (1 when some case did not run)."""
        if not self.cases or self.not_run:
            return 1.0
        return max((r.detectable_tv for r in self.cases if r.status != "smoke_only"), default=1.0)

    def summary(self) -> str:
        c = self.config
        head = f"{self.backend} ({self.kind}; {', '.join(self.processes)}): {self.verdict.value.upper()}"
        lines = [head]
        if self.verdict == VIOLATION and self.violation:
            v = self.violation
            lines.append(f"  contract violation [{v['kind']}] in {v['case']} ({v['during']}): {v['detail']}")
            if v.get("traceback"):
                lines.append("  the verifier's traceback:")
                lines.extend("    " + t for t in v["traceback"].rstrip().splitlines())
            return "\n".join(lines)
        n = sum(r.n for r in self.cases)
        lines.append(
            f"  {len(self.ran)}/{len(self.cases)} cases ran, {n} steps, {self.seconds:.1f} s; "
            f"family-wise alpha {c.alpha:g} (Holm); smoke stage: {len(self.smoke)} checks"
        )
        if self.verdict == INTERRUPTED:
            lines.append("  interrupted: the cases below are what ran before Ctrl-C")
        if self.verdict in (PASS, UNDERPOWERED, INTERRUPTED):
            if self.smoke_only:
                names = ", ".join(r.case.name for r in self.smoke_only)
                lines.append(f"  smoke stage only (no power claimed): {names}")
            if self.verdict == PASS:
                tvs = sorted({r.tv_planned for r in self.cases if r.status != "smoke_only"})
                lines.append(
                    f"  no deviation detected; every case ran its plan: power >= {c.power:g} against TV >= "
                    + " / ".join(f"{t:g}" for t in tvs)
                    + " on its cells"
                    + (f" (TV {max(tvs):g} on V > {LARGE_VOCAB})" if len(tvs) > 1 else "")
                )
            else:
                lines.append(
                    f"  no deviation detected, but {len(self.short)} case(s) ran short of the stated power "
                    f"(--power {c.power:g} against --tv {c.tv:g}); the run vouches for TV >= "
                    f"{self.vouched_tv():.3g} only"
                )
                for r in self.short[:8]:
                    what = (
                        f"not run ({r.reason})"
                        if r.status in ("not_run", "planned")
                        else f"{r.n}/{r.planned} steps, detects TV {r.detectable_tv:.3g} at power {c.power:g}"
                        + (f" ({r.reason})" if r.reason else "")
                    )
                    lines.append(f"    {r.case.name}: {what}")
                if len(self.short) > 8:
                    lines.append(f"    ... and {len(self.short) - 8} more")
            deep = [r for r in self.ran if r.positions is not None]
            if deep:
                worst = max(r.uncovered for r in deep)
                lines.append(
                    f"  per-position tests on {len(deep)} cases; largest share of steps with an untested "
                    f"position: {worst:.3f}"
                )
        else:
            if self.finding is not None:
                lines.append(f"  found in the {self.finding['during']}: {self.finding['detail']}")
            w = self.shrunk or self.witness
            if w is not None:
                what = "shrunk witness" if self.shrunk else "witness"
                lines.append(f"  {what}: {w.case.describe()}")
                if w.hard_failure:
                    lines.append(f"  {w.hard_failure['detail']}")
                else:
                    tv = w.tv
                    lines.append(
                        f"  p = {w.pvalue:.3g} (cells {min(w.p_chi2, w.p_cells):.3g}, positions "
                        f"{w.p_positions:.3g})"
                        + (
                            f"; TV on cells {tv.estimate:.4f} [{tv.low:.4f}, {tv.high:.4f}] "
                            f"({tv.confidence:.0%})"
                            if tv
                            else ""
                        )
                    )
                    for cell in w.worst[:3]:
                        lines.append(
                            f"    cell {cell['cell']!r}: observed {cell['observed']}, "
                            f"expected {cell['expected']:.1f}"
                        )
                    pw = w.positions.witness() if w.positions else None
                    if pw is not None and pw.worst is not None and w.p_positions <= min(w.p_chi2, w.p_cells):
                        g = pw.worst
                        cells = ", ".join(
                            f"{a}: {o} vs {e:.1f}" for a, o, e in zip(g.labels, g.observed, g.expected)
                        )
                        lines.append(f"    position {pw.position}, {g.label}: next token {cells}")
            lines.append("  replay: specproof replay AUDIT.json prints a pytest test of this witness")
        if self.note:
            lines.append(f"  {self.note}")
        return "\n".join(lines)

    def to_json(self, timings: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verdict": self.verdict.value,
            "backend": self.backend,
            "target": self.target or self.backend,
            "kind": self.kind,
            "processes": list(self.processes),
            "law": self.law,
            "expected": self.expected,
            "config": self.config.to_json(),
            "alpha": self.config.alpha,
            "tv": self.config.tv,
            "power": self.config.power,
            "seed": self.config.seed,
            "vouched_tv": self.vouched_tv(),
            "violation": self.violation,
            "finding": self.finding,
            "smoke": self.smoke,
            "witness": None if self.witness is None else self._witness_json(self.witness),
            "shrunk_witness": None if self.shrunk is None else self._witness_json(self.shrunk),
            "cases": [r.to_json() for r in self.cases],
            "short_cases": [r.case.name for r in self.short],
            "not_run_cases": [r.case.name for r in self.not_run],
            "smoke_only_cases": [r.case.name for r in self.smoke_only],
            "note": self.note,
        }
        if timings:
            out["seconds"] = self.seconds
            out["budget_seconds"] = self.config.budget_seconds
            out["case_timings"] = {r.case.name: r.timings() for r in self.cases}
        return out

    def _witness_json(self, r: CaseResult) -> dict[str, Any]:
        out = r.to_json()
        out["laws"] = case_laws(r.case, self.law == "greedy")
        out["regenerate"] = {"case": r.case.to_json(), "seed": self.config.seed, "index": r.index}
        return out


def case_laws(case: Case, greedy: bool = False) -> dict[str, Any]:
    """The laws of a case, enough to rebuild it by hand: the support ids, every pool entry's
    target and draft law on them, and the root context hashes (:mod:`.battery`)."""
    m = build_models(case, greedy)
    cols = torch.from_numpy(m.support)
    return {
        "support": m.support.tolist(),
        "target": m.target32[:, cols].tolist(),
        "draft": m.draft32[:, cols].tolist(),
        "roots": list(m.roots),
        "pool": case.pool,
        "hash": "h(ctx + (x,)) = (h(ctx) * 1000003 + x + 1) mod (2**31 - 1); law = pool[h % pool]",
    }


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


# The earlier private name, kept for callers that built runners directly.
_Runner = Runner


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


def _partitions(runner: Runner, n: int, config: AuditConfig) -> list[Partition]:
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


def test_case(
    r: CaseResult,
    runner: Runner,
    seqs: torch.Tensor,
    subs: torch.Tensor,
    config: AuditConfig,
    alpha_case: float,
) -> None:
    """Bin the completed sequences on the case's cells (fixed by the law and n), test the joint
    law and the per-position laws, and state the power at the case's planned TV."""
    parts = _partitions(runner, len(seqs), config)
    probs, labels = _cell_probs(parts)
    cells = _assign(parts, seqs, subs)
    counts = np.bincount(cells.numpy(), minlength=len(probs))[: len(probs)]
    n = int(counts.sum())
    r.cells = len(probs)
    r.unresolved = float(sum(p.unresolved for p in parts) / len(parts))
    r.statistic, r.p_chi2 = stats.pearson(counts, probs)
    r.p_cells, _ = stats.exact_cells(counts, probs)
    r.positions = battery_tests(runner.models, seqs, subs, config.min_count)
    r.p_positions = r.positions.pvalue
    r.pvalue = min(1.0, TESTS_PER_CASE * min(r.p_chi2, r.p_cells, r.p_positions))
    r.tv = stats.tv_interval(counts, probs)
    level = alpha_case / TESTS_PER_CASE
    if len(probs) == 1 and r.unresolved == 0.0:
        # one possible sequence: any deviation emits a zero-probability token, a hard failure
        r.power = 1.0 - (1.0 - r.tv_planned) ** n
        r.detectable_tv = 1.0 - (1.0 - config.power) ** (1.0 / n)
    else:
        r.power = stats.power_at(n, r.tv_planned, level, len(probs) - 1)
        r.detectable_tv = stats.detectable_tv(n, level, config.power, len(probs) - 1)
    z = (counts - n * probs) / np.sqrt(np.maximum(n * probs, 1e-300))
    r.worst = [
        {"cell": labels[j], "observed": int(counts[j]), "expected": float(n * probs[j]), "z": float(z[j])}
        for j in np.argsort(-np.abs(z))[:5]
    ]


test_case.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


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
    ) -> None:
        config.validate()
        self.backend = backend
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
            r.estimate = self._estimate(i, r.planned)
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
            try:
                while got < r.planned:
                    if got and self.budget.exhausted():
                        r.reason = f"the budget ran out after {got} of {r.planned} steps"
                        break
                    k += 1
                    b = min(bs, r.planned - got)
                    s_in, s_ver, s_comp = call_seeds(c.seed, r.case, k)
                    inputs, emitted, lens = runner.run(b, _gen(s_in), _gen(s_ver))
                    comp = complete(runner.models, inputs, emitted, lens, _gen(s_comp))
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
            test_case(r, runner, torch.cat(seqs), torch.cat(subs), c, self.alpha_case)
            if c.stop_early and r.pvalue <= self.alpha_case:
                break
        for r in res.cases:
            if r.status == "planned":
                r.status = "not_run"
                r.reason = r.reason or "the audit stopped at the first rejected case (stop_early)"

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

    def shrink(self) -> None:
        c, res = self.config, self.result
        w = res.witness
        if res.verdict != LOSSY or c.shrink <= 0 or w is None:
            return
        self.say("shrinking the witness", 1.0)
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
) -> AuditResult:
    """Audit one backend (see the module docstring)."""
    return Audit(backend, config or AuditConfig(), progress, on_plan, clock).run()


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
) -> tuple[CaseResult | None, str]:
    """Greedy search for a smaller case that is still rejected.

    At most ``config.shrink`` candidates, each run at the witness's sample size and tested at
    ``alpha_case / config.shrink``, so a reported shrunk witness is itself a finding at the
    audit's per-case level; the search is deterministic (``shrink_seconds`` only guards it).
    """
    budget = Budget(config.shrink_seconds)
    current, best, tried = witness.case, None, 0
    n = max(2, witness.n)
    while tried < config.shrink:
        for cand in smaller_cases(current):
            if tried >= config.shrink:
                break
            if budget.exhausted():
                return best, f"shrinking stopped by its time guard after {tried} candidates"
            tried += 1
            sub = AuditConfig(
                alpha=alpha_case / config.shrink,
                tv=config.tv,
                power=config.power,
                seed=config.seed,
                budget_seconds=max(1.0, budget.left()),
                max_cells=config.max_cells,
                min_count=config.min_count,
                samples=n,
                batch=config.batch,
                cases=[cand],
                probes=False,
                stop_early=True,
                call_timeout=config.call_timeout,
            )
            r = audit(backend, sub)
            if r.verdict == LOSSY and r.cases and r.cases[0].rejected:
                current, best = cand, r.cases[0]
                break
        else:
            break
    return best, ""
