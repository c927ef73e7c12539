"""The engine, endpoint and traffic audits' reports, as blocks of the one report model
(:mod:`...report_model`; Markdown, HTML or JSON by the file's ending): a table of every engine's
verdict, what ran short, the witness, the power in each test's unit, then per engine its checks,
its plots (the token test's wealth over tokens, the deviating case's transforms, reported against
law probabilities, acceptance at each place of an axis) and every case's plan, samples and power;
for one deployment its sign-off. :func:`traffic_blocks` is the recorded-traffic audit's report.
"""

from __future__ import annotations

import datetime
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from specproof.properties.engine.results import EngineAuditResult
from specproof.properties.engine.traffic import TrafficResult
from specproof.properties.report_model import Bars, Lines, Scatter, write_blocks
from specproof.properties.tokens.power import tv_text
from specproof.properties.verdicts import Verdict


def report_blocks(results: Sequence[EngineAuditResult], title: str = "specproof engine audit") -> list[Any]:
    """Blocks for :mod:`.report`'s Markdown and HTML writers. The first screen: the verdict of each
    engine, what ran short, the witness (observed against expected), the power and the checks
    beside the law; then, per engine that did not simply pass, its cases."""
    out: list[Any] = [("h1", title)]
    out += _verdicts(results)
    short = [(r, c) for r in results for c in r.short]
    faults = [r for r in results if r.fault]
    if short or faults:
        out.append(("h2", "Ran short of the plan"))
        out += [("p", f"{r.engine}: sampling stopped: {r.fault}") for r in faults]
        out += [("p", f"{r.engine}: {c.case.name}: {c.n}/{c.planned} samples") for r, c in short]
        out += [
            ("p", f"{r.engine}: the plan did not fit the budget (said before sampling): {r.fit}")
            for r in results
            if r.short and r.fit
        ]
    for r in results:
        if r.witness is not None and r.witness.test is not None and not r.witness.hard_failure:
            out += _witness_bars(r)
    out += _power(results)
    for r in results:
        if r.verdict == Verdict.PASS and len(results) > 1:
            continue
        out += _details(r)
    if len(results) == 1:  # one deployment: its sign-off, item by item
        out += _signoff(results[0])
    return out


def _signoff(r: EngineAuditResult) -> list[Any]:
    from specproof.properties.engine.signoff import signoff

    rows = [[str(i), it.question, it.answer, it.detail] for i, it in enumerate(signoff(r), 1)]
    return [
        ("h2", "Sign-off"),
        (
            "p",
            "Each question of a speculative deployment's checklist: yes, no with the witness, or not "
            "tested and why.",
        ),
        ("table", (["#", "question", "answer", "detail"], rows)),
    ]


def _cases(n: int) -> str:
    return f"{n} case" if n == 1 else f"{n} cases"


def _verdicts(results: Sequence[EngineAuditResult]) -> list[Any]:
    rows = []
    for r in results:
        agrees = "" if r.agrees is None else ("yes" if r.agrees else "**NO**")
        rows.append([r.engine, r.expected or "", f"**{r.verdict.value}**", agrees, r.short_witness()])
    return [("table", (["engine", "expected", "verdict", "agrees", "witness"], rows))]


def _witness_bars(r: EngineAuditResult) -> list[Any]:
    w = r.witness
    assert w is not None and w.test is not None
    pos = w.test.conditional.witness() if w.test.conditional else None
    if pos is None or pos.worst is None:
        return [("p", f"{r.engine}: witness {w.case.name}: {w.test.summary()}")]
    g = pos.worst
    title = f"Next token at position {pos.position} after {g.label} ({r.engine}, {w.case.name})"
    title += ": observed vs expected"
    return [("bars", Bars(title, list(g.labels), list(g.observed), list(g.expected)))]


