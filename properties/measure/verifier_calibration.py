"""Calibration of the audit, measured: false alarms on exact verifiers, power on lossy ones.

``specproof calibrate`` audits single cases many times with different seeds at a loose level
(default alpha 0.01) and a fixed sample size, through the whole pipeline (the harness draws
drafts, the verifier runs, the output is completed, binned and tested):

* on exact verifiers, the rejection rate estimates the false-alarm rate (it should be at most
  alpha) and the chi-square p-values are tested for uniformity (Kolmogorov-Smirnov);
* on lossy verifiers, the rejection rate estimates the power at that sample size.

``specproof calibrate --deep`` does the same for the per-position tests (:mod:`..audit.conditional`)
on the K = 8 cases: their false alarms alone and combined with the cell tests on exact verifiers,
and their power on ``mutant.deep_residual_from_p``, which is wrong only at draft positions 5 and
beyond, where the cells (prefixes of the first tokens) see nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as st

from specproof.properties.audit.battery import Case, chain_battery
from specproof.properties.audit.stages import AuditConfig, audit
from specproof.properties.conformance import mutants  # noqa: F401  (registers mutant.*)
from specproof.properties.conformance.backends import REGISTRY
from specproof.properties.measure.rate import Rate, rejection_rate

EXACT = ("torch.token", "torch.block", "torch.token_gumbel")
#: (lossy backend, a case on which it deviates)
LOSSY = (
    ("mutant.stale_draft_probs", "iid/K2/V6/tiny"),
    ("mutant.block_tokenwise_residual", "iid/K2/V8"),
    ("mutant.one_sided_temperature", "iid/K3/V5"),
    ("mutant.count_after_reject", "iid/K2/V8"),
)


@dataclass
class Row:
    backend: str
    case: str
    runs: int
    samples: int
    alpha: float
    rejections: int
    ks_pvalue: float | None
    tv: float | None = None  # mean TV estimate on the cells (lossy rows)

    @property
    def rate(self) -> float:
        return self.rejections / self.runs

    def interval(self) -> tuple[float, float]:
        """Clopper-Pearson 95% interval of the rejection rate."""
        return Rate(self.rejections, self.runs).ci


def cases() -> list[Case]:
    by = {c.name: c for c in chain_battery(("iid_chain",))}
    return [by["iid/K1/V8"], by["iid/K2/V6/tiny"], by["iid/K3/V5"]]


def _rate(
    backend_name: str, case: Case, runs: int, seed0: int, alpha: float, samples: int | None = None
) -> tuple[int, list[float], list[float]]:
    """``runs`` seeded audits of one case (:func:`.rate.rejection_rate`, seeds ``seed0`` on): how
    many rejected at ``alpha``, each run's chi-square p-value and TV estimate."""
    backend = REGISTRY[("chain", backend_name)]

    def once(seed: int) -> Any:
        # the statistics only: no id-range probes (seconds per run, and not what is measured)
        config = AuditConfig(
            seed=seed, cases=[case], budget_seconds=3600, alpha=alpha, samples=samples, probes=False
        )
        return audit(backend, config).cases[0]

    done = rejection_rate(
        once,
        range(seed0, seed0 + runs),
        lambda c: c.pvalue <= alpha,
        keep=lambda c: (c.p_chi2, c.tv.estimate if c.tv else float("nan")),
    )
    return done.rate.hits, [p for p, _ in done.results], [tv for _, tv in done.results]


