"""Calibration of the audit, measured: false alarms on exact verifiers, power on lossy ones.

``specproof calibrate`` audits single cases many times with different seeds at a loose level
(default alpha 0.01) and a fixed sample size, through the whole pipeline (the harness draws
drafts, the verifier runs, the output is completed, binned and tested):

* on exact verifiers, the rejection rate estimates the false-alarm rate (it should be at most
  alpha) and the chi-square p-values are tested for uniformity (Kolmogorov-Smirnov);
* on lossy verifiers, the rejection rate estimates the power at that sample size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats as st

from . import mutants  # noqa: F401  (registers mutant.*)
from .audit import AuditConfig, audit
from .backends import REGISTRY
from .battery import Case, chain_battery

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
        k, n = self.rejections, self.runs
        lo = 0.0 if k == 0 else float(st.beta.ppf(0.025, k, n - k + 1))
        hi = 1.0 if k == n else float(st.beta.ppf(0.975, k + 1, n - k))
        return lo, hi


def cases() -> list[Case]:
    by = {c.name: c for c in chain_battery(("iid_chain",))}
    return [by["iid/K1/V8"], by["iid/K2/V6/tiny"], by["iid/K3/V5"]]


def _rate(
    backend_name: str, case: Case, runs: int, seed0: int, **cfg: object
) -> tuple[int, list[float], list[float]]:
    backend = REGISTRY[("chain", backend_name)]
    pvals, chi, tvs = [], [], []
    for run in range(runs):
        r = audit(backend, AuditConfig(seed=seed0 + run, cases=[case], budget_seconds=3600, **cfg))  # type: ignore[arg-type]
        c = r.cases[0]
        pvals.append(c.pvalue)
        chi.append(c.p_chi2)
        tvs.append(c.tv.estimate if c.tv else float("nan"))
    alpha = float(cfg["alpha"])  # type: ignore[arg-type]
    return int((np.array(pvals) <= alpha).sum()), chi, tvs


def calibrate(
    runs: int = 100,
    samples: int = 20_000,
    alpha: float = 0.01,
    power_runs: int = 20,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """False alarms of exact verifiers at ``alpha`` with ``samples`` steps per run; power of lossy
    ones at the audit's defaults (per-case level 1e-6 / 22, the planned sample size)."""
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
        "per-case level 1e-6 / 22):",
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
