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
  of their first 3 tokens (:mod:`.sequence_test`, alpha 1e-6).

The verdict is lossy if either check flags it.

``engine="optimized"`` (``specproof e2e --engine optimized``): the same checks on the optimized
loop (:mod:`specproof.optimized.decode`, :func:`optimized_run`); the exact law, enumerated from
the reference program, carries over to it through a coupling check on shared tapes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specproof.reference.decode import decode, e2e_models
from specproof.reference.dynamic_tree import DynamicTree
from specproof.reference.errors import BadParameterError
from specproof.reference.processes import Process
from specproof.reference.proposers import PROPOSERS, Proposer
from specproof.reference.rules import RULES
from specproof.reference.transformer import TransformerLM
from specproof.reference.tree import DraftTree

from .exact import multi_step_check
from .sequence_test import sequence_test

EXACT_PREFIX = (2, 0, 3, 2)
SAMPLED_PROMPT = (3, 4)
STAT_HORIZON = 3
ALPHA = 1e-6


def applicable_rules(proposer: Proposer, process_index: int = 0) -> list[str]:
    """The rules declared exact for the proposer's process that verify its trees."""
    proc = proposer.processes[process_index]
    chain = DraftTree(proposer.shape, "shape").is_chain and proc.chain
    return [r.name for r in RULES.values() if proc.name in r.exact_for and r.applies_to(chain)]


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
    engine: str = "reference",
) -> dict[str, Any]:
    """Every check of one (proposer, process, rule); see the module doc.
    ``engine``: ``"optimized"`` runs the checks on the optimized loop (:func:`optimized_run`)."""
    if engine != "reference":
        return optimized_run(proposer, rule, steps, seed, runs, process_index, progress, engine)
    proc = proposer.processes[process_index]
    small, big = e2e_models()
    if progress:
        progress(f"{proposer.name}/{rule}: exact 2-step law on the {small.vocab}-token target")
    tv, exact_mean = multi_step_check(
        rule, proc, TransformerLM(small), proposer.make_drafter(small), proposer.exact_shape, EXACT_PREFIX, 2
    )
    exact_depth = DraftTree(proposer.exact_shape, "shape").max_depth
    if progress:
        progress(f"{proposer.name}/{rule}: {steps} sampled steps on the {big.vocab}-token target")
    drafter = proposer.make_drafter(big)
    out = decode(big, drafter, proc, rule, proposer.shape, SAMPLED_PROMPT, steps, np.random.default_rng(seed))
    shape = DraftTree(proposer.shape, "shape")
    alpha = float(np.mean(out.overlaps)) if out.overlaps else 0.0
    chain_k = shape.n - 1 if shape.is_chain and proc.chain else None
    report: dict[str, Any] = {
        "proposer": proposer.name,
        "process": proc.name,
        "rule": rule,
        "declared_exact": proc.name in RULES[rule].exact_for,
        "exact_check": {
            "vocab": small.vocab,
            "steps": 2,
            "depth": exact_depth,
            "drafts": _drafts(proc, proposer.exact_shape),
            "tv": float(tv),
            "lossless": bool(tv < 1e-12),  # float64 laws: equal up to rounding
            "mean_emitted_per_step": float(exact_mean),
        },
        "sampled": {
            "vocab": big.vocab,
            "drafts_per_step": _drafts(proc, proposer.shape),
            "steps": out.target_forwards,
            "emitted": sum(out.emitted_per_step),
            "mean_emitted_per_target_forward": out.mean_emitted,
            "alpha": alpha,
            "closed_form_iid": closed_form(alpha, chain_k) if chain_k and rule == "token" else None,
        },
        "statistical": None,
    }
    if runs > 0:
        if progress:
            progress(
                f"{proposer.name}/{rule}: {runs} decoding runs against the target's {STAT_HORIZON}-token law"
            )

        def one(r: int) -> tuple[int, ...]:
            o = decode(
                big,
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
        target = TransformerLM(big, 0.0 if greedy else 1.0)
        res = sequence_test(one, target, SAMPLED_PROMPT, STAT_HORIZON, runs, ALPHA, greedy=greedy)
        report["statistical"] = {
            "runs": res.runs,
            "horizon": res.horizon,
            "alpha": res.alpha,
            "p_value": res.p_value,
            "cells": res.cells,
            "detectable_tv": res.detectable_tv,
            "unresolved": res.unresolved,
            "lossless": res.lossless,
            "summary": res.describe(),
        }
    report["lossless"] = report["exact_check"]["lossless"] and (
        report["statistical"] is None or report["statistical"]["lossless"]
    )
    return report


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
) -> dict[str, Any]:
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
    n = len(COUPLING_PROMPTS)
    report["coupling"] = {
        "requests": n,
        "steps": COUPLING_STEPS,
        "dtype": "float64",
        "equal": not diverged,
        "diverged": diverged,
        "summary": f"coupled to the reference loop on shared tapes ({n} requests x {COUPLING_STEPS} steps, "
        + ("float64): every token equal" if not diverged else f"float64): requests {diverged} DIVERGED"),
    }
    if progress:
        progress(f"{proposer.name}/{rule}: {steps} sampled steps of the optimized loop")
    dec = OptimizedDecoder(big, proposer, rule, process=proc.name)
    dec.admit(0, SAMPLED_PROMPT, steps=steps, seed=seed)
    out = dec.run()[0]
    alpha = float(np.mean(out.overlaps)) if out.overlaps else 0.0
    shape = DraftTree(proposer.shape, "shape")
    chain_k = shape.n - 1 if shape.is_chain and proc.chain else None
    report["sampled"].update(
        steps=out.target_forwards,
        emitted=sum(out.emitted_per_step),
        mean_emitted_per_target_forward=out.mean_emitted,
        alpha=alpha,
        closed_form_iid=closed_form(alpha, chain_k) if chain_k and rule == "token" else None,
        engine="optimized",
    )
    report["statistical"] = None
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

        res = sequence_test(one, target, SAMPLED_PROMPT, STAT_HORIZON, runs, ALPHA, greedy=greedy)
        report["statistical"] = {
            "runs": res.runs,
            "horizon": res.horizon,
            "alpha": res.alpha,
            "p_value": res.p_value,
            "cells": res.cells,
            "detectable_tv": res.detectable_tv,
            "unresolved": res.unresolved,
            "lossless": res.lossless,
            "summary": res.describe(),
            "engine": "optimized",
        }
    report["engine"] = "optimized"
    report["lossless"] = (
        report["exact_check"]["lossless"]
        and not diverged
        and (report["statistical"] is None or report["statistical"]["lossless"])
    )
    return report


