"""The reports of ``specproof e2e`` (:func:`.check.run`): one dataclass per check and the result.

* :class:`ExactCheck` - the enumerated law of two steps on the 4-token target against the
  target's own (:mod:`.exact_law`);
* :class:`SampledCheck` - decoding rates measured on the 16-token target (:mod:`.sampled`);
* :class:`Coupling` - the optimized loop against the reference loop on shared tapes
  (:mod:`.coupling`);
* :class:`MismatchReport` - a staged mismatched deployment's acceptance (:mod:`.mismatch_report`);
* :class:`E2EResult` - every check of one (proposer, process, rule), its verdict, ``summary()``
  (what ``specproof e2e`` prints) and ``to_json()`` (what ``--json`` writes);
  :func:`describe_more` - its lines for a moved baseline and a staged mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specproof.properties.audit.sequences import SequenceTest
from specproof.properties.e2e.mismatch import AcceptanceFinding, BaselineFinding, DraftLawFinding, LawDistance
from specproof.properties.verdicts import Verdict


@dataclass(kw_only=True)
class ExactCheck:
    """The exact law of ``steps`` steps on the ``vocab``-token target against the target's own."""

    vocab: int
    steps: int
    depth: int
    drafts: int
    tv: float
    mean_emitted_per_step: float

    @property
    def lossless(self) -> bool:
        return self.tv < 1e-12  # float64 laws: equal up to rounding

    def summary(self) -> str:
        return (
            f"exact law of {self.steps} steps on a {self.vocab}-token transformer ({self.drafts} drafts, "
            f"depth {self.depth}): TV = {self.tv:.3g}; "
            f"{self.mean_emitted_per_step:.3f} tokens per step expected"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "vocab": self.vocab,
            "steps": self.steps,
            "depth": self.depth,
            "drafts": self.drafts,
            "tv": self.tv,
            "lossless": self.lossless,
            "mean_emitted_per_step": self.mean_emitted_per_step,
        }


@dataclass(kw_only=True)
class SampledCheck:
    """Decoding measured on the ``vocab``-token target (rates, not a test)."""

    vocab: int
    drafts_per_step: int
    steps: int  # target forwards
    emitted: int
    mean_emitted_per_target_forward: float
    alpha: float  # the mean first-draft acceptance probability seen along the run
    closed_form_iid: float | None
    engine: str | None = None  # "optimized" when the optimized loop ran it

    def summary(self) -> str:
        line = (
            f"sampled on a {self.vocab}-token transformer: {self.mean_emitted_per_target_forward:.2f} "
            f"tokens per target forward over {self.steps} steps ({self.drafts_per_step} drafts each); "
            f"first-draft acceptance alpha = {self.alpha:.3f}"
        )
        if self.closed_form_iid is not None:
            line += f", i.i.d. closed form {self.closed_form_iid:.2f}"
        return line

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "vocab": self.vocab,
            "drafts_per_step": self.drafts_per_step,
            "steps": self.steps,
            "emitted": self.emitted,
            "mean_emitted_per_target_forward": self.mean_emitted_per_target_forward,
            "alpha": self.alpha,
            "closed_form_iid": self.closed_form_iid,
        }
        if self.engine is not None:
            out["engine"] = self.engine
        return out


@dataclass(kw_only=True)
class Coupling:
    """``--engine optimized``: the optimized loop against the reference loop on shared tapes."""

    requests: int
    steps: int
    dtype: str
    diverged: list[int]

    @property
    def equal(self) -> bool:
        return not self.diverged

    def summary(self) -> str:
        what = "every token equal" if self.equal else f"requests {self.diverged} DIVERGED"
        return (
            f"coupled to the reference loop on shared tapes ({self.requests} requests x {self.steps} "
            f"steps, {self.dtype}): {what}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "steps": self.steps,
            "dtype": self.dtype,
            "equal": self.equal,
            "diverged": self.diverged,
            "summary": self.summary(),
        }


@dataclass(kw_only=True)
class MismatchReport:
    """``--mismatch``: acceptance of a mismatched deployment against the draft weights' own target."""

    kind: str
    deployment: str
    exact: AcceptanceFinding
    sampled: AcceptanceFinding
    draft_laws: DraftLawFinding | None

    @property
    def collapsed(self) -> bool:
        return self.exact.collapsed or self.sampled.collapsed

    @property
    def caught(self) -> bool:
        return self.collapsed or (self.draft_laws is not None and not self.draft_laws.agree)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "deployment": self.deployment,
            "exact": self.exact.to_json(),
            "sampled": self.sampled.to_json(),
            "draft_laws": None if self.draft_laws is None else self.draft_laws.to_json(),
            "collapsed": self.collapsed,
            "caught": self.caught,
        }


