"""The endpoint audit's HTTP path measured: its false-alarm rate on a correct server and its power
on one that verifies greedily, both on the project's own stand-in (:mod:`.standin`), so the
figures come from the whole path a served engine takes (requests, retries, the law recipe read
over HTTP, the reports check) and not from the in-process engine audit alone.

``calibrate_http(runs, samples, alpha)`` runs ``runs`` seeded audits (seeds 1000 on) of the correct
stand-in through HTTP: one case (T = 1 after [0 6], M = 4, V = 8), a fixed ``samples`` per audit,
the engine audit's default looks (4), level ``alpha``. A false alarm is a ``lossy`` verdict; any
other verdict that is not ``pass`` is counted apart (it would be a fault of the path, not of the
law test). The rate gets its Clopper-Pearson 95% interval. Then ``power_runs`` audits (seeds 2000
on) of the ``greedy_verify`` stand-in at ``power_alpha``: the share rejected, and the samples each
used before stopping. :func:`calibration_markdown` renders the table::

    specproof calibrate --endpoint --runs 300 --json docs/measurements/endpoint-calibration.json \
        --markdown docs/measurements/endpoint-calibration.md

``--completions 4`` measures the completions axis instead (its independence test's false alarms
counted apart, power on ``shared_choices``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from specproof.properties.audit import stats
from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.families.wire import token_texts
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.standin import StandIn
from specproof.properties.engine.audit import ENGINE_PACKAGES, EngineAuditConfig, audit_engine
from specproof.properties.engine.completions import COMPLETIONS_ALPHA_SHARE
from specproof.properties.engine.contract import T1
from specproof.properties.outputs import versions
from specproof.properties.verdicts import Verdict

PROMPT = (0, 6)
TOKENS = 4


def _rate(
    stand_in: str,
    what: str,
    runs: int,
    samples: int,
    alpha: float,
    verdicts: Counter[str],
    seconds: float,
    requests: int,
) -> dict[str, Any]:
    """One row of the calibration: how many of ``runs`` seeded audits were called lossy (``what``:
    false alarms or rejections), with the Clopper-Pearson 95% interval of the rate."""
    n = verdicts.get(Verdict.LOSSY.value, 0)
    lo, hi = stats.clopper_pearson(n, runs) if runs else (0.0, 1.0)
    return {
        "stand_in": stand_in,
        "runs": runs,
        "samples": samples,
        "alpha": alpha,
        what: n,
        "rate": n / runs if runs else 0.0,
        "ci95": [lo, hi],
        "verdicts": dict(verdicts),
        "seconds": seconds,
        "requests": requests,
    }


def _audits(
    bug: str | None,
    seeds: range,
    samples: int,
    alpha: float,
    profile: str,
    loop: str,
    concurrency: int,
    say: Callable[[str], None],
    completions: int = 1,
    independence: list[float] | None = None,
) -> tuple[Counter[str], list[float], list[int], float, int]:
    """Seeded audits of one stand-in: verdict counts, p-values, samples used, seconds, requests;
    with ``completions`` > 1 each independence test's p-value goes into ``independence``."""
    verdicts: Counter[str] = Counter()
    pvalues: list[float] = []
    used: list[int] = []
    t0 = time.perf_counter()
    with StandIn(bug, loop=loop) as si:
        ep = Endpoint(
            EndpointOptions((si.url,), profile, concurrency=concurrency, completions=completions),
            token_map=token_texts(si.model.vocab) if profile == "openai" else None,
        )
        try:
            spec = endpoint_spec(ep, prompts=[PROMPT], samplings=[T1], tokens=TOKENS)
            for j, seed in enumerate(seeds):
                r = audit_engine(
                    spec, EngineAuditConfig(alpha=alpha, samples=samples, seed=seed, test="cells")
                )
                verdicts[r.verdict.value] += 1
                pvalues.append(min(c.pvalue for c in r.cases))
                used.append(sum(c.n for c in r.cases))
                if independence is not None and r.completions is not None:
                    independence.extend(t.pvalue for t in r.completions.tests)
                if (j + 1) % 10 == 0 or j + 1 == len(seeds):
                    say(
                        f"  {bug or 'correct'}: {j + 1}/{len(seeds)} audits, {dict(verdicts)}, "
                        f"{time.perf_counter() - t0:.0f} s"
                    )
        finally:
            ep.close()
        requests = si.requests
    return verdicts, pvalues, used, time.perf_counter() - t0, requests


