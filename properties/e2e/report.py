"""``specproof e2e --report``: the run written as Markdown, HTML or SVG.

:func:`write_report` writes the verdict, the exact and statistical checks, a moved baseline or a
staged mismatch and, with ``--calibration``, the reliability diagrams (:mod:`.draft_calibration`):
Markdown (text bars), ``.html`` (the diagrams), or ``.svg`` (the diagrams alone).
"""

from __future__ import annotations

from typing import Any

from specproof.properties.e2e import draft_calibration
from specproof.properties.e2e.results import E2EResult, describe_more
from specproof.reference.errors import UsageError


def write_report(path: str, report: E2EResult, cals: list[draft_calibration.Calibration]) -> None:
    """The run as Markdown (text bars), or ``.html`` with the reliability diagrams, or ``.svg``:
    the diagrams alone, side by side."""
    from specproof.properties.report_model import to_html, to_markdown

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
