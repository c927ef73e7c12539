"""``specproof e2e --table``: the acceptance table, every proposer x rule, and its Markdown.

:func:`table_rows` runs :func:`.check.run` for every proposer with each rule declared exact for
its default process, and typical (on the optimized loop, the rules it has a kernel for);
:func:`markdown_table` lays the rows out: the exact 2-step verdict (and how far a fine-tuned
verifier moved from the original), the exact and sampled tokens per step, the i.i.d. closed form.
"""

from __future__ import annotations

from collections.abc import Callable

from specproof.properties.e2e.results import E2EResult
from specproof.reference.proposers import PROPOSERS


def table_rows(
    steps: int, seed: int, progress: Callable[[str], None] | None = None, engine: str = "reference"
) -> list[E2EResult]:
    """Every proposer x (each rule declared exact for its default process, and typical); on the
    optimized loop (``engine="optimized"``), the rules it has a kernel for."""
    from specproof.properties.e2e import check  # check re-exports this module: import at call time

    rows = []
    for p in PROPOSERS.values():
        for rule in p.exact_rules() + ["typical"]:
            if engine == "reference" or rule in _kernel_rules():
                rows.append(check.run(p, rule, steps, seed, progress=progress, engine=engine))
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