def calibrate_http(
    runs: int = 300,
    samples: int = 300,
    alpha: float = 0.01,
    progress: Callable[[str], None] | None = print,
    power_runs: int = 20,
    power_alpha: float = 1e-3,
    profile: str = "llamacpp",
    loop: str = "laws",
    concurrency: int = 8,
    completions: int = 1,
) -> dict[str, Any]:
    """False alarms of the endpoint audit over HTTP on the correct stand-in, and its power on
    ``greedy_verify`` (module docstring). ``loop``: the stand-in's loop (``"laws"``, the reference
    loop's draws on memoized laws, about ten times faster than ``"kv"``, the same tokens).
    ``completions`` > 1: every audit on the completions axis (the case with one completion a
    request and with that many, each a case of ``samples``), its independence tests' false alarms
    counted apart, and the power measured on ``shared_choices`` instead."""
    say = progress or (lambda line: None)
    bug = "shared_choices" if completions > 1 else "greedy_verify"
    case = f"T=1 after [{' '.join(map(str, PROMPT))}], M = {TOKENS}, V = 8"
    if completions > 1:
        case += f", with one and with {completions} completions a request"
    out: dict[str, Any] = {
        "versions": versions(ENGINE_PACKAGES + ("httpx",)),
        "profile": profile,
        "loop": loop,
        "concurrency": concurrency,
        "case": case,
        "looks": EngineAuditConfig().looks,
    }
    say(f"correct stand-in: {runs} audits of {samples} samples at alpha {alpha:g} ({profile}, loop {loop})")
    independence: list[float] = []
    verdicts, pvalues, _, seconds, requests = _audits(
        None,
        range(1000, 1000 + runs),
        samples,
        alpha,
        profile,
        loop,
        concurrency,
        say,
        completions,
        independence,
    )
    alarms = verdicts.get(Verdict.LOSSY.value, 0)
    out["exact"] = _rate("correct", "false_alarms", runs, samples, alpha, verdicts, seconds, requests)
    out["exact"]["other_than_pass_or_lossy"] = runs - alarms - verdicts.get(Verdict.PASS.value, 0)
    out["exact"]["smallest_pvalue"] = min(pvalues) if pvalues else None
    out["completions"] = completions
    if completions > 1:
        share = alpha * COMPLETIONS_ALPHA_SHARE
        out["exact"]["independence"] = {
            "alpha": share,
            "tests": len(independence),
            "rejected": sum(p <= share for p in independence),
            "smallest_pvalue": min(independence) if independence else None,
        }
    lo, hi = out["exact"]["ci95"]
    say(
        f"correct: {alarms}/{runs} false alarms at alpha {alpha:g} "
        f"(95% CI [{lo:.3f}, {hi:.3f}]), {seconds:.0f} s"
    )
    say(f"{bug} stand-in: {power_runs} audits of {samples} samples at alpha {power_alpha:g}")
    verdicts, _, used, seconds, requests = _audits(
        bug,
        range(2000, 2000 + power_runs),
        samples,
        power_alpha,
        profile,
        loop,
        concurrency,
        say,
        completions,
    )
    hits = verdicts.get(Verdict.LOSSY.value, 0)
    out["power"] = _rate(bug, "rejected", power_runs, samples, power_alpha, verdicts, seconds, requests)
    out["power"]["mean_samples_used"] = float(np.mean(used)) if used else 0.0
    lo, hi = out["power"]["ci95"]
    say(
        f"{bug}: rejected in {hits}/{power_runs} runs "
        f"(mean {out['power']['mean_samples_used']:.0f} samples used)"
    )
    out["markdown"] = calibration_markdown(out)
    return out


def calibration_markdown(doc: dict[str, Any]) -> str:
    """The measurement of :func:`calibrate_http` as a Markdown page."""
    v, e, p = doc["versions"], doc["exact"], doc["power"]
    lines = [
        "# Endpoint audit over HTTP: calibration and power",
        "",
        f"Measured with `specproof calibrate --endpoint` (specproof "
        f"{v.get('specproof', '?')}, torch {v.get('torch', '?')}, httpx {v.get('httpx', '?')}, Python "
        f"{v['python']}) on the project's stand-in server (properties/endpoint/standin.py, loop "
        f"`{doc['loop']}`), profile `{doc['profile']}`, concurrency {doc['concurrency']}: each run is one "
        f"audit through HTTP of {doc['case']} ({doc['looks']} looks, Bonferroni over them; a fixed "
        "number of samples).",
        "",
        "| stand-in | runs | seeds | samples/run | alpha | lossy | rate [95% CI] | other verdicts | time |",
        "|---|---:|---|---:|---:|---:|---|---|---:|",
        f"| correct (false alarms) | {e['runs']} | 1000 on | {e['samples']} | {e['alpha']:g} | "
        f"{e['false_alarms']} | {e['rate']:.3f} [{e['ci95'][0]:.3f}, {e['ci95'][1]:.3f}] | "
        f"{_others(e['verdicts'], 'lossy')} | {e['seconds']:.0f} s |",
        f"| {p['stand_in']} (power) | {p['runs']} | 2000 on | {p['samples']} | {p['alpha']:g} | "
        f"{p['rejected']} | {p['rate']:.3f} [{p['ci95'][0]:.3f}, {p['ci95'][1]:.3f}] | "
        f"{_others(p['verdicts'], 'lossy')} | {p['seconds']:.0f} s |",
        "",
        f"{p['stand_in']}: {p['mean_samples_used']:.0f} samples used on average over the run's cases (the "
        "audit stops at the first look that rejects).",
    ]
    ind = e.get("independence")
    if ind:
        lo, hi = stats.clopper_pearson(ind["rejected"], ind["tests"]) if ind["tests"] else (0.0, 1.0)
        lines += [
            "",
            f"The completions axis ({doc['completions']} completions a request): of the correct stand-in's "
            f"{ind['tests']} independence tests (alpha {ind['alpha']:g} each, a quarter of the run's), "
            f"{ind['rejected']} rejected [95% CI {lo:.3f}, {hi:.3f}] (smallest p-value "
            f"{ind['smallest_pvalue']:.3g}); a rejection is counted among the run's lossy verdicts above.",
        ]
    return "\n".join(lines) + "\n"


def _others(verdicts: dict[str, int], but: str) -> str:
    rest = {k: n for k, n in sorted(verdicts.items()) if k != but}
    return ", ".join(f"{k} {n}" for k, n in rest.items()) or "none"