def calibrate(
    runs: int = 100,
    samples: int = 20_000,
    alpha: float = 0.01,
    power_runs: int = 20,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """False alarms of exact verifiers at ``alpha`` with ``samples`` steps per run; power of lossy
    ones at the audit's defaults (per-case level 1e-6 / cases, the planned sample size)."""
    rows = []
    for b, name in enumerate(EXACT):
        for case in cases():
            rej, chi, _ = _rate(name, case, runs, 1000 * b, alpha=alpha, samples=samples)
            ks = float(st.kstest(chi, "uniform").pvalue)
            rows.append(Row(name, case.name, runs, samples, alpha, rej, ks))
            if progress:
                progress(f"{name} {case.name}: {rej}/{runs} false alarms")
    level = 1e-6 / len(chain_battery())
    by_name = {c.name: c for c in chain_battery(("iid_chain",))}
    for b, (name, case_name) in enumerate(LOSSY):
        for case in [by_name[case_name]]:
            rej, _, tvs = _rate(name, case, power_runs, 50_000 + 1000 * b, alpha=level)
            row = Row(name, case.name, power_runs, 0, level, rej, None, float(np.nanmean(tvs)))
            rows.append(row)
            if progress:
                progress(f"{name} {case.name}: {rej}/{power_runs} rejected")
    return rows


#: exact verifiers and long-chain cases of the deep-position calibration
DEEP_EXACT = ("torch.token", "torch.block")
DEEP_CASES = ("iid/K8/V8/deep", "onehot/K8/V8/deep", "iid/K8/V8")
DEEP_MUTANT = "mutant.deep_residual_from_p"


@dataclass
class DeepRow:
    backend: str
    case: str
    runs: int
    samples: int
    alpha: float
    positions: int  # rejections by the per-position family alone
    cells: int  # rejections by the cell tests alone (chi-square and exact, Bonferroni)
    combined: int  # rejections of the case's p-value
    ks_pvalue: float | None  # uniformity of every tested position's own p-value (exact rows)
    uncovered: float  # mean share of steps with an untested position

    def interval(self, k: int) -> tuple[float, float]:
        return Rate(k, self.runs).ci


def _deep(
    backend_name: str,
    case: Case,
    runs: int,
    seed0: int,
    level: float,
    alpha: float,
    samples: int | None = None,
) -> DeepRow:
    backend = REGISTRY[("chain", backend_name)]

    def once(seed: int) -> Any:
        config = AuditConfig(
            seed=seed, cases=[case], budget_seconds=3600, probes=False, alpha=alpha, samples=samples
        )
        return audit(backend, config).cases[0]

    def kept(c: Any) -> tuple[float, float, float, float, list[float]]:
        # each tested position's own p-value: uniform under the null
        own = [t.pvalue for t in c.positions.positions if t.df > 0] if c.positions is not None else []
        return c.p_positions, min(1.0, 2 * min(c.p_chi2, c.p_cells)), c.pvalue, c.uncovered, own

    done = rejection_rate(once, range(seed0, seed0 + runs), lambda c: c.pvalue <= level, keep=kept)
    pos, cells, comb, unc = ([r[i] for r in done.results] for i in range(4))
    each = [p for r in done.results for p in r[4]]
    count = lambda ps: int((np.array(ps) <= level).sum())  # noqa: E731
    # the combined p-value is Bonferroni over the positions (conservative, not uniform); the
    # positions' own p-values are independent uniforms under the null (audit_statistics.md, 9)
    ks = float(st.kstest(each, "uniform").pvalue) if each else float("nan")
    n = samples or 0
    return DeepRow(
        backend_name,
        case.name,
        runs,
        n,
        level,
        count(pos),
        count(cells),
        done.rate.hits,
        ks,
        float(np.mean(unc)),
    )


def calibrate_deep(
    runs: int = 300,
    samples: int = 20_000,
    alpha: float = 0.01,
    power_runs: int = 20,
    progress: Callable[[str], None] | None = None,
) -> list[DeepRow]:
    """False alarms of the per-position tests on exact verifiers (``runs`` seeds per case,
    ``samples`` steps, level ``alpha``); power on the deep-only mutant at the audit's defaults
    (planned steps for TV 0.01, power 0.99, per-case level 1e-6 / 24)."""
    by_name = {c.name: c for c in chain_battery()}
    rows = []
    for b, name in enumerate(DEEP_EXACT):
        for case_name in DEEP_CASES:
            row = _deep(name, by_name[case_name], runs, 7000 + 1000 * b, alpha, alpha=alpha, samples=samples)
            rows.append(row)
            if progress:
                progress(f"{name} {case_name}: {row.positions}/{runs} per-position false alarms")
    level = 1e-6 / len(chain_battery())
    for case_name in DEEP_CASES[:2]:
        row = _deep(DEEP_MUTANT, by_name[case_name], power_runs, 90_000, level, alpha=level)
        row.ks_pvalue = None
        rows.append(row)
        if progress:
            progress(f"{DEEP_MUTANT} {case_name}: {row.combined}/{power_runs} rejected")
    return rows


def markdown_deep(rows: list[DeepRow]) -> str:
    exact = [r for r in rows if r.ks_pvalue is not None]
    lossy = [r for r in rows if r.ks_pvalue is None]
    lines = [
        "Per-position tests, false alarms of exact verifiers (each run: one K = 8 case, fixed steps, "
        "level alpha):",
        "",
        "| backend | case | runs | steps/run | alpha | per-position false alarms [95% CI] | cells | "
        "combined | KS p of the positions' own p-values | uncovered |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in exact:
        lo, hi = r.interval(r.positions)
        lines.append(
            f"| {r.backend} | {r.case} | {r.runs} | {r.samples} | {r.alpha:g} | {r.positions} "
            f"({r.positions / r.runs:.3f} [{lo:.3f}, {hi:.3f}]) | {r.cells} | {r.combined} | "
            f"{r.ks_pvalue:.3f} | {r.uncovered:.3f} |"
        )
    lines += [
        "",
        f"Power on `{DEEP_MUTANT}` (the residual drawn from p at draft positions >= 5 only), at the "
        "audit's defaults (planned steps for TV 0.01, power 0.99, per-case level 1e-6 / 24):",
        "",
        "| backend | case | runs | level | rejected by the per-position tests | by the cells | "
        "combined [95% CI] | uncovered |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in lossy:
        lo, hi = r.interval(r.combined)
        lines.append(
            f"| {r.backend} | {r.case} | {r.runs} | {r.alpha:.2g} | {r.positions} | {r.cells} | "
            f"{r.combined} ({r.combined / r.runs:.2f} [{lo:.2f}, {hi:.2f}]) | {r.uncovered:.3f} |"
        )
    return "\n".join(lines)


def markdown(rows: list[Row]) -> str:
    exact = [r for r in rows if r.ks_pvalue is not None]
    lossy = [r for r in rows if r.ks_pvalue is None]
    lines = [
        "False alarms of exact verifiers (each run: one case, fixed steps, level alpha):",
        "",
        "| backend | case | runs | steps/run | alpha | false alarms | rate [95% CI] "
        "| KS p of chi-square p-values |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in exact:
        lo, hi = r.interval()
        lines.append(
            f"| {r.backend} | {r.case} | {r.runs} | {r.samples} | {r.alpha:g} | {r.rejections} | "
            f"{r.rate:.3f} [{lo:.3f}, {hi:.3f}] | {r.ks_pvalue:.3f} |"
        )
    lines += [
        "",
        "Power on lossy verifiers at the audit's defaults (planned steps for TV 0.01, power 0.99, "
        f"per-case level 1e-6 / {len(chain_battery())}):",
        "",
        "| backend | case | runs | level | rejected | rate [95% CI] | mean TV on cells |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in lossy:
        lo, hi = r.interval()
        lines.append(
            f"| {r.backend} | {r.case} | {r.runs} | {r.alpha:.2g} | {r.rejections} | "
            f"{r.rate:.2f} [{lo:.2f}, {hi:.2f}] | {r.tv:.4f} |"
        )
    return "\n".join(lines)
