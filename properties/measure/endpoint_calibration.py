"""The endpoint audit's HTTP path measured: its false-alarm rate on a correct server and its power
on one that verifies greedily, both on the project's own stand-in (:mod:`..endpoint.standin`), so the
figures come from the whole path a served engine takes (requests, retries, the law recipe read
over HTTP, the reports check) and not from the in-process engine audit alone.

``calibrate_http(runs, samples, alpha)`` runs ``runs`` seeded audits (seeds 1000 on) of the correct
stand-in through HTTP: one case (T = 1 after [0 6], M = 4, V = 8), a fixed ``samples`` per audit,
the engine audit's default looks (4), level ``alpha``. A false alarm is a ``lossy`` (or
``acceptance_low``) verdict; any other verdict that is not ``pass`` is counted apart (it would be
a fault of the path, not of the law test). The rate gets its Clopper-Pearson 95% interval. Then
``power_runs`` audits (seeds 2000 on) of the ``greedy_verify`` stand-in at ``power_alpha``: the
share rejected, and the samples each used before stopping. :func:`calibration_markdown` renders the table::

    specproof calibrate --endpoint --runs 300 --json docs/measurements/endpoint-calibration.json \
        --markdown docs/measurements/endpoint-calibration.md

``--completions 4`` measures the completions axis instead (its independence test's false alarms
counted apart, power on ``shared_choices``). ``--load 1 --load 8`` measures the load axis (each
audit the case alone and with 8 in flight, against a twin with speculation off; power on
``batch_rows``) and ``--prefix-cache`` the prefix-cache axis (cold and after a hit; power on
``prefix_poison``). On an axis the checks it adds are counted apart too: the seed checks per level
(exact: a seed with two outputs is a fault, never a false alarm), the background requests' token
test and the acceptance comparison across the axis (alpha/4 each), and the acceptance oracle's test
where the stand-in declares its rule. A false alarm is a ``lossy`` or ``acceptance_low`` verdict:
the two the audit's statistical tests can give a correct server.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.families.wire import token_texts
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.standin import StandIn
from specproof.properties.engine.audit import ENGINE_PACKAGES, EngineAuditConfig, audit_engine
from specproof.properties.engine.completions import COMPLETIONS_ALPHA_SHARE
from specproof.properties.engine.contract import T1
from specproof.properties.measure.rate import Rate, rejection_rate
from specproof.properties.outputs import versions
from specproof.properties.verdicts import CheckStatus, Verdict

PROMPT = (0, 6)
TOKENS = 4
#: the verdicts the audit's statistical tests can give a correct server: its false alarms
ALARMS = (Verdict.LOSSY.value, Verdict.ACCEPTANCE_LOW.value)
#: the stand-in bug each axis is measured against (its power): batch-coupled rows, a poisoned hit
AXIS_BUGS = {"load": "batch_rows", "prefix_cache": "prefix_poison", "completions": "shared_choices"}


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
    """One row of the calibration: how many of ``runs`` seeded audits were called lossy or
    acceptance_low (``what``: false alarms or rejections), with the Clopper-Pearson 95% interval of
    the rate."""
    rate = Rate(sum(verdicts.get(v, 0) for v in ALARMS), runs)
    return {
        "stand_in": stand_in,
        "runs": runs,
        "samples": samples,
        "alpha": alpha,
        **rate.fields(what),
        "verdicts": dict(verdicts),
        "seconds": seconds,
        "requests": requests,
    }


@dataclass(frozen=True)
class Setup:
    """How every audit of a calibration reaches the stand-in: the profile, the stand-in's loop,
    the requests in flight, and the workload axis it runs on (at most one, as in an audit)."""

    profile: str = "llamacpp"
    loop: str = "laws"
    concurrency: int = 8
    completions: int = 1
    loads: tuple[int, ...] = ()
    prefix_cache: bool = False

    def __post_init__(self) -> None:
        # the axes checked as the audit checks them (levels, one axis at a time)
        o = self.options("http://127.0.0.1:1", None)
        object.__setattr__(self, "loads", o.loads)

    def options(self, url: str, twin: str | None) -> EndpointOptions:
        return EndpointOptions(
            (url,),
            self.profile,
            twin=twin,
            concurrency=self.concurrency,
            completions=self.completions,
            loads=self.loads,
            prefix_cache=self.prefix_cache,
        )

    @property
    def axis(self) -> str:
        """The workload axis ("" for none): the key of :data:`AXIS_BUGS`."""
        if self.loads:
            return "load"
        if self.prefix_cache:
            return "prefix_cache"
        return "completions" if self.completions > 1 else ""

    @property
    def twinned(self) -> bool:
        """The load and prefix-cache axes run against a twin with speculation off."""
        return bool(self.loads or self.prefix_cache)

    def case(self) -> str:
        """The audited case, in words."""
        case = f"T=1 after [{' '.join(map(str, PROMPT))}], M = {TOKENS}, V = 8"
        if self.completions > 1:
            case += f", with one and with {self.completions} completions a request"
        if self.loads:
            levels = " and ".join(map(str, self.loads))
            case += f", with {levels} requests in flight (a twin with speculation off)"
        if self.prefix_cache:
            case += ", cold and after a prefix-cache hit (a twin with speculation off)"
        return case


def _audits(
    bug: str | None,
    seeds: range,
    samples: int,
    alpha: float,
    setup: Setup,
    say: Callable[[str], None],
    independence: list[float] | None = None,
    checks: dict[str, Any] | None = None,
) -> tuple[Counter[str], list[float], list[int], float, int]:
    """Seeded audits of one stand-in: verdict counts, p-values, samples used, seconds, requests;
    on the completions axis each independence test's p-value goes into ``independence``; on the
    load or prefix-cache axis (against a twin with speculation off) the added checks' outcomes are
    counted in ``checks`` (:func:`_count_checks`)."""
    verdicts: Counter[str] = Counter()
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        si = stack.enter_context(StandIn(bug, loop=setup.loop))
        twin = stack.enter_context(StandIn(speculative=False, loop=setup.loop)) if setup.twinned else None
        ep = Endpoint(
            setup.options(si.url, None if twin is None else twin.url),
            token_map=token_texts(si.model.vocab) if setup.profile == "openai" else None,
        )

        def after(j: int, r: Any) -> None:
            verdicts[r.verdict.value] += 1
            if independence is not None and r.completions is not None:
                independence.extend(t.pvalue for t in r.completions.tests)
            if checks is not None:
                _count_checks(r, checks)
            if (j + 1) % 10 == 0 or j + 1 == len(seeds):
                say(
                    f"  {bug or 'correct'}: {j + 1}/{len(seeds)} audits, {dict(verdicts)}, "
                    f"{time.perf_counter() - t0:.0f} s"
                )

        try:
            spec = endpoint_spec(ep, prompts=[PROMPT], samplings=[T1], tokens=TOKENS)
            done = rejection_rate(
                lambda seed: audit_engine(
                    spec, EngineAuditConfig(alpha=alpha, samples=samples, seed=seed, test="cells")
                ),
                seeds,
                lambda r: r.verdict.value in ALARMS,
                after,
                lambda r: (min(c.pvalue for c in r.cases), sum(c.n for c in r.cases)),
            )
        finally:
            ep.close()
        requests = si.requests
    pvalues = [p for p, _ in done.results]
    used = [n for _, n in done.results]
    return verdicts, pvalues, used, done.seconds, requests


def _count_checks(r: Any, checks: dict[str, Any]) -> None:
    """The outcomes of one audit's checks beside the law test (:func:`_audits`): seeds drawn twice
    and those with two outputs, per level; the background requests' token test (run, rejected,
    records); the acceptance comparison across the axis and the acceptance oracle (run, low)."""

    def add(key: str, n: int) -> None:
        checks[key] = checks.get(key, 0) + n

    load = r.load
    if load is not None:
        for s in load.seeds:
            add("seeds_drawn_twice", s.seeds)
            add("seeds_with_two_outputs", s.differing)
        bg = load.background
        if bg is not None:
            add("background_tests", 1)
            add("background_records", int(bg.get("records", 0)))
            add("background_rejected", int(bool(load.background_lossy)))
            checks["background_alpha"] = float(bg["alpha"])
    if r.axis_acceptance is not None and r.axis_acceptance.status != CheckStatus.NOT_RUN:
        add("axis_acceptance_tests", 1)
        add("axis_acceptance_low", int(r.axis_acceptance.status == CheckStatus.LOW))
        checks["axis_acceptance_alpha"] = float(r.axis_acceptance.alpha)
    if r.acceptance is not None and r.acceptance.status != CheckStatus.NOT_RUN:
        add("oracle_tests", 1)
        add("oracle_low", int(r.acceptance.status == CheckStatus.LOW))
        checks["oracle_alpha"] = float(r.acceptance.alpha)


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
    loads: tuple[int, ...] = (),
    prefix_cache: bool = False,
) -> dict[str, Any]:
    """False alarms of the endpoint audit over HTTP on the correct stand-in, and its power on
    ``greedy_verify`` (module docstring). ``loop``: the stand-in's loop (``"laws"``, the reference
    loop's draws on memoized laws, about ten times faster than ``"kv"``, the same tokens).
    ``completions`` > 1: every audit on the completions axis (the case with one completion a
    request and with that many, each a case of ``samples``), its independence tests' false alarms
    counted apart, and the power measured on ``shared_choices`` instead. ``loads`` (levels, e.g.
    (1, 8)) or ``prefix_cache``: every audit on that axis, against a twin with speculation off,
    the checks it adds counted apart, the power measured on :data:`AXIS_BUGS`' bug for it."""
    say = progress or (lambda line: None)
    setup = Setup(profile, loop, concurrency, completions, tuple(loads), prefix_cache)
    out: dict[str, Any] = {
        "versions": versions(ENGINE_PACKAGES + ("httpx",)),
        "profile": profile,
        "loop": loop,
        "concurrency": concurrency,
        "case": setup.case(),
        "looks": EngineAuditConfig().looks,
        "exact": _false_alarms(setup, runs, samples, alpha, say),
        "completions": completions,
        "loads": list(setup.loads),
        "prefix_cache": prefix_cache,
    }
    out["power"] = _power(setup, power_runs, samples, power_alpha, say)
    out["markdown"] = calibration_markdown(out)
    return out


