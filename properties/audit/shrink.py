"""Shrinking a witness: after a lossy verdict, a smaller battery case that is still rejected.

A witness a person can check by hand is small: few draft nodes, one pair style. The search is
greedy and deterministic (the same candidates in the same order for the same witness), each
candidate audited at the witness's sample size and at ``alpha_case / shrink``, so a reported
shrunk witness is itself a finding at the audit's per-case level. ``shrink_seconds`` only
guards it; a search stopped by it says so in the result's note.
"""

from __future__ import annotations

from dataclasses import replace

from specproof.properties.audit.battery import Case
from specproof.properties.audit.results import LOSSY, CaseResult
from specproof.properties.audit.stages import AuditConfig, audit
from specproof.properties.conformance.backends import Backend
from specproof.properties.plan import Budget


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
                shrink=0,
                call_timeout=config.call_timeout,
            )
            r = audit(backend, sub)
            if r.verdict == LOSSY and r.cases and r.cases[0].rejected:
                current, best = cand, r.cases[0]
                break
        else:
            break
    if best is None:
        return (
            None,
            f"shrinking: none of the {tried} smaller cases tried was rejected; the witness is the smallest",
        )
    return best, ""
