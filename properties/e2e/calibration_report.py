"""``specproof e2e --calibration``: path confidence against acceptance, and its text lines.

:func:`calibration` measures, on the 16-token target, the proposer's drafter and the same drafter
at another draft temperature on two domains of prompts (:mod:`.draft_calibration`);
:func:`calibration_lines` is what ``specproof e2e --calibration`` prints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specproof.properties.e2e import draft_calibration
from specproof.reference.decode import e2e_models
from specproof.reference.proposers import Proposer

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
