"""``specproof e2e``: decode with a proposer and a rule on transformer targets, and judge it.

One report per (proposer, process, rule):

* **exact** - the law of two consecutive steps on the 4-token target, enumerated
  (:func:`.exact.multi_step_check`) and compared with the target's own law of the same tokens:
  lossless iff TV < 1e-12 (float64 laws); its expected emitted tokens per step;
* **sampled** - the decoding loop (reference/decode.py: tree forward, KV cache, commit) for
  ``steps`` steps on the 16-token target: emitted tokens per target forward, the mean
  first-draft acceptance probability ``alpha`` seen along the way and, for token-level
  verification of a chain of K drafts, the closed form ``(1 - alpha^(K+1)) / (1 - alpha)`` that
  holds when acceptances are i.i.d. (Leviathan et al. 2023, eq. 1);
* **statistical** (``runs`` > 0) - the 16-token target's law is too large to enumerate over
  several steps, so ``runs`` independent decodings are tested against the target's exact law
  of their first 3 tokens (:mod:`.sequences`, alpha 1e-6).

:func:`run` returns an :class:`E2EResult`: ``verdict`` is ``lossy``
(:class:`~specproof.properties.verdicts.Verdict`) if any check flags it; otherwise ``pass`` when
the statistical check ran (it found no deviation at its alpha: the weaker of the two claims), and
``exact`` when the enumerated law is the only evidence (``runs=0``; equal to the target's up to
float64 rounding). ``summary()`` is what ``specproof e2e`` prints, ``to_json()`` what ``--json``
writes.

``engine="optimized"`` (``specproof e2e --engine optimized``): the same checks on the optimized
loop (:mod:`specproof.optimized.decode`, :func:`optimized_run`); the exact law, enumerated from
the reference program, carries over to it through a coupling check on shared tapes.

Three more reports (docs/self-drafting.md):

* **moved baseline** - a proposer that fine-tunes the target (Medusa-2) is verified by the
  fine-tuned model: the exact check is against that model, and the report adds how far it is
  from the original (exact TV of the M-token law on the 4-token target, KL per position on the
  16-token one). ``against="original"`` audits against the original target instead: flagged,
  with the message that the baseline moved (:func:`.mismatch.baseline_audit`);
* **mismatch** - ``mismatch`` stages a mismatched deployment (:func:`.mismatch.deployment`):
  another vocabulary or hidden size is refused before decoding; another target revision or the
  wrong feature layer stays lossless, and the report compares acceptance with the draft's own
  target (:func:`.mismatch.acceptance_finding`);
* **calibration** - :func:`calibration` (``specproof e2e --calibration``): path confidence
  against acceptance, the drafter side by side with the same drafter at another temperature
  (:mod:`.draft_calibration`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from specproof.properties.audit.sequences import SequenceTest, check_runs
from specproof.properties.e2e import draft_calibration, mismatch
from specproof.properties.e2e.mismatch import AcceptanceFinding, BaselineFinding, DraftLawFinding, LawDistance
from specproof.properties.oracle.exact import multi_step_check
from specproof.properties.verdicts import Verdict
from specproof.reference.decode import EXACT_PREFIX, decode, e2e_models
from specproof.reference.dynamic_tree import DynamicTree
from specproof.reference.errors import BadParameterError, UsageError
from specproof.reference.processes import Process
from specproof.reference.proposers import PROPOSERS, Proposer
from specproof.reference.rules import RULES
from specproof.reference.transformer import TransformerLM
from specproof.reference.tree import DraftTree

SAMPLED_PROMPT = (3, 4)
STAT_HORIZON = 3
ALPHA = 1e-6
#: the sampled acceptance comparison of ``--mismatch``: prompts (independent runs), steps each
MISMATCH_RUNS, MISMATCH_STEPS = 16, 16


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
    calibration: dict[str, Any] | None = None  # :func:`calibration`'s report, when asked for

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


def _drafts(proc: Process, shape: tuple[int, ...]) -> int:
    """Draft nodes per step: the shape's, or the dynamic tree's budget N (at most)."""
    return proc.nodes if isinstance(proc, DynamicTree) else len(shape) - 1


def closed_form(alpha: float, k: int) -> float:
    """Expected tokens per step of a K-draft chain with i.i.d. acceptance probability alpha."""
    return float(k + 1) if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def run(
    proposer: Proposer,
    rule: str,
    steps: int = 64,
    seed: int = 0,
    runs: int = 0,
    process_index: int = 0,
    progress: Callable[[str], None] | None = None,
    against: str = "verifier",
    mismatch_kind: str | None = None,
    engine: str = "reference",
) -> E2EResult:
    """Every check of one (proposer, process, rule); see the module doc. ``against``: the
    baseline, ``"verifier"`` (the model that verifies) or ``"original"`` (the target before any
    fine-tuning); ``mismatch_kind``: a mismatched deployment to stage (:data:`.mismatch.KINDS`).
    ``engine``: ``"optimized"`` runs the checks on the optimized loop (:func:`optimized_run`)."""
    if engine != "reference":
        if mismatch_kind is not None or against != "verifier":
            raise BadParameterError("engine", "the optimized loop runs the checks against the verifier only")
        return optimized_run(proposer, rule, steps, seed, runs, process_index, progress, engine)
    proc = proposer.processes[process_index]
    small, big = e2e_models()
    dep = mismatch.deployment(proposer, small, big, mismatch_kind)  # refuses vocab/width mismatches
    if progress:
        progress(f"{proposer.name}/{rule}: exact 2-step law on the {small.vocab}-token target")
    baseline = None
    if dep.small is not small and mismatch_kind is None:  # the verifying model is not the target
        baseline = mismatch.baseline_audit(
            rule,
            proc,
            TransformerLM(dep.small),
            TransformerLM(small),
            dep.small_drafter,
            proposer.exact_shape,
            EXACT_PREFIX,
            2,
        )
        tv = baseline.tv_to_reference if against == "original" else baseline.tv_to_verifier
        exact_mean = baseline.mean_emitted
    else:
        tv, exact_mean = multi_step_check(
            rule, proc, TransformerLM(dep.small), dep.small_drafter, proposer.exact_shape, EXACT_PREFIX, 2
        )
    exact_depth = DraftTree(proposer.exact_shape, "shape").max_depth
    if progress:
        progress(f"{proposer.name}/{rule}: {steps} sampled steps on the {big.vocab}-token target")
    drafter, verifier = dep.big_drafter, dep.big
    out = decode(
        verifier, drafter, proc, rule, proposer.shape, SAMPLED_PROMPT, steps, np.random.default_rng(seed)
    )
    shape = DraftTree(proposer.shape, "shape")
    alpha = float(np.mean(out.overlaps)) if out.overlaps else 0.0
    chain_k = shape.n - 1 if shape.is_chain and proc.chain else None
    report = E2EResult(
        proposer=proposer.name,
        process=proc.name,
        rule=rule,
        declared_exact=proc.name in RULES[rule].exact_for,
        exact_check=ExactCheck(
            vocab=small.vocab,
            steps=2,
            depth=exact_depth,
            drafts=_drafts(proc, proposer.exact_shape),
            tv=float(tv),
            mean_emitted_per_step=float(exact_mean),
        ),
        sampled=SampledCheck(
            vocab=big.vocab,
            drafts_per_step=_drafts(proc, proposer.shape),
            steps=out.target_forwards,
            emitted=sum(out.emitted_per_step),
            mean_emitted_per_target_forward=out.mean_emitted,
            alpha=alpha,
            closed_form_iid=closed_form(alpha, chain_k) if chain_k and rule == "token" else None,
        ),
        against="original" if baseline and against == "original" else "verifier",
    )
    if runs > 0:
        if progress:
            progress(
                f"{proposer.name}/{rule}: {runs} decoding runs against the target's {STAT_HORIZON}-token law"
            )

        def one(r: int) -> tuple[int, ...]:
            o = decode(
                verifier,
                drafter,
                proc,
                rule,
                proposer.shape,
                SAMPLED_PROMPT,
                STAT_HORIZON,
                np.random.default_rng([seed, r]),
                until=STAT_HORIZON,
            )
            return tuple(o.tokens[len(SAMPLED_PROMPT) :])

        greedy = RULES[rule].preserves == "greedy"
        target = TransformerLM(
            big if baseline and against == "original" else verifier, 0.0 if greedy else 1.0
        )
        report.statistical = check_runs(
            one, target, SAMPLED_PROMPT, STAT_HORIZON, runs, ALPHA, greedy=greedy
        )
    if baseline is not None:
        report.baseline = baseline
        report.baseline_kl = mismatch.kl_per_position(big, verifier)
    if mismatch_kind is not None:
        report.mismatch = _mismatch_report(proposer, proc, rule, dep, exact_mean, seed, progress)
    return report


def _mismatch_report(
    proposer: Proposer,
    proc: Process,
    rule: str,
    dep: mismatch.Deployment,
    exact_mean: float,
    seed: int,
    progress: Callable[[str], None] | None,
) -> MismatchReport:
    """Acceptance of the mismatched deployment against the draft weights with their own target:
    exact on the 4-token target (expected accepted drafts per step), sampled on the 16-token one
    (:data:`MISMATCH_RUNS` prompts of the target's own text, :data:`MISMATCH_STEPS` steps each)."""
    small, big = e2e_models()
    _, own_mean = multi_step_check(
        rule,
        proc,
        TransformerLM(proposer.verifying_target(small)),
        proposer.make_drafter(small),
        proposer.exact_shape,
        EXACT_PREFIX,
        2,
    )
    exact = mismatch.acceptance_finding(
        mismatch.Acceptance("own target, 4-token", float(own_mean) - 1),
        mismatch.Acceptance(f"{dep.kind} mismatch, 4-token", float(exact_mean) - 1),
    )
    if progress:
        progress(f"{proposer.name}/{rule}: acceptance with its own target and mismatched ({dep.kind})")
    prompts = mismatch.prompts_from(big, MISMATCH_RUNS, 4, seed)
    args = (proc, rule, proposer.shape, prompts, MISMATCH_STEPS, seed)
    own = mismatch.measure_acceptance(
        "own target", proposer.verifying_target(big), proposer.make_drafter(big), *args
    )
    deployed = mismatch.measure_acceptance(f"{dep.kind} mismatch", dep.big, dep.big_drafter, *args)
    sampled = mismatch.acceptance_finding(own, deployed)
    laws = None
    if dep.big is proposer.verifying_target(big):  # same target: the draft laws must be the same
        contexts = [p[:n] for p in prompts for n in range(2, len(p) + 1)]
        laws = mismatch.compare_draft_laws(proposer.make_drafter(big), dep.big_drafter, contexts)
    return MismatchReport(
        kind=str(dep.kind), deployment=dep.doc, exact=exact, sampled=sampled, draft_laws=laws
    )


#: ``--engine optimized``: the coupling check's prompts and steps (shared tapes, float64)
COUPLING_PROMPTS = ((3, 4), (1, 2, 3, 1, 2), (5, 6, 7), (9, 9, 9, 9, 0, 1, 2))
COUPLING_STEPS = 8


def optimized_run(
    proposer: Proposer,
    rule: str,
    steps: int = 64,
    seed: int = 0,
    runs: int = 0,
    process_index: int = 0,
    progress: Callable[[str], None] | None = None,
    engine: str = "optimized",
) -> E2EResult:
    """:func:`run`'s checks on the optimized loop. The exact law of two steps is the reference
    program's, enumerated; it carries over to the optimized loop through the **coupling** check:
    fed the same random tapes as the reference loop (:data:`COUPLING_PROMPTS`, one request each,
    :data:`COUPLING_STEPS` steps, float64), the optimized loop must emit the same tokens at every
    step. The **sampled** and **statistical** checks run the optimized loop itself (the
    statistical runs as one batch of ``runs`` requests, each with its own seed)."""
    from specproof.optimized.decode import (
        KERNEL_RULES,
        OptimizedDecoder,
        TapeUniforms,
        reference_decode_on_tape,
        verifying_target,
    )

    if engine != "optimized":
        raise BadParameterError("engine", f"'reference' or 'optimized', got {engine!r}")
    if rule not in KERNEL_RULES:
        kernels = ", ".join(KERNEL_RULES)
        raise BadParameterError("rule", f"{rule!r} has no optimized kernel; kernels: {kernels}")
    report = run(proposer, rule, steps, seed, 0, process_index, progress)  # the exact check
    proc = proposer.processes[process_index]
    _, big = e2e_models()
    if progress:
        progress(f"{proposer.name}/{rule}: optimized loop coupled to the reference loop")
    dec = OptimizedDecoder(big, proposer, rule, process=proc.name)
    rng = np.random.default_rng(seed)
    tapes = [
        (rng.random((COUPLING_STEPS, dec.S)), rng.random((COUPLING_STEPS, dec.N)), rng.random(COUPLING_STEPS))
        for _ in COUPLING_PROMPTS
    ]
    for i, (p, t) in enumerate(zip(COUPLING_PROMPTS, tapes)):
        dec.admit(i, p, steps=COUPLING_STEPS, tape=TapeUniforms(*t))
    got = dec.run()
    diverged = []
    for i, (p, t) in enumerate(zip(COUPLING_PROMPTS, tapes)):
        ref = reference_decode_on_tape(
            big, proposer, rule, p, TapeUniforms(*t), COUPLING_STEPS, process=proc.name
        )
        if (ref.tokens, ref.emitted_per_step) != (got[i].tokens, got[i].emitted_per_step):
            diverged.append(i)
    report.coupling = Coupling(
        requests=len(COUPLING_PROMPTS), steps=COUPLING_STEPS, dtype="float64", diverged=diverged
    )
    if progress:
        progress(f"{proposer.name}/{rule}: {steps} sampled steps of the optimized loop")
    dec = OptimizedDecoder(big, proposer, rule, process=proc.name)
    dec.admit(0, SAMPLED_PROMPT, steps=steps, seed=seed)
    out = dec.run()[0]
    alpha = float(np.mean(out.overlaps)) if out.overlaps else 0.0
    shape = DraftTree(proposer.shape, "shape")
    chain_k = shape.n - 1 if shape.is_chain and proc.chain else None
    sa = report.sampled
    sa.steps, sa.emitted = out.target_forwards, sum(out.emitted_per_step)
    sa.mean_emitted_per_target_forward, sa.alpha = out.mean_emitted, alpha
    sa.closed_form_iid = closed_form(alpha, chain_k) if chain_k and rule == "token" else None
    sa.engine = "optimized"
    report.statistical = None
    report.engine = "optimized"
    if runs > 0:
        if progress:
            progress(f"{proposer.name}/{rule}: {runs} optimized decodings (a batch) against the target's law")
        dec = OptimizedDecoder(big, proposer, rule, process=proc.name)
        for r in range(runs):
            dec.admit(r, SAMPLED_PROMPT, max_new_tokens=STAT_HORIZON, seed=seed * 1_000_003 + r)
        done = dec.run()
        greedy = RULES[rule].preserves == "greedy"
        target = TransformerLM(verifying_target(proposer, big, True), 0.0 if greedy else 1.0)

        def one(r: int) -> tuple[int, ...]:
            return tuple(done[r].tokens[len(SAMPLED_PROMPT) :])

        report.statistical = check_runs(
            one, target, SAMPLED_PROMPT, STAT_HORIZON, runs, ALPHA, greedy=greedy
        )
    return report


def table_rows(
    steps: int, seed: int, progress: Callable[[str], None] | None = None, engine: str = "reference"
) -> list[E2EResult]:
    """Every proposer x (each rule declared exact for its default process, and typical); on the
    optimized loop (``engine="optimized"``), the rules it has a kernel for."""
    rows = []
    for p in PROPOSERS.values():
        for rule in p.exact_rules() + ["typical"]:
            if engine == "reference" or rule in _kernel_rules():
                rows.append(run(p, rule, steps, seed, progress=progress, engine=engine))
    return rows


def _kernel_rules() -> tuple[str, ...]:
    from specproof.optimized.decode import KERNEL_RULES

    return KERNEL_RULES


def markdown_table(rows: list[E2EResult], steps: int) -> str:
    lines = [
        "| proposer (process) | rule | exact 2-step check | exact mean tokens / step | "
        f"sampled tokens / target forward ({steps} steps) | closed form, i.i.d. alpha |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        ex, sa = r.exact_check, r.sampled
        verdict = "lossless" if ex.lossless else f"LOSSY (TV {ex.tv:.3g})"
        b = r.baseline
        if b is not None:  # verified by a fine-tuned model (Medusa-2): say how far it moved
            verdict += (
                f" w.r.t. the fine-tuned target; it is TV {b.tv_models:.3g} from the original "
                f"({'greedy, ' if b.greedy else ''}{b.horizon} tokens)"
            )
            if r.baseline_kl is not None:
                verdict += f", KL {r.baseline_kl.kl_per_position:.3g} per position"
        cf = sa.closed_form_iid
        closed = f"{cf:.2f} (alpha {sa.alpha:.2f})" if cf is not None else "-"
        lines.append(
            f"| {r.proposer} ({r.process}) | {r.rule} | {verdict} | "
            f"{ex.mean_emitted_per_step:.3f} | {sa.mean_emitted_per_target_forward:.2f} | {closed} |"
        )
    return "\n".join(lines)


#: ``specproof e2e --calibration``: prompts per domain, their length, steps per prompt
CALIBRATION_PROMPTS, CALIBRATION_LENGTH, CALIBRATION_STEPS = 8, 4, 12


def calibration(
    proposer: Proposer,
    rule: str,
    seed: int = 0,
    temperature: float = 0.5,
    process_index: int = 0,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], list[draft_calibration.Calibration]]:
    """Path confidence against acceptance on the 16-token target (:mod:`.draft_calibration`):
    the proposer's drafter and the same drafter at draft ``temperature``, on two domains of
    prompts (the target's own text, uniform tokens). Returns the JSON report and the two
    calibrations (for the reliability diagrams)."""
    _, big = e2e_models()
    verifier, proc = proposer.verifying_target(big), proposer.processes[process_index]
    prompts = draft_calibration.domains(big, CALIBRATION_PROMPTS, CALIBRATION_LENGTH, seed)
    own = proposer.make_drafter(big)
    cals, out = [], []
    other = f"{proposer.name} at draft temperature {temperature:g}"
    for label, drafter in ((proposer.name, own), (other, draft_calibration.tempered(own, temperature))):
        if progress:
            progress(f"calibration: {label}")
        records = draft_calibration.collect(
            verifier, drafter, proc, rule, proposer.shape, prompts, CALIBRATION_STEPS, seed
        )
        cal = draft_calibration.calibrate(records, label)
        cals.append(cal)
        out.append(
            cal.to_json()
            | {
                "domains": {d: c.to_json() for d, c in draft_calibration.by_domain(records, label).items()},
                "agreement": draft_calibration.agreement(records).describe(),
                "calibration_test": draft_calibration.agreement(records, against="confidence").describe(),
            }
        )
    settings = {
        "rule": rule,
        "process": proc.name,
        "seed": seed,
        "prompts_per_domain": CALIBRATION_PROMPTS,
        "prompt_length": CALIBRATION_LENGTH,
        "steps_per_prompt": CALIBRATION_STEPS,
        "bins": list(draft_calibration.EDGES),
    }
    return {"settings": settings, "drafters": out}, cals


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


def calibration_lines(report: dict[str, Any], cals: list[draft_calibration.Calibration]) -> list[str]:
    """The calibration summary and a side-by-side reliability table as text."""
    st = report["settings"]
    lines = [
        f"  calibration ({st['process']} verified by {st['rule']}, seed {st['seed']}; "
        f"{st['prompts_per_domain']} prompts of {st['prompt_length']} tokens per domain, "
        f"{st['steps_per_prompt']} steps each; confidence bins of width 0.1):"
    ]
    for d, cal in zip(report["drafters"], cals):
        lines.append(f"    {cal.describe()}")
        for dom in d["domains"].values():
            lines.append(
                f"      {dom['label']}: ECE {dom['ece']:.3f} over {dom['nodes']} nodes "
                f"(mean confidence {dom['mean_confidence']:.3f}, acceptance {dom['acceptance']:.3f})"
            )
        lines.append(f"      {d['calibration_test']}")
        lines.append(f"      {d['agreement']}")
    lines.append("    bin         " + "".join(f"| {c.label[:34]:<34} " for c in cals))
    for i, b in enumerate(cals[0].bins):
        row = f"    {b.label:<11} "
        for c in cals:
            x = c.bins[i]
            cell = "" if x.nodes == 0 else f"{x.nodes:4d}: conf {x.confidence:.2f} -> acc {x.acceptance:.2f}"
            row += f"| {cell:<34} "
        lines.append(row)
    return lines


def write_report(path: str, report: E2EResult, cals: list[draft_calibration.Calibration]) -> None:
    """The run as Markdown (text bars), or ``.html`` with the reliability diagrams, or ``.svg``:
    the diagrams alone, side by side."""
    from specproof.properties.audit.report import to_html, to_markdown

    ex = report.exact_check
    head = (
        f"{report.proposer} ({report.process}) verified by {report.rule}: "
        + ("LOSSLESS" if report.lossless else "LOSSY")
        + f"; exact 2-step check TV = {ex.tv:.3g}, "
        + f"{ex.mean_emitted_per_step:.3f} tokens per step expected"
    )
    blocks: list[Any] = [("h1", f"specproof e2e: {report.proposer}"), ("p", head)]
    if report.statistical is not None:
        blocks.append(("p", "statistical: " + report.statistical.summary()))
    blocks += [("p", line.strip()) for line in describe_more(report)]
    if cals:
        if report.calibration is None:
            raise UsageError("report: reliability diagrams need the calibration report (calibration())")
        st = report.calibration["settings"]
        note = (
            f"{st['process']} verified by {st['rule']} on the 16-token target, seed {st['seed']}; "
            f"{st['prompts_per_domain']} prompts of {st['prompt_length']} tokens in each of two domains "
            f"(the target's own text, uniform tokens), {st['steps_per_prompt']} steps each. Confidence: the "
            "product of the draft probabilities along a node's path; accepted: the whole path accepted. "
            "Ten bins of width 0.1; ECE = sum over bins of (bin weight x |mean confidence - acceptance|). "
            "Descriptive of these prompts and this seed, not a lossless property."
        )
        blocks += draft_calibration.report_blocks(cals, note)
        for d in report.calibration["drafters"]:
            doms = "; ".join(
                f"{name}: ECE {x['ece']:.3f} over {x['nodes']} nodes" for name, x in d["domains"].items()
            )
            blocks.append(
                ("p", f"{d['label']}: per domain, {doms}. {d['calibration_test']}. {d['agreement']}.")
            )
    if path.lower().endswith(".svg"):
        if not cals:
            raise UsageError("report: an .svg report holds the reliability diagrams: add --calibration")
        text = draft_calibration.figure_svg(cals)
    elif path.lower().endswith((".html", ".htm")):  # the diagrams stand for the text bars
        page = to_html([b for b in blocks if b[0] != "bars"])
        if cals:
            page = page.replace("</body></html>", draft_calibration.html_figures(cals) + "</body></html>")
        text = page
    else:
        text = to_markdown(blocks)
    with open(path, "w") as f:
        f.write(text)