def _false_alarms(
    setup: Setup, runs: int, samples: int, alpha: float, say: Callable[[str], None]
) -> dict[str, Any]:
    """The correct stand-in's row: ``runs`` audits (seeds 1000 on), its false alarms, and what the
    axis's own checks found."""
    say(
        f"correct stand-in: {runs} audits of {samples} samples at alpha {alpha:g} "
        f"({setup.profile}, loop {setup.loop})"
    )
    independence: list[float] = []
    checks: dict[str, Any] = {}
    verdicts, pvalues, _, seconds, requests = _audits(
        None, range(1000, 1000 + runs), samples, alpha, setup, say, independence, checks
    )
    row = _rate("correct", "false_alarms", runs, samples, alpha, verdicts, seconds, requests)
    alarms = row["false_alarms"]
    row["other_than_pass_or_alarm"] = runs - alarms - verdicts.get(Verdict.PASS.value, 0)
    row["smallest_pvalue"] = min(pvalues) if pvalues else None
    row["checks"] = checks
    if setup.completions > 1:
        share = alpha * COMPLETIONS_ALPHA_SHARE
        row["independence"] = {
            "alpha": share,
            "tests": len(independence),
            "rejected": sum(p <= share for p in independence),
            "smallest_pvalue": min(independence) if independence else None,
        }
    lo, hi = row["ci95"]
    say(
        f"correct: {alarms}/{runs} false alarms at alpha {alpha:g} (95% CI [{lo:.3f}, {hi:.3f}]), "
        f"{seconds:.0f} s"
    )
    return row