def _power(results: Sequence[EngineAuditResult]) -> list[Any]:
    """The plan and what each engine's samples can vouch for, each figure with its unit: the token
    test's e-value and the per-token TV it detects (sharpening / toward the argmax; every case
    pooled, and the worst case alone), the cells test's joint TV of the M tokens where it ran."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out: list[Any] = [("h2", "Power and the checks beside the law")]
    tokens = any(r.token_test is not None for r in results)
    cells = any(c.test is not None for r in results for c in r.cases)
    if results:
        cfg = results[0].config
        tests = []
        if tokens and cfg.samples:  # a fixed size: no plan; what it detects is in the table
            tests.append(
                f"the token test at a fixed {cfg.samples:,} samples per case (each emitted token's law "
                "against the target's at its prefix; what those tokens detect at power "
                f"{cfg.power:g} is in the table), anytime-valid"
            )
        elif tokens:
            tests.append(
                f"the token test planned for a per-token TV of {cfg.tv:g} (each emitted token's law "
                f"against the target's at its prefix) at power {cfg.power:g}, anytime-valid"
            )
        if cells:
            tests.append(
                f"the cells test of the joint law of the M tokens on up to {cfg.max_cells} cells (Bonferroni "
                f"over {cfg.looks} looks)"
            )
        out.append(
            (
                "p",
                f"Generated {now}. Family-wise alpha {cfg.alpha:g} per engine (over its cases); "
                + ("; ".join(tests) or "no law test ran")
                + f"; seed {cfg.seed}; budget {cfg.budget_seconds:g} s per engine.",
            )
        )
    rows = []
    for r in results:
        broke = r.verdict in (Verdict.CONTRACT_VIOLATION, Verdict.ERROR)
        row = [r.engine, f"{r.samples:,}"]
        if tokens:
            row += [f"{sum(c.observed_tokens for c in r.cases):,}", _evalue(r), "" if broke else _token_tv(r)]
        if cells:
            det = [c.detectable_tv for c in r.cases if c.n and c.test is not None]
            row.append(f"{max(det):.3g}" if det and not broke else "")
        row += [
            str(r.speculation.status),
            str(r.reports.status),
            "" if r.control is None or r.control.tolerance is None else f"{r.control.tolerance:.2g}",
            "" if r.per_sample_seconds is None else f"{1000 * r.per_sample_seconds:.1f}",
            f"{r.seconds:.1f}",
        ]
        rows.append(row)
    head = ["engine", "samples"]
    if tokens:
        head += ["tokens scored", "token test e-value (1/alpha)"]
        head.append("per-token TV detected: sharpening / argmax")
    if cells:
        head.append("joint TV detected, cells test (worst case)")
    head += ["speculation", "reported probabilities", "tolerance (control)", "ms/sample", "s"]
    out.append(("table", (head, rows)))
    return out


def _evalue(r: EngineAuditResult) -> str:
    if r.token_test is None:
        return ""
    e = math.exp(min(700.0, r.token_test["log_wealth"]))
    return f"{e:.3g} ({1 / r.token_test['alpha']:.3g})"


def _token_tv(r: EngineAuditResult) -> str:
    """The per-token TV the token test's tokens detect at the plan's power: every case pooled
    (where the plan pools them) and the worst case alone."""
    parts = []
    pooled = (r.token_test or {}).get("pooled") or {}
    d = pooled.get("detects_per_token_tv")
    if d:
        parts.append(f"{tv_text(d['mean'])} / {tv_text(d['greedy'])} every case pooled")
    # a point-mass case (greedy: every sample must be the argmax, checked exactly) says no TV
    alone = [c.token_detects for c in r.cases if c.token_detects and not c.point_mass]
    if alone:
        worst = max(alone, key=lambda t: t["mean"])
        which = "worst case alone" if d else "worst case"
        parts.append(f"{tv_text(worst['mean'])} / {tv_text(worst['greedy'])} {which}")
    return "; ".join(parts)


def _details(r: EngineAuditResult) -> list[Any]:
    out: list[Any] = [("h2", f"{r.engine}: {r.verdict.value}"), ("p", r.doc)]
    if r.cases:
        planned = sum(c.planned for c in r.cases)
        out.append(
            (
                "p",
                f"Plan: {planned:,} samples over {_cases(len(r.cases))} (M = {r.tokens}, V = {r.vocab}); "
                f"drawn: {r.samples:,} ({r.per_sample_text()}).",
            )
        )
    if r.worker_fault is not None:  # the audit's own side failed: nothing below is a finding
        out.append(("p", f"The audit's own side failed (never the declared verdict): {r.worker_fault}"))
        return out
    if r.violation:
        out.append(("p", r.violation_text()))
        if r.verdict == Verdict.CONTRACT_VIOLATION:
            return out
    out += [("p", r.speculation.line()), ("p", r.reports.line())]
    if r.acceptance is not None:
        out.append(("p", r.acceptance.line()))
    if r.control is not None:
        out.append(("p", r.control.line()))
    w = r.witness or (min(r.cases, key=lambda c: c.pvalue) if r.cases else None)
    if w is not None:
        label = "Witness" if r.witness else "No case rejected; the closest"
        detail = f" {w.hard_failure['detail']}" if w.hard_failure else ""
        out.append(("p", f"{label}: {w.case.name}.{detail}"))
        if w.test is not None and not w.hard_failure:
            out.append(("p", w.test.summary()))
    if r.token_rejected:  # the token test's witness in full: its statistic, e-value and direction
        out.append(("p", f"Token test: {r.token_text()}"))
    return [*out, *figures(r), *_case_table(r)]


def figures(r: EngineAuditResult) -> list[Any]:
    """The plots of one engine's audit, each from its JSON: the token test's wealth over tokens
    per statistic, the transform histogram of the case that moved the wealth most, the reported
    probabilities against the law's, and the accepted share at each place of a workload axis."""
    out: list[Any] = []
    if r.token_test is not None:
        names = {str(c.case.index): c.case.name for c in r.cases}
        out += token_figures(r.token_test, names)
    if r.reports.pairs:
        out.append(("scatter", reports_scatter(r.reports.pairs, r.reports.tolerance)))
    ax = r.axis_acceptance
    if ax is not None and ax.pairs:
        labels, shares = [], []
        for p in ax.pairs:
            labels += [f"{p['base']} ({p['case']})", f"{p['where']} ({p['case']})"]
            shares += [round(p["base_share"], 4), round(p["share"], 4)]
        out.append(("bars", Bars("Accepted share of the drafts at each place of the axis", labels, shares)))
    return out


