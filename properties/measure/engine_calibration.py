"""The engine audit measured: its false-alarm rate on exact engines and its power on the mutant
loops (``specproof calibrate --engine`` writes docs/measurements/engine-audit-calibration.*;
proofs_notes/engine_audit.md quotes it): the cells test of the joint law alone, as it was measured;
the token test has its own, `specproof calibrate --tokens`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specproof.properties.engine.audit import ENGINE_PACKAGES, EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import T07, T1, Sampling
from specproof.properties.engine.registry import resolve_engine, with_options
from specproof.properties.measure.rate import Rate, rejection_rate
from specproof.properties.outputs import versions
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError


def calibration(
    runs: int = 300,
    samples: int = 300,
    alpha: float = 0.01,
    power_runs: int = 20,
    say: Callable[[str], None] = print,
    only: Sequence[str] | None = None,
) -> dict[str, Any]:
    """False alarms of the audit (4 looks, fixed size) on exact engines over ``runs`` seeds at
    ``alpha``, and the rejection rate of each lossy mutant loop on its witness case over
    ``power_runs`` seeds at the default suite's level; ``specproof calibrate
    --engine`` writes docs/measurements/engine-audit-calibration.*. ``only``: the rows of these
    engines alone (an unknown name is refused)."""
    out: dict[str, Any] = {
        "versions": versions(ENGINE_PACKAGES),
        "alpha": alpha,
        "runs": runs,
        "samples": samples,
        "exact": [],
    }
    from specproof.properties.engine.param_mutants import EOS, GRAMMAR, PENALTIES
    from specproof.properties.engine.stop_mutants import STOPS

    exact = [
        ("reference.direct", T1),
        ("reference.draft.token", T1),
        # the laws of request parameters: penalties, and a grammar with end of sequence
        ("alternative.sampling_params", PENALTIES),
        ("alternative.sampling_params", Sampling(1.0, eos=EOS, grammar=GRAMMAR)),
        # the acceptance oracle's test beside the law test (a false alarm: acceptance_low)
        ("alternative.fresh_draft_kv", T1),
        # stop strings: samples cut inside blocks, the absorbing law
        ("alternative.stops", STOPS),
    ]
    power = [
        ("mutant.greedy_draft_soft_law", (0, 6), T1, 300),
        ("mutant.no_kv_rollback", (5, 2, 5, 2), T07, 700),
        ("mutant.temperature_target_only", (0, 6), T07, 700),
        ("mutant.late_features", (5, 2, 5, 2), T07, 700),
        ("mutant.stale_draft_kv", (0, 6), T1, 1000),
    ]
    if only:
        known = {row[0] for row in exact} | {row[0] for row in power}
        unknown = [n for n in only if n not in known]
        if unknown:
            raise UsageError(
                f"--only: {unknown[0]!r} has no calibration row; rows: {', '.join(sorted(known))}"
            )
        exact = [row for row in exact if row[0] in only]
        power = [row for row in power if row[0] in only]
    out["only"] = list(only or ())
    for name, setting in exact:
        out["exact"].append(_false_alarms(name, setting, runs, samples, alpha, say))
    out["power"] = [_power(name, prompt, s_, n, power_runs, say) for name, prompt, s_, n in power]
    return out


def _rejections(
    name: str, prompt: tuple[int, ...], setting: Sampling, n: int, runs: int, alpha: float, seed0: int
) -> tuple[Rate, list[int], float]:
    """``runs`` seeded audits of one engine case at ``n`` samples (:func:`.rate.rejection_rate`):
    how many were flagged (lossy, or acceptance_low by the acceptance oracle where the engine
    declares its rule), the samples each used, the seconds."""
    spec = with_options(resolve_engine(name), prompts=[prompt], samplings=[setting])
    done = rejection_rate(
        lambda seed: audit_engine(spec, EngineAuditConfig(alpha=alpha, samples=n, seed=seed, test="cells")),
        range(seed0, seed0 + runs),
        lambda r: r.verdict in (Verdict.LOSSY, Verdict.ACCEPTANCE_LOW),
        keep=lambda r: r.cases[0].n,
    )
    return done.rate, done.results, done.seconds


def _false_alarms(
    name: str, setting: Sampling, runs: int, samples: int, alpha: float, say: Callable[[str], None]
) -> dict[str, Any]:
    """Seeded audits of an exact engine at a fixed size: how often it is called lossy."""
    rate, _, seconds = _rejections(name, (0, 6), setting, samples, runs, alpha, 1000)
    say(f"{name}: {rate.hits}/{runs} false alarms at alpha {alpha:g} ({rate.text()})")
    return {
        "engine": name,
        "case": f"{setting.label} after [0 6], M = 4",
        "runs": runs,
        "samples": samples,
        **rate.fields("false_alarms"),
        "seconds": seconds,
    }


def _power(
    name: str, prompt: tuple[int, ...], setting: Sampling, n: int, runs: int, say: Callable[[str], None]
) -> dict[str, Any]:
    """Seeded audits of a lossy mutant on its witness case: how often it is caught."""
    rate, used, seconds = _rejections(name, prompt, setting, n, runs, 1e-3, 2000)
    say(f"{name}: rejected in {rate.hits}/{runs} runs at {n} samples (mean {np.mean(used):.0f} used)")
    ci = rate.fields("rejected")
    return {
        "engine": name,
        "case": f"{setting.label} after {list(prompt)}",
        "samples": n,
        "alpha": 1e-3,
        "runs": runs,
        "rejected": ci["rejected"],
        "ci95": ci["ci95"],
        "mean_samples_used": float(np.mean(used)),
        "seconds": seconds,
    }


def calibration_markdown(doc: dict[str, Any]) -> str:
    v = doc["versions"]
    lines = [
        "# Engine audit: calibration and power",
        "",
        "Measured with `specproof calibrate --engine"
        + "".join(f" --only {n}" for n in doc.get("only", ()))
        + f"` (specproof {v.get('specproof', '?')}, torch {v.get('torch', '?')}, Python {v['python']}).",
        "",
        f"False alarms of exact engines: each run is one audit (4 looks, Bonferroni over them; "
        f"{doc['samples']} samples; alpha {doc['alpha']:g}), seeds 1000 on.",
        "",
        "| engine | case | runs | samples/run | alpha | false alarms | rate [95% CI] |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in doc["exact"]:
        lines.append(
            f"| `{r['engine']}` | `{r['case']}` | {r['runs']} | {r['samples']} | {doc['alpha']:g} | "
            f"{r['false_alarms']} | {r['rate']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] |"
        )
    if not doc["power"]:
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "Power on the mutant loops (the cases and sizes of tests/test_engine_audit.py, alpha 1e-3, "
        "seeds 2000 on):",
        "",
        "| mutant | case | samples | runs | rejected [95% CI] | mean samples used (early stop) |",
        "|---|---|---:|---:|---|---:|",
    ]
    for r in doc["power"]:
        lines.append(
            f"| `{r['engine']}` | `{r['case']}` | {r['samples']} | {r['runs']} | {r['rejected']} "
            f"[{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] | {r['mean_samples_used']:.0f} |"
        )
    return "\n".join(lines) + "\n"