def _power(setup: Setup, runs: int, samples: int, alpha: float, say: Callable[[str], None]) -> dict[str, Any]:
    """The planted bug's row (:data:`AXIS_BUGS`, else ``greedy_verify``): ``runs`` audits (seeds
    2000 on), the share rejected and the samples each used before stopping."""
    bug = AXIS_BUGS.get(setup.axis, "greedy_verify")
    say(f"{bug} stand-in: {runs} audits of {samples} samples at alpha {alpha:g}")
    verdicts, _, used, seconds, requests = _audits(bug, range(2000, 2000 + runs), samples, alpha, setup, say)
    row = _rate(bug, "rejected", runs, samples, alpha, verdicts, seconds, requests)
    row["mean_samples_used"] = float(np.mean(used)) if used else 0.0
    say(
        f"{bug}: rejected in {row['rejected']}/{runs} runs (mean {row['mean_samples_used']:.0f} samples used)"
    )
    return row


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
        "| stand-in | runs | seeds | samples/run | alpha | lossy or acceptance_low | rate [95% CI] | "
        "other verdicts | time |",
        "|---|---:|---|---:|---:|---:|---|---|---:|",
        f"| correct (false alarms) | {e['runs']} | 1000 on | {e['samples']} | {e['alpha']:g} | "
        f"{e['false_alarms']} | {e['rate']:.3f} [{e['ci95'][0]:.3f}, {e['ci95'][1]:.3f}] | "
        f"{_others(e['verdicts'])} | {e['seconds']:.0f} s |",
        f"| {p['stand_in']} (power) | {p['runs']} | 2000 on | {p['samples']} | {p['alpha']:g} | "
        f"{p['rejected']} | {p['rate']:.3f} [{p['ci95'][0]:.3f}, {p['ci95'][1]:.3f}] | "
        f"{_others(p['verdicts'])} | {p['seconds']:.0f} s |",
        "",
        f"{p['stand_in']}: {p['mean_samples_used']:.0f} samples used on average over the run's cases (the "
        "audit stops at the first look that rejects).",
    ]
    lines += _checks_lines(doc)
    ind = e.get("independence")
    if ind:
        lo, hi = Rate(ind["rejected"], ind["tests"]).ci
        lines += [
            "",
            f"The completions axis ({doc['completions']} completions a request): of the correct stand-in's "
            f"{ind['tests']} independence tests (alpha {ind['alpha']:g} each, a quarter of the run's), "
            f"{ind['rejected']} rejected [95% CI {lo:.3f}, {hi:.3f}] (smallest p-value "
            f"{ind['smallest_pvalue']:.3g}); a rejection is counted among the run's lossy verdicts above.",
        ]
    return "\n".join(lines) + "\n"


