"""The token test's measurements as Markdown (docs/measurements/token-calibration.md): one section
per part of :func:`.token_calibration.calibrate_tokens`'s document that ran, each with what was
fed, at which alpha and seed, and the table of what came out.
"""

from __future__ import annotations

from typing import Any

from specproof.properties.measure.rate import Rate


def _md_power(doc: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    lines += [
        "",
        "## Power in tokens, against the information limit",
        "",
        "Each statistic fed its reference deviation (docs/token-audit.md) inside a whole family of "
        "one case (M = 64, no draft law, no steps), alpha 1e-4, up to the tokens the plan states "
        "for it at its share; power 0.99 planned. Serial: the correlation of consecutive "
        "transforms (3 times the TV of the row's size).",
        "",
        "| statistic | deviation | planned tokens | information limit | plan / limit | crossed [95% CI] "
        "| median tokens to cross |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in doc["power"]:
        lim, med = r["information_limit"], r["median_tokens_to_cross"]
        limit = f"{lim:,}" if lim else "-"
        ratio = f"{r['planned_tokens'] / lim:.2f}" if lim else "-"
        median = f"{med:,.0f}" if med else "-"
        lines.append(
            f"| {r['statistic']} | {r['deviation']:g} | {r['planned_tokens']:,} | {limit} | {ratio} | "
            f"{r['crossed']}/{r['runs']} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] | {median} |"
        )
    return lines


def _md_pooled_power(doc: dict[str, Any]) -> list[str]:
    rows = doc["pooled_power"]
    lines = [
        "",
        "## Power with several cases: the pooled family",
        "",
        f"Token tests of {rows[0]['cases']} cases whose every case deviates by the reference deviation (a "
        "deviation the cases share), alpha 1e-4, fed the pooled plan's tokens, the cases in turn; "
        "beside them the tokens the plan asked before the pooled family (each case its own plan). "
        "Power 0.99 planned.",
        "",
        "| statistic | deviation | cases | planned tokens (all cases) | before pooling | information limit "
        "| plan / limit | crossed [95% CI] | median tokens to cross |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        med = r["median_tokens_to_cross"]
        lines.append(
            f"| {r['statistic']} | {r['deviation']:g} | {r['cases']} | {r['planned_tokens']:,} | "
            f"{r['planned_before_pooling']:,} | {r['information_limit']:,} | "
            f"{r['planned_tokens'] / r['information_limit']:.2f} | {r['crossed']}/{r['runs']} "
            f"[{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] | {f'{med:,.0f}' if med else '-'} |"
        )
    return lines


def _md_false_alarms(doc: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    fa = doc["false_alarms"]
    total = sum(r["false_alarms"] for r in fa)
    n = sum(r["runs"] for r in fa)
    lo, hi = Rate(total, n).ci
    lines += [
        "",
        "## False alarms of whole audits",
        "",
        f"Engine audits of exact engines, the token test alone, planned for per-token TV {fa[0]['tv']:g} "
        f"at alpha {fa[0]['alpha']:g}, looked at after every block and stopped at the first crossing; "
        f"seeds 1000 on. In all: **{total}/{n}** false alarms (95% CI [{lo:.3f}, {hi:.3f}]).",
        "",
        "| engine | M | V | cases | audits | tokens per audit | false alarms [95% CI] | verdicts | seconds |",
        "|---|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in fa:
        verdicts = ", ".join(f"{k} {c}" for k, c in sorted(r["verdicts"].items()))
        ci = f"[{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]"
        lines.append(
            f"| `{r['engine']}` | {r['tokens']} | {r['vocab']:,} | {r.get('cases', 1)} | {r['runs']} | "
            f"{r['tokens_per_audit']:,.0f} | {r['false_alarms']} {ci} | {verdicts} | {r['seconds']:.0f} |"
        )
    return lines


def _md_stopping(doc: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    lines += [
        "",
        "## Stopping at any time",
        "",
        "Token tests of exact engines fed one sample at a time, the wealth read after every sample. "
        "'Ever crossed' bounds every stopping rule at once (Ville: at most alpha); a random stop "
        "reads it at one look drawn uniformly; the contrast is a z-test of the transforms' mean at "
        "the same alpha, looked at after every sample as a watcher would.",
        "",
        "| engine | M | cases | streams | looks | alpha | ever crossed [95% CI] | at a random stop | "
        "naive z-test [95% CI] |",
        "|---|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in doc["stopping"]:
        lines.append(
            f"| `{r['engine']}` | {r['tokens']} | {r.get('cases', 1)} | {r['streams']} | {r['looks']} "
            f"| {r['alpha']:g} | "
            f"{r['ever_crossed']} [{r['ever_ci95'][0]:.3f}, {r['ever_ci95'][1]:.3f}] | "
            f"{r['crossed_at_random_stop']} | {r['naive_rejected']} "
            f"[{r['naive_ci95'][0]:.3f}, {r['naive_ci95'][1]:.3f}] |"
        )
    return lines


def _md_side_by_side(doc: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    lines += [
        "",
        "## The cells test and the token test, side by side",
        "",
        "One engine drawing each token from the target's law (V = 64) but at the bug's positions, "
        "where its law is moved toward the argmax by the per-token TV shown; each audit planned for "
        "that TV (the cells test for its joint TV at M = 1), alpha 1e-4, seed 0, stopped at the first "
        "rejection or at the end of its plan; measured one after the other in this run.",
        "",
        "| per-token TV | bug | test | M | verdict | samples | tokens | seconds |",
        "|---:|---|---|---:|---|---:|---:|---:|",
    ]
    for r in doc["side_by_side"]:
        if r["verdict"] == "not run":
            lines.append(
                f"| {r['tv']:g} | {r['bug']} | {r['test']} | {r['tokens']} | not run: {r['why']} | | | |"
            )
            continue
        lines.append(
            f"| {r['tv']:g} | {r['bug']} | {r['test']} | {r['tokens']} | **{r['verdict']}** | "
            f"{r['samples']:,} | {r['observed_tokens']:,} | {r['seconds']:.0f} |"
        )
    lines += [
        "",
        "The plan's power is stated for a deviation of the TV asked at every token. A deviation on "
        "tokens 40 to 64 of 64 only is 25/64 of it a token on average (at 0.03: 0.0117), which the "
        "plan for that TV does not promise to see; a `pass` there is read with that plan's power, "
        "and the plan for the smaller TV finds it.",
    ]
    return lines


def markdown(doc: dict[str, Any]) -> str:
    v = doc["versions"]
    lines = [
        "# The token test: power, false alarms, stopping, and the cells test beside it",
        "",
        f"Measured with `specproof calibrate --tokens` (specproof {v.get('specproof', '?')}, "
        f"Python {v['python']}); every row seeded.",
    ]
    if doc.get("power"):
        lines += _md_power(doc)
    if doc.get("pooled_power"):
        lines += _md_pooled_power(doc)
    if doc.get("false_alarms"):
        lines += _md_false_alarms(doc)
    if doc.get("stopping"):
        lines += _md_stopping(doc)
    if doc.get("side_by_side"):
        lines += _md_side_by_side(doc)
    return "\n".join(lines) + "\n"
