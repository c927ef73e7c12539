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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from specproof.reference.decode import decode, e2e_models
from specproof.reference.dynamic_tree import DynamicTree
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
) -> dict[str, Any]:
    """Every check of one (proposer, process, rule); see the module doc."""
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


def table_rows(steps: int, seed: int, progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Every proposer x (each rule declared exact for its default process, and typical)."""
    rows = []
    for p in PROPOSERS.values():
        for rule in applicable_rules(p) + ["typical"]:
            rows.append(run(p, rule, steps, seed, progress=progress))
    return rows


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