def _checks_lines(doc: dict[str, Any]) -> list[str]:
    """What the correct stand-in's audits found in the checks an axis adds (:func:`_count_checks`),
    each with its level and its Clopper-Pearson 95% interval; none when no axis was on."""
    c = doc["exact"].get("checks") or {}
    out = []

    def rate(k: int, n: int) -> str:
        return Rate(k, n).text()

    if c.get("seeds_drawn_twice"):
        out.append(
            f"- Seed use per level (exact, no alpha spent): {c['seeds_drawn_twice']} seeds drawn twice, "
            f"{c.get('seeds_with_two_outputs', 0)} with two outputs."
        )
    if c.get("background_tests"):
        out.append(
            f"- The background requests' token test (alpha {c['background_alpha']:g} each): rejected in "
            f"{rate(c.get('background_rejected', 0), c['background_tests'])} audits, "
            f"{c.get('background_records', 0)} background requests scored in all."
        )
    for key, what in (
        ("axis_acceptance", "Acceptance compared across the axis"),
        ("oracle", "The acceptance oracle's test"),
    ):
        if c.get(f"{key}_tests"):
            out.append(
                f"- {what} (alpha {c[f'{key}_alpha']:g} each): low in "
                f"{rate(c.get(f'{key}_low', 0), c[f'{key}_tests'])} audits."
            )
    if out:
        out = [
            "",
            "The correct stand-in's checks beside the law test (each counted in the table when it "
            "decided a verdict):",
            "",
            *out,
        ]
    return out


def _others(verdicts: dict[str, int]) -> str:
    rest = {k: n for k, n in sorted(verdicts.items()) if k not in ALARMS}
    return ", ".join(f"{k} {n}" for k, n in rest.items()) or "none"
