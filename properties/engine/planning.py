"""The engine audit's plan: the samples each case gets from the statistics alone (never from the
clock), the looks, and the plan's text announced before any sampling, with its estimated time and,
where it does not fit the budget, what would (docs/token-audit.md, "A plan that does not fit its
budget")."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from specproof.properties.audit import stats
from specproof.properties.engine.token_stage import plan_detects, plan_limit
from specproof.properties.tokens.power import POOLED_SHARE, tv_text

if TYPE_CHECKING:
    from specproof.properties.engine.audit import EngineAudit

#: a case whose samples end early is drawn at most this many times its planned samples to see its
#: planned tokens (:meth:`.audit.EngineAudit._extend`)
EXTEND = 16


def look_schedule(n: int, looks: int) -> list[int]:
    """The sample counts at which a case of ``n`` samples is tested: n/2^j, smallest first."""
    return sorted({max(1, math.ceil(n / 2**j)) for j in range(looks)})


def planned(audit: EngineAudit, point_mass: bool) -> int:
    """Samples per case, from the statistics alone: a point mass needs enough tokens that any
    deviation of per-token TV ``tv`` shows as a hard failure; else the token test's tokens per
    case (in samples of M), or the cells test's plan where it runs alone."""
    c, m = audit.config, audit.spec.tokens
    if c.samples:
        return c.samples
    if point_mass:
        per = m if audit.tokens_on else 1
        return max(2, math.ceil(math.log(1 - c.power) / (per * math.log(1 - c.tv))))
    if audit.tokens_on:
        return max(2, math.ceil(audit.planned_tokens / m))
    return stats.plan_samples(c.tv, audit.alpha_look / 2, c.power, c.max_cells - 1)


def plan_text(audit: EngineAudit) -> str:
    """The plan and its estimated time, as announced before any sampling; sets ``audit.fit``."""
    c, res, spec = audit.config, audit.result, audit.spec
    total = sum(r.planned for r in res.cases)
    estimate = total * audit.per_sample
    lines = [
        f"engine {spec.name}: {len(audit.cases)} cases (prompts x settings), M = {spec.tokens} new "
        f"tokens, V = {spec.vocab}; family-wise alpha {c.alpha:g}",
    ]
    if audit.tokens_on:
        lines += token_plan_lines(audit)
    if audit.cells_on:
        lines.append(
            f"  cells test of the joint law: on up to {c.max_cells} cells of the first M tokens, alpha "
            f"{audit.alpha_cells:g}, {c.looks} looks at level {audit.alpha_look:.3g} each"
        )
    for r in res.cases:
        what = "point mass: any deviation is a hard failure" if r.point_mass else f"looks at {r.schedule}"
        lines.append(f"    {r.case.name}: {r.planned:,} samples ({what})")
    lines += [f"  note: {n}" for n in res.notes]
    lines.append(
        f"  probe: {1000 * audit.per_sample:.1f} ms per sample ({audit.probe_chunk} drawn, their laws "
        f"read and scored as sampling does it) -> about {estimate:.0f} s (budget {c.budget_seconds:g} s)"
    )
    audit.fit = fit(audit, estimate)
    if audit.fit:
        lines.append(
            "  the plan is estimated not to fit the budget (at the probe's rate, which one chunk sets: "
            "an engine that speeds up once warm may still finish): unless a deviation is found first "
            f"or the rate improves, the audit ends underpowered; {audit.fit}"
        )
    return "\n".join(lines)


def fit(audit: EngineAudit, estimate: float) -> str:
    """Where the plan's estimate exceeds the budget: the per-token TV whose plan would fit it
    and the budget that would fit this plan (empty where it fits, or the plan is a fixed size)."""
    c = audit.config
    if estimate <= c.budget_seconds or c.samples or estimate <= 0:
        return ""
    budget = math.ceil(1.25 * estimate / 60) * 60  # with a margin, in whole minutes
    tv = tv_fitting(audit, c.budget_seconds / estimate) if audit.tokens is not None else None
    words = f"--budget-seconds {budget:g} fits it"
    if tv is not None:
        words = f"--tv {tv:.2g} would fit the budget ({c.tv:g} asked), or " + words
    return words


def tv_fitting(audit: EngineAudit, ratio: float) -> float | None:
    """The smallest per-token TV of two significant digits (on a 5 % grid above the plan's)
    whose token plan is at most ``ratio`` times the plan's, or None below 0.45."""
    assert audit.tokens is not None
    c, now, tv = audit.config, audit.planned_tokens, audit.config.tv
    while True:
        step = 10.0 ** (math.floor(math.log10(tv * 1.05)) - 1)
        tv = math.ceil(tv * 1.05 / step - 1e-9) * step
        if tv > 0.45:
            return None
        if audit.tokens.plan_tokens(tv, audit.alpha_tokens, c.power) <= ratio * now:
            return float(f"{tv:.2g}")


def token_plan_lines(audit: EngineAudit) -> list[str]:
    c, stage = audit.config, audit.tokens
    if stage is None:
        return []
    # a fixed size (--samples) is that many samples of M tokens a case, not the planner's tokens
    n = c.samples * audit.spec.tokens if c.samples else audit.planned_tokens
    cases = len(audit.cases)
    pooled = stage.test.pooled is not None
    what = (
        f"for power {c.power:g} against a per-token TV of {c.tv:g}"
        if not c.samples
        else (f"at most, a fixed size ({c.samples:,} samples of M = {audit.spec.tokens})")
    )
    if pooled and not c.samples:
        what += " shared by every case"
    lines = [
        f"  token test (every token against the law at its own prefix; anytime-valid, alpha "
        f"{audit.alpha_tokens:g}): {n:,} tokens per case {what} (sharpening or flattening, drift to "
        "the argmax: the plan's statistics)",
    ]
    if pooled:
        alone = stage.alone_detects(n, audit.alpha_tokens, c.power)
        lines.append(
            f"    pooled: one family of statistics fed every case's tokens holds {POOLED_SHARE:g} of the "
            f"wealth, the cases' own the rest; a deviation in one case alone is detected at a per-token "
            f"TV of {tv_text(alone['mean'])} (sharpening) or {tv_text(alone['greedy'])} (to the argmax) "
            f"by its "
            f"{n:,} tokens"
        )
    if not c.samples:
        detects = plan_detects(n * cases if pooled else n, audit.alpha_tokens, c.power, cases, pooled)
        limit = plan_limit(c.tv, audit.alpha_tokens, c.power)
        lines.append(
            f"    at that size the cells of the transform detect a TV of {detects:.3g}; the most "
            f"powerful test of the plan's deviation needs {limit:,} tokens (the information limit)"
        )
    if not c.samples and any(rn.ends for rn in audit.runners):
        lines.append(
            "    samples may end early (an end of sequence, a stop string): a case then draws more until "
            f"it has scored its planned tokens (at most {EXTEND} times its planned samples)"
        )
    if not all(stage.blocks.values()):
        told = [rn for rn in audit.runners if "steps" in rn.offers and "sequential" not in rn.offers]
        if told:
            lines.append(
                "    the index in the speculative step is not tested: the engine tells its steps but "
                "does not declare its verification sequential"
            )
    return lines