def token_figures(doc: dict[str, Any], names: dict[str, str]) -> list[Any]:
    """The token test's wealth over tokens (``doc["trace"]``) and the transform histogram
    (``pit``) of the case whose wealth is largest, named by ``names`` (case key -> name)."""
    out: list[Any] = []
    tr = doc.get("trace")
    if tr and len(tr["tokens"]) > 1:
        series = {"audit": tr["audit"], **tr["statistics"]}
        out.append(
            (
                "lines",
                Lines(
                    "The token test's wealth over tokens: the audit's and each statistic's part of it",
                    "tokens scored",
                    "log10 wealth",
                    [float(t) for t in tr["tokens"]],
                    series,
                    tr["threshold"],
                    "log10(1/alpha): lossy above",
                ),
            )
        )
    cases = doc.get("cases") or {}
    with_pit = {k: c for k, c in cases.items() if sum(c.get("pit") or ()) > 0}
    if with_pit:
        key = max(with_pit, key=lambda k: with_pit[k]["log_wealth"])
        pit = with_pit[key]["pit"]
        n, bins = sum(pit), len(pit)
        labels = [f"{i / bins:.2f}-{(i + 1) / bins:.2f}" for i in range(bins)]
        title = f"Transforms of {names.get(key, key)}: counts per cell of [0, 1] against uniform"
        out.append(("bars", Bars(title, labels, list(pit), [n / bins] * bins)))
    return out


def reports_scatter(pairs: Sequence[Sequence[float]], tolerance: float) -> Scatter:
    """The probabilities the engine reported for its tokens against the law's, the first ones
    compared."""
    pts = [(float(a), float(b)) for a, b in pairs]
    return Scatter(
        f"Reported probability against the law's, the first {len(pts)} tokens compared",
        "law",
        "reported",
        pts,
        tolerance,
    )