@dataclass(kw_only=True)
class E2EResult:
    """Every check of one (proposer, process, rule) (module doc). ``verdict``: ``lossy`` if a check
    flags it, else ``pass`` if the statistical check ran, else ``exact``."""

    proposer: str
    process: str
    rule: str
    declared_exact: bool
    exact_check: ExactCheck
    sampled: SampledCheck
    statistical: SequenceTest | None = None
    against: str = "verifier"  # the baseline of the checks: "verifier" or "original"
    baseline: BaselineFinding | None = None  # a moved baseline (the verifier is fine-tuned)
    baseline_kl: LawDistance | None = None  # the fine-tuned target vs the original
    mismatch: MismatchReport | None = None
    coupling: Coupling | None = None  # --engine optimized
    engine: str = "reference"
    calibration: dict[str, Any] | None = (
        None  # :func:`.calibration_report.calibration`'s report, when asked for
    )

    @property
    def lossless(self) -> bool:
        return (
            self.exact_check.lossless
            and (self.coupling is None or self.coupling.equal)
            and (self.statistical is None or self.statistical.lossless)
        )

    @property
    def verdict(self) -> Verdict:
        if not self.lossless:
            return Verdict.LOSSY
        return Verdict.EXACT if self.statistical is None else Verdict.PASS

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def head(self) -> str:
        claim = "declared exact" if self.declared_exact else "not declared exact"
        return (
            f"{self.proposer} ({self.process}) verified by {self.rule} ({claim}): "
            + ("LOSSLESS" if self.lossless else "LOSSY")
            + (" against the original target" if self.against == "original" else "")
        )

    def summary(self) -> str:
        """What ``specproof e2e`` prints (the calibration lines aside)."""
        lines = [self.head(), "  " + self.exact_check.summary(), "  " + self.sampled.summary()]
        if self.statistical is not None:
            lines.append(f"  statistical: {self.statistical.summary()}")
        if self.coupling is not None:
            lines.append(f"  {self.coupling.summary()}")
        lines += describe_more(self)
        return "\n".join(lines)

    def baseline_json(self) -> dict[str, Any] | None:
        if self.baseline is None:
            return None
        out = self.baseline.to_json(self.against)
        if self.baseline_kl is not None:
            out |= {"kl_per_position": self.baseline_kl.__dict__, "kl_summary": self.baseline_kl.describe()}
        return out

    def statistical_json(self) -> dict[str, Any] | None:
        res = self.statistical
        if res is None:
            return None
        out: dict[str, Any] = {
            "runs": res.runs,
            "horizon": res.horizon,
            "alpha": res.alpha,
            "pvalue": res.pvalue,
            "cells": res.cells,
            "detectable_tv": res.detectable_tv,
            "unresolved": res.unresolved,
            "lossless": res.lossless,
            "summary": res.summary(),
        }
        if self.engine != "reference":
            out["engine"] = self.engine
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verdict": self.verdict.value,
            "proposer": self.proposer,
            "process": self.process,
            "rule": self.rule,
            "declared_exact": self.declared_exact,
            "exact_check": self.exact_check.to_json(),
            "sampled": self.sampled.to_json(),
            "statistical": self.statistical_json(),
            "lossless": self.lossless,
            "against": self.against,
            "baseline": self.baseline_json(),
            "mismatch": None if self.mismatch is None else self.mismatch.to_json(),
        }
        if self.coupling is not None:
            out["coupling"] = self.coupling.to_json()
        if self.engine != "reference":
            out["engine"] = self.engine
        if self.calibration is not None:
            out["calibration"] = self.calibration
        return out


def describe_more(report: E2EResult) -> list[str]:
    """The report lines of a moved baseline and of a staged mismatch (none for a plain run)."""
    lines = []
    b = report.baseline
    if b is not None:
        lines.append(f"  baseline: {b.message(report.against)}")
        kl = "" if report.baseline_kl is None else f"; {report.baseline_kl.describe()} on the 16-token target"
        lines.append(
            f"  the fine-tuned target vs the original: TV {b.tv_models:.4g} between their "
            f"{b.horizon}-token laws on the 4-token target{kl}"
        )
    m = report.mismatch
    if m is not None:
        lines.append(f"  deployment ({m.kind} mismatch): {m.deployment}")
        lines.append(f"  exact, 4-token target: {m.exact.message()}")
        lines.append(f"  sampled, 16-token target: {m.sampled.message()}")
        if m.draft_laws is not None:
            lines.append(f"  draft laws, 16-token target: {m.draft_laws.message()}")
    return lines
