"""The results of a verifier audit: one :class:`CaseResult` per battery case and the
:class:`AuditResult` of the whole audit (its verdict, witness, summary and JSON).

They hold what the stages of :mod:`.stages` found; nothing here samples or tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from specproof.properties.audit import stats
from specproof.properties.audit.battery import LARGE_VOCAB, Case, build_models
from specproof.properties.audit.conditional import ConditionalResult
from specproof.properties.verdicts import Verdict

if TYPE_CHECKING:
    from specproof.properties.audit.stages import AuditConfig

PASS, LOSSY, VIOLATION = Verdict.PASS, Verdict.LOSSY, Verdict.CONTRACT_VIOLATION
UNDERPOWERED, INTERRUPTED = Verdict.UNDERPOWERED, Verdict.INTERRUPTED


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
    #: the same inputs through an exact reference rule (a witness only): its name and its lengths
    reference: str | None = None
    reference_lengths: list[int] | None = None
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
            "reference_rule": self.reference,
            "reference_length_counts": self.reference_lengths,
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
    saved_to: str | None = None  # where this result's JSON was written (for the replay hint)
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
        """Cases the budget left unrun (not those a finding made unnecessary)."""
        return [r for r in self.cases if r.status in ("not_run", "planned")]

    @property
    def after_finding(self) -> list[CaseResult]:
        """Cases not run because the audit stopped at its first finding (stop early)."""
        return [r for r in self.cases if r.status == "after_finding"]

    @property
    def short(self) -> list[CaseResult]:
        """Cases that did not reach the stated power: stopped by the budget, not run for want of
        it, or planned below it (not those skipped after a finding, nor smoke-only ones)."""
        return [
            r
            for r in self.cases
            if r.status not in ("smoke_only", "after_finding")
            and (r.status != "ran" or r.power < self.config.power)
        ]

    @property
    def smoke_only(self) -> list[CaseResult]:
        """Cases the plan gave the smoke stage alone (``large_vocab_tv=None``): no power claimed."""
        return [r for r in self.cases if r.status == "smoke_only"]

    @property
    def witness(self) -> CaseResult | None:
        """The rejected case with the strongest evidence: the smallest p-value, then the largest
        TV the data vouch for (the interval's low end), then the smallest case. (Shrinking then
        looks for a smaller case that is still rejected.)"""
        bad = [c for c in self.cases if c.rejected]
        if not bad:
            return None
        return min(
            bad, key=lambda c: (c.pvalue, -(c.tv.low if c.tv else 0.0), len(c.case.parents), c.case.vocab)
        )

    def vouched_tv(self) -> float:
        """The TV every case can vouch for at the stated power (1 when some case did not run)."""
        if not self.cases or self.not_run:
            return 1.0
        return max((r.detectable_tv for r in self.cases if r.status != "smoke_only"), default=1.0)

    def summary(self) -> str:
        """The first screen: the verdict, what ran short, the witness (observed against expected),
        the power; then what ran."""
        head = f"{self.backend} ({self.kind}; {', '.join(self.processes)}): {self.verdict.value.upper()}"
        if self.verdict == VIOLATION and self.violation:
            return "\n".join([head, *self._violation_lines()])
        c = self.config
        lines = [head]
        if self.verdict == INTERRUPTED:
            lines.append("  interrupted (Ctrl-C): what follows is what ran before")
        lines += self._short_lines()
        if self.verdict == LOSSY:
            lines += self._witness_lines()
        else:
            lines += self._power_lines()
        n = sum(r.n for r in self.cases)
        lines.append(
            f"  {len(self.ran)}/{len(self.cases)} cases ran, {n} steps, {self.seconds:.1f} s; "
            f"family-wise alpha {c.alpha:g} (Holm); smoke stage: {len(self.smoke)} checks"
        )
        if self.after_finding:
            lines.append(f"  {len(self.after_finding)} cases not run: the audit stopped at its first finding")
        if self.note:
            lines.append(f"  {self.note}")
        return "\n".join(lines)

    def _short_lines(self) -> list[str]:
        """The cases that ran short of the stated power, and why (at most eight named)."""
        c = self.config
        if not self.short or self.verdict == LOSSY:
            return []
        lines = [
            f"  ran short: {len(self.short)} case(s) below power {c.power:g} against TV {c.tv:g}; the run "
            f"vouches for TV >= {self.vouched_tv():.3g} only"
        ]
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
        return lines

    def replay_hint(self) -> str:
        """How to turn this witness into a pytest test, from where the JSON was (or can be) written."""
        if self.saved_to:
            return (
                f"replay: specproof replay {self.saved_to} -o test_witness.py (a pytest test of this witness)"
            )
        if self.target is None:
            return "replay: audit a named TARGET (module:function) and write --json to replay this witness"
        return (
            "replay: write result.to_json() to a file (the command line: --json AUDIT.json), then "
            "`specproof replay AUDIT.json -o test_witness.py`"
        )

    def _violation_lines(self) -> list[str]:
        v = self.violation or {}
        lines = [f"  contract violation [{v['kind']}] in {v['case']} ({v['during']}): {v['detail']}"]
        if v.get("traceback"):
            lines.append("  the verifier's traceback:")
            lines.extend("    " + t for t in v["traceback"].rstrip().splitlines())
        return lines

    def _power_lines(self) -> list[str]:
        """No deviation: the power the cases reached."""
        c, lines = self.config, []
        if self.smoke_only:
            names = ", ".join(r.case.name for r in self.smoke_only)
            lines.append(f"  smoke stage only (no power claimed): {names}")
        tvs = sorted({r.tv_planned for r in self.cases if r.status not in ("smoke_only", "after_finding")})
        if self.verdict == PASS and tvs:
            lines.append(
                f"  power: no deviation; every case ran its plan: power >= {c.power:g} against TV >= "
                + " / ".join(f"{t:g}" for t in tvs)
                + " on its cells"
                + (f" (TV {max(tvs):g} on V > {LARGE_VOCAB})" if len(tvs) > 1 else "")
            )
        elif self.ran:
            lines.append(
                f"  power: no deviation detected in the {len(self.ran)} cases that ran; together they vouch "
                f"for TV >= {self.vouched_tv():.3g} at power {c.power:g}"
            )
        deep = [r for r in self.ran if r.positions is not None]
        if deep:
            worst = max(r.uncovered for r in deep)
            lines.append(
                f"  per-position tests on {len(deep)} cases; largest share of steps with an untested "
                f"position: {worst:.3f}"
            )
        return lines

    def _witness_lines(self) -> list[str]:
        """A deviation: where it was found, the witness case and its worst cells."""
        lines = []
        if self.finding is not None:
            lines.append(f"  found in the {self.finding['during']}: {self.finding['detail']}")
        w = self.shrunk or self.witness
        if w is not None:
            what = "shrunk witness" if self.shrunk else "witness"
            lines.append(f"  {what}: {w.case.describe()}")
            if w.hard_failure:
                lines.append(f"  {w.hard_failure['detail']}")
            else:
                lines += _deviation_lines(w)
        lines.append(f"  {self.replay_hint()}")
        return lines

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
            "after_finding_cases": [r.case.name for r in self.after_finding],
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


def _deviation_lines(w: CaseResult) -> list[str]:
    """A rejected case's p-values, TV interval, worst cells and worst position."""
    tv = w.tv
    lines = [
        f"  p = {w.pvalue:.3g} (cells {min(w.p_chi2, w.p_cells):.3g}, positions {w.p_positions:.3g})"
        + (
            f"; TV on cells {tv.estimate:.4f} [{tv.low:.4f}, {tv.high:.4f}] ({tv.confidence:.0%})"
            if tv
            else ""
        )
    ]
    for cell in w.worst[:3]:
        lines.append(
            f"    cell {cell['cell']!r}: observed {cell['observed']}, expected {cell['expected']:.1f}"
        )
    pw = w.positions.witness() if w.positions else None
    if pw is not None and pw.worst is not None and w.p_positions <= min(w.p_chi2, w.p_cells):
        g = pw.worst
        cells = ", ".join(f"{a}: {o} vs {e:.1f}" for a, o, e in zip(g.labels, g.observed, g.expected))
        lines.append(f"    position {pw.position}, {g.label}: next token {cells}")
    if w.lengths and w.reference_lengths:
        lines.append(f"    {length_comparison(w)}")
    return lines


def length_comparison(w: CaseResult) -> str:
    """Emitted tokens per step, as shares: the witness's against the reference rule's on the same
    inputs (``1: 41.0% vs 40.8%, ...``)."""
    ours, ref = w.lengths[1:], (w.reference_lengths or [])[1:]
    a, b = max(1, sum(ours)), max(1, sum(ref))
    shares = ", ".join(
        f"{k}: {100 * x / a:.1f}% vs {100 * y / b:.1f}%" for k, (x, y) in enumerate(zip(ours, ref), 1)
    )
    return f"emitted per step (observed vs {w.reference} on the same inputs): {shares}"


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