def _case_table(r: EngineAuditResult) -> list[Any]:
    """Each case: its plan and samples; the token test's tokens and the per-token TV they detect
    (sharpening / to the argmax / any, on the transform's cells) where it ran; the cells test's
    p-value, joint TV, unresolved mass and uncovered share where it ran (explained below it)."""
    tokens = any(c.token_detects for c in r.cases)
    cells = any(c.test is not None for c in r.cases)
    head = ["case", "planned", "samples"]
    if tokens:
        head += ["tokens scored", "per-token TV detected: sharpening / argmax / any"]
    if cells:
        head += ["p (cells)", f"joint TV detected at power {r.config.power:g}", "unresolved", "uncovered"]
    head += ["target forwards per call", "speculation", "rejected", "limited"]
    rows = []
    told = any(c.forwards for c in r.cases)  # no case told its forwards: the column is dropped
    for c in r.cases:
        # a cell says why it is empty: the case drew no sample, or its test did not run
        none = "no sample" if not c.n else "not run"
        row = [c.case.name, str(c.planned), str(c.n)]
        if tokens:
            d = c.token_detects
            tv = " / ".join(tv_text(d[k]) for k in ("mean", "greedy", "uniform")) if d else none
            if c.point_mass and c.n:
                tv = "exact: the law is one sequence, each token checked against it"
            row += [f"{c.observed_tokens:,}", tv]
        if cells:
            ran = c.test is not None
            row += [
                "0 (hard failure)" if c.hard_failure else (f"{c.pvalue:.3g}" if ran else none),
                f"{c.detectable_tv:.3f}" if ran else none,
                f"{c.test.unresolved:.3f}" if c.test is not None else none,
                f"{c.test.uncovered:.3f}" if c.test is not None else none,
            ]
        row += [
            _forwards(c.forwards) or ("" if not told else "no sample" if not c.n else "not told"),
            str(c.speculation.status),
            "**rejected**" if c.rejected else "no",
            "short of the plan" if c.budget_limited else "no",
        ]
        rows.append(row)
    out: list[Any] = [("table", (head, rows))]
    if cells:
        out.append(
            (
                "p",
                "unresolved: the share of the joint law's mass the cells test's prefix cells pool beyond "
                "their first tokens (it sees those positions only through the pool); uncovered: the share "
                "of samples with some position whose group of equal prefixes was too small to be tested.",
            )
        )
    return out


def _forwards(hist: Counter[int]) -> str:
    if not hist:
        return ""
    n = sum(hist.values())
    mean = sum(k * v for k, v in hist.items()) / n
    return f"mean {mean:.2f} ({min(hist)}-{max(hist)})"


def write_report(
    path: str, results: Sequence[EngineAuditResult], title: str = "specproof engine audit"
) -> None:
    """Markdown, HTML or JSON by the file's ending, written atomically
    (:func:`.report_model.write_blocks`)."""
    write_blocks(path, report_blocks(results, title))


def traffic_blocks(res: TrafficResult, title: str = "specproof traffic audit") -> list[Any]:
    """The recorded-traffic audit's report: its verdict and what ran short first, the witness
    with its direction in words, each setting's records, tokens against the plan and the per-token
    TV they detect, the token test's e-value, and its plots."""
    cfg, tt = res.config, res.token_test
    out: list[Any] = [("h1", f"{title}: {res.source}"), ("p", f"**Verdict: {res.verdict.value}**")]
    short = [s for s in res.settings if s["tokens"] < s["planned"]]
    if short and res.finding is None:
        out.append(("h2", "Ran short of the plan"))
        out += [("p", f"{s['setting']}: {s['tokens']:,} of {s['planned']:,} tokens") for s in short]
    if res.finding is not None:
        f = res.finding
        way = f" ({f['direction']})" if f.get("direction") and f["direction"] not in f["text"] else ""
        out += [("h2", "Witness"), ("p", f"{f['text']}{way}")]
    e = math.exp(min(700.0, tt.get("log_wealth", 0.0)))
    out.append(("h2", "Power"))
    out.append(
        (
            "p",
            f"The token test (each served token's law against the twin's at its prefix), planned for a "
            f"per-token TV of {cfg.tv:g} at power {cfg.power:g}, alpha {cfg.alpha:g}, seed {cfg.seed}: "
            f"e-value {e:.3g} against 1/alpha = {1 / cfg.alpha:.3g} (anytime-valid), over "
            f"{res.records:,} records and {res.tokens:,} tokens; laws read in {res.seconds:.1f} s.",
        )
    )
    head = ["setting", "records", "tokens scored", "tokens planned"]
    head.append("per-token TV detected: sharpening / argmax / any")
    ends = any("names no end" not in s.get("stopping", "names no end") for s in res.settings)
    if ends:  # some setting has an end of sequence or stop strings: whether its stops were scored
        head.append("stopping event")
    rows = [
        [
            s["setting"],
            f"{s['records']:,}",
            f"{s['tokens']:,}",
            f"{s['planned']:,}",
            " / ".join(tv_text(s["detects"][k]) for k in ("mean", "greedy", "uniform")),
            *([s["stopping"]] if ends else []),
        ]
        for s in res.settings
    ]
    out.append(("table", (head, rows)))
    cases = {s["setting"]: {"pit": s.get("pit"), "log_wealth": s["log_wealth"]} for s in res.settings}
    return out + token_figures({**tt, "cases": cases}, {})