def table_rows(
    steps: int, seed: int, progress: Callable[[str], None] | None = None, engine: str = "reference"
) -> list[dict[str, Any]]:
    """Every proposer x (each rule declared exact for its default process, and typical); on the
    optimized loop (``engine="optimized"``), the rules it has a kernel for."""
    rows = []
    for p in PROPOSERS.values():
        for rule in applicable_rules(p) + ["typical"]:
            if engine == "reference" or rule in _kernel_rules():
                rows.append(run(p, rule, steps, seed, progress=progress, engine=engine))
    return rows


def _kernel_rules() -> tuple[str, ...]:
    from specproof.optimized.decode import KERNEL_RULES

    return KERNEL_RULES


def markdown_table(rows: list[dict[str, Any]], steps: int) -> str:
    lines = [
        "| proposer (process) | rule | exact 2-step check | exact mean tokens / step | "
        f"sampled tokens / target forward ({steps} steps) | closed form, i.i.d. alpha |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        ex, sa = r["exact_check"], r["sampled"]
        verdict = "lossless" if ex["lossless"] else f"LOSSY (TV {ex['tv']:.3g})"
        cf = sa["closed_form_iid"]
        closed = f"{cf:.2f} (alpha {sa['alpha']:.2f})" if cf is not None else "-"
        lines.append(
            f"| {r['proposer']} ({r['process']}) | {r['rule']} | {verdict} | "
            f"{ex['mean_emitted_per_step']:.3f} | {sa['mean_emitted_per_target_forward']:.2f} | {closed} |"
        )
    return "\n".join(lines)
