"""The token test measured (``specproof calibrate --tokens``; docs/measurements/token-calibration.*,
quoted by docs/token-audit.md and proofs_notes/token_audit.md):

* **power**: each directional statistic fed its reference deviation (:mod:`..tokens.power`) in a
  whole family, as a case of an audit has it: how often it crosses by the tokens the plan states
  for it, how many tokens it took (median), against the information limit;
* **false alarms**: whole engine audits of exact engines (the token test alone, at its plan for a
  stated per-token TV), how many were called lossy, with the binomial interval;
* **stopping**: the anytime-valid guarantee on real engines' samples: the wealth looked at after
  every sample, how often it ever crossed, how often it stood above the threshold at a random
  stopping time, and for contrast a fixed-sample test of the transforms' mean looked at as often
  (which does not keep its level);
* **side by side**: samples and seconds to flag a per-token deviation at token 1 and from token 40
  on, with the cells test of the joint law and with the token test, in one run.

Everything is seeded; a row that did not run says why.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from scipy.stats import norm

from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import T1, EngineSpec
from specproof.properties.engine.narrow import ending_spec, narrow_spec, stopping_spec
from specproof.properties.engine.registry import resolve_engine, with_options
from specproof.properties.engine.results import EngineCase
from specproof.properties.engine.runner import CaseRunner, sample_seed
from specproof.properties.engine.token_stage import TokenStage, block_indices
from specproof.properties.measure.rate import Rate, rejection_rate
from specproof.properties.tokens import power
from specproof.properties.tokens.case import Sample, TokenTest
from specproof.properties.tokens.family import Family
from specproof.properties.tokens.transform import Observations
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError

Say = Callable[[str], None]


# --------------------------------------------------------------------------- a fast exact engine


def _law(seed: int, key: Sequence[int], vocab: int, scale: float) -> np.ndarray:
    z = np.random.default_rng([seed, *key]).standard_normal(vocab) * scale
    p = np.exp(z - z.max())
    return p / p.sum()


class ToySpeculative:
    """A fast exact speculative engine for the calibration: the target's law a seeded function of
    the last two tokens, the draft's the target's logits plus seeded noise keyed by the last token
    only (they share most of the mass), token-level speculative sampling on a chain of ``k``
    drafts with a bonus token (proofs_notes/token.md): lossless."""

    capabilities = frozenset({"teacher_forcing", "steps", "sequential", "draft_law", "counters"})
    sequential_verification = True

    def __init__(self, vocab: int, k: int = 4, seed: int = 3, scale: float = 2.0) -> None:
        self.vocab, self.k, self.seed, self.scale = vocab, k, seed, scale
        self.last_steps: list[int] = []
        self.last_counters: dict[str, int] = {}

    def p(self, context: Sequence[int]) -> np.ndarray:
        """The target's law after ``context``."""
        return _law(self.seed, list(context[-2:]), self.vocab, self.scale)

    def q(self, context: Sequence[int]) -> np.ndarray:
        """The draft's law after ``context``."""
        z = np.log(self.p(context)) + 0.7 * np.random.default_rng(
            [self.seed + 1, *context[-1:]]
        ).standard_normal(self.vocab)
        q = np.exp(z - z.max())
        return q / q.sum()

    def target_law(self, context: Sequence[int]) -> Sequence[float]:
        return list(self.p(context))

    def draft_law(self, context: Sequence[int]) -> Sequence[float]:
        return list(self.q(context))

    def target_laws_along(self, prompt_ids: list[int], tokens: list[int]) -> np.ndarray:
        seq = list(prompt_ids) + list(tokens)
        return np.array([self.p(seq[: len(prompt_ids) + d]) for d in range(len(tokens))])

    def draft_laws_along(self, prompt_ids: list[int], tokens: list[int]) -> np.ndarray:
        seq = list(prompt_ids) + list(tokens)
        return np.array([self.q(seq[: len(prompt_ids) + d]) for d in range(len(tokens))])

    @staticmethod
    def _draw(rng: np.random.Generator, p: np.ndarray) -> int:
        c = np.cumsum(p)
        return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        rng = np.random.default_rng(seed)
        seq, n0 = list(prompt_ids), len(prompt_ids)
        self.last_steps, drafted, accepted = [], 0, 0
        while len(seq) - n0 < max_new_tokens:
            ctx, drafts, qs = list(seq), [], []
            for _ in range(self.k):
                q = self.q(ctx)
                x = self._draw(rng, q)
                drafts.append(x)
                qs.append(q)
                ctx.append(x)
            emitted: list[int] = []
            for x, q in zip(drafts, qs):
                p = self.p(seq + emitted)
                if rng.random() < min(1.0, p[x] / q[x]):
                    emitted.append(x)
                    continue
                r = np.maximum(p - q, 0.0)
                emitted.append(self._draw(rng, r / r.sum()))
                break
            else:
                emitted.append(self._draw(rng, self.p(seq + emitted)))
            drafted += self.k
            accepted += len(emitted) - 1
            seq += emitted
            self.last_steps.append(len(emitted))
        self.last_counters = {"drafted": drafted, "accepted": accepted}
        return seq[n0:][:max_new_tokens]


def toy_spec(vocab: int, tokens: int) -> EngineSpec:
    return EngineSpec(
        f"calibration.speculative[V={vocab}]",
        "user",
        "token-level speculative sampling on seeded laws (exact)",
        lambda s: ToySpeculative(vocab),
        vocab,
        ((1, 2),),
        (T1,),
        expect="pass",
        tokens=tokens,
    )


#: the exact engines of the false-alarm and stopping rows when none are named: (engine, M); the
#: calibration's own engines are named ``calibration.speculative[V=...]`` (one case),
#: ``calibration.narrow[V=...]`` (the narrow engine: two prompts at T = 1 and 0.7, four cases whose
#: tokens the pooled family reads together), ``calibration.ending[V=...]`` (the narrow engine
#: with an end of sequence: samples that end early, the eos statistic fed) and
#: ``calibration.stopping[V=...]`` (the narrow engine under a stop string spanning two tokens: the
#: eos statistic fed the output's end)
EXACT = (
    ("calibration.speculative[V=4096]", 256),
    ("calibration.speculative[V=256]", 1024),
    ("calibration.speculative[V=64]", 64),
    ("calibration.narrow[V=512]", 64),
)
#: the engines of the stopping rows when none are named (fed one sample at a time: small ones)
STOPPING = ("calibration.speculative[V=64]@64", "calibration.narrow[V=64]@32")
#: the prompts and temperatures of a ``calibration.narrow`` engine: four cases
NARROW_PROMPTS, NARROW_TEMPERATURES = ((3, 1, 4), (2, 7)), (1.0, 0.7)


# --------------------------------------------------------------------------- power


def reference_tokens(rng: np.random.Generator, n: int, tv: float, statistic: str) -> Observations:
    """``n`` tokens' observations under ``statistic``'s reference deviation of size ``tv``
    (:func:`..tokens.power.reference`; the likeliest cell has probability 1/2, the surprisal
    carries nothing)."""
    pf = np.full(n, 0.5)
    if statistic in ("mean", "greedy"):  # mass tv from the upper half of the transform to the lower
        low = rng.random(n) < 0.5 + tv
        u = np.where(low, rng.random(n) * 0.5, 0.5 + rng.random(n) * 0.5)
    elif statistic == "uniform":  # density 1 + 2 tv on the first 4 of 8 cells, 1 - 2 tv on the rest
        cells = power.reference("uniform", tv).cells
        assert cells is not None
        u = (rng.choice(len(cells), n, p=cells) + rng.random(n)) / len(cells)
    elif statistic == "serial":  # a Gaussian copula, consecutive transforms correlated by tv
        z = rng.standard_normal(n)
        for t in range(1, n):
            z[t] = tv * z[t - 1] + math.sqrt(1 - tv * tv) * z[t]
        u = norm.cdf(z)
    else:
        raise UsageError(f"statistic: no reference deviation for {statistic!r}")
    return Observations(u, pf, np.zeros(n), np.zeros(n))


def _crossings(hits: int, runs: int, first: list[int], t0: float) -> dict[str, Any]:
    """A power row's tail: runs, how many crossed with the binomial interval, the median tokens
    at the first crossing, the seconds since ``t0``."""
    lo, hi = Rate(hits, runs).ci
    return {
        "runs": runs,
        "crossed": hits,
        "ci95": [lo, hi],
        "median_tokens_to_cross": float(np.median(first)) if first else None,
        "seconds": time.perf_counter() - t0,
    }


def power_rows(
    tvs: Sequence[float] = (0.03, 0.01), runs: int = 60, alpha: float = 1e-4, seed: int = 12, say: Say = print
) -> list[dict[str, Any]]:
    """For each statistic and size: ``runs`` families (one case, M = 64) fed the reference deviation
    up to the tokens the plan states for that statistic at its share; how many crossed
    ``1/alpha``, the median tokens at the first crossing (looked at every 1/64 of the plan)."""
    rows = []
    shares = power.shares(False, False)
    for tv in tvs:
        for s in ("mean", "greedy", "uniform", "serial"):
            size = tv if s != "serial" else 3 * tv  # serial: a correlation, 3 times the TV asked
            need = power.tokens_needed(s, size, power.log_threshold(alpha, 1, s, shares), 0.99)
            limit = power.information_limit(s, size, alpha) if s != "serial" else None
            rng = np.random.default_rng([seed, int(size * 1e6), len(s)])
            step = max(64, need // 64)
            hits, first = 0, []
            t0 = time.perf_counter()
            for _ in range(runs):
                f, seen, crossed_at = Family(64), 0, None
                while seen < need:
                    k = min(step, need - seen)
                    f.update(reference_tokens(rng, k, size, s), np.arange(seen, seen + k) % 64 + 1)
                    seen += k
                    if crossed_at is None and f.log_wealth >= math.log(1 / alpha):
                        crossed_at = seen
                hits += crossed_at is not None
                if crossed_at is not None:
                    first.append(crossed_at)
            row = {
                "statistic": s,
                "deviation": size,
                "alpha": alpha,
                "planned_tokens": need,
                "information_limit": limit,
                **_crossings(hits, runs, first, t0),
            }
            rows.append(row)
            ratio = f", {need / limit:.2f} x the limit" if limit else ""
            say(f"power {s} at {size:g}: {hits}/{runs} crossed by {need:,} tokens{ratio}")
    return rows


def pooled_power_rows(
    tvs: Sequence[float] = (0.03, 0.01),
    cases: int = 4,
    runs: int = 60,
    alpha: float = 1e-4,
    seed: int = 14,
    say: Say = print,
) -> list[dict[str, Any]]:
    """For ``mean`` and ``greedy`` and each size: ``runs`` token tests of ``cases`` cases, every
    case fed the reference deviation (a deviation the cases share) up to the pooled plan's tokens
    per case, the cases in turn; how many crossed, the median tokens (all cases) at the first
    crossing, beside the tokens the plan asked before the pooled family (each case its own plan
    at ``log(cases)`` nats more) and the information limit."""
    rows = []
    shares = power.shares(False, False)
    for tv in tvs:
        for s in ("mean", "greedy"):
            total = power.tokens_needed(
                s,
                tv,
                power.log_threshold(alpha, cases, s, shares, power.family_share(cases, True, "pooled")),
                0.99,
            )
            each = math.ceil(total / cases)
            before = cases * power.tokens_needed(s, tv, math.log(cases / alpha) - math.log(shares[s]), 0.99)
            limit = power.information_limit(s, tv, alpha)
            rng = np.random.default_rng([seed, int(tv * 1e6), len(s)])
            step = max(64, each // 64)
            hits, first = 0, []
            t0 = time.perf_counter()
            for _ in range(runs):
                test = TokenTest(alpha, seed=0)
                tcases = [test.add_case(i, 64) for i in range(cases)]
                test.pool()
                seen, crossed_at = 0, None
                while seen < each:
                    k = min(step, each - seen)
                    for c in tcases:
                        test.update(c, [reference_tokens(rng, k, tv, s)])
                    seen += k
                    if crossed_at is None and test.rejected:
                        crossed_at = seen * cases
                hits += crossed_at is not None
                if crossed_at is not None:
                    first.append(crossed_at)
            rows.append(
                {
                    "statistic": s,
                    "deviation": tv,
                    "cases": cases,
                    "alpha": alpha,
                    "planned_tokens": each * cases,
                    "planned_before_pooling": before,
                    "information_limit": limit,
                    **_crossings(hits, runs, first, t0),
                }
            )
            say(
                f"pooled power {s} at {tv:g}, {cases} cases: {hits}/{runs} crossed by "
                f"{each * cases:,} tokens "
                f"({each * cases / limit:.2f} x the limit; {before:,} before pooling)"
            )
    return rows


# --------------------------------------------------------------------------- false alarms


def _exact_specs(exact: Sequence[str] | None) -> list[EngineSpec]:
    """The exact engines named (``engine`` or ``engine@M``), else :data:`EXACT`; one setting and
    one prompt each (the first)."""
    out = []
    for ref in exact or [f"{n}@{m}" for n, m in EXACT]:
        name, _, m = ref.rpartition("@") if "@" in ref else (ref, "", "")
        several = False
        if name.startswith("calibration.speculative[V=") and name.endswith("]"):
            spec = toy_spec(_vocab_of(ref, name, "calibration.speculative[V="), 64)
        elif name.startswith("calibration.ending[V=") and name.endswith("]"):
            spec = ending_spec(_vocab_of(ref, name, "calibration.ending[V="), 64)
        elif name.startswith("calibration.stopping[V=") and name.endswith("]"):
            spec = stopping_spec(_vocab_of(ref, name, "calibration.stopping[V="), 64)
        elif name.startswith("calibration.narrow[V=") and name.endswith("]"):
            spec = narrow_spec(
                _vocab_of(ref, name, "calibration.narrow[V="),
                64,
                True,
                32,
                NARROW_PROMPTS,
                NARROW_TEMPERATURES,
            )
            spec = replace(spec, name=name)
            several = True
        else:
            spec = resolve_engine(name)
        if spec.expect not in (None, "pass"):
            raise UsageError(f"--exact: {name} is expected {spec.expect}, not exact")
        kw: dict[str, Any] = (
            {} if several else {"prompts": [spec.prompts[0]], "samplings": [spec.samplings[0]]}
        )
        if m:
            try:
                kw["tokens"] = int(m)
            except ValueError:
                raise UsageError(f"--exact: {ref!r}: the horizon after @ must be an integer") from None
        out.append(with_options(spec, **kw))
    return out


def _vocab_of(ref: str, name: str, head: str) -> int:
    try:
        return int(name[len(head) : -1])
    except ValueError:
        raise UsageError(f"--exact: {ref!r}: V must be an integer") from None


def false_alarm_rows(
    runs: int, alpha: float, tv: float, exact: Sequence[str] | None = None, say: Say = print
) -> list[dict[str, Any]]:
    """``runs`` engine audits in all (shared evenly among the exact engines), the token test alone
    at its plan for per-token TV ``tv``, seeds 1000 on: how many were called lossy."""
    specs = _exact_specs(exact)
    rows = []
    for j, spec in enumerate(specs):
        n = runs // len(specs) + (j < runs % len(specs))

        def once(seed: int, spec: EngineSpec = spec) -> Any:
            cfg = EngineAuditConfig(alpha=alpha, tv=tv, test="tokens", seed=seed, budget_seconds=1e9)
            return audit_engine(spec, cfg)

        done = rejection_rate(
            once,
            range(1000, 1000 + n),
            lambda r: r.verdict == Verdict.LOSSY,
            keep=lambda r: (r.verdict.value, sum(c.observed_tokens for c in r.cases)),
        )
        verdicts: dict[str, int] = {}
        for v, _ in done.results:
            verdicts[v] = verdicts.get(v, 0) + 1
        alarms, tokens = done.rate.hits, [t for _, t in done.results]
        lo, hi = done.rate.ci
        rows.append(
            {
                "engine": spec.name,
                "vocab": spec.vocab,
                "tokens": spec.tokens,
                "cases": len(spec.prompts) * len(spec.samplings),
                "runs": n,
                "tv": tv,
                "alpha": alpha,
                "tokens_per_audit": float(np.mean(tokens)) if tokens else 0.0,
                "false_alarms": alarms,
                "ci95": [lo, hi],
                "verdicts": verdicts,
                "seconds": done.seconds,
            }
        )
        say(
            f"false alarms {spec.name} (M = {spec.tokens}, V = {spec.vocab}): {alarms}/{n} at alpha {alpha:g}"
        )
    return rows


# --------------------------------------------------------------------------- stopping


def stopping_rows(
    streams: int,
    samples: int,
    alpha: float,
    exact: Sequence[str] | None = None,
    seed: int = 21,
    say: Say = print,
) -> list[dict[str, Any]]:
    """On each exact engine, ``streams`` token tests fed one sample at a time (``samples`` each,
    the engine's cases in turn: with several, the pooled family reads them all), the audit's
    wealth read after every sample: how often it ever crossed ``1/alpha``; how often
    it stood above it at a stopping time drawn uniformly from the looks; how often a z-test of
    the transforms' mean at level ``alpha``, looked at as often, rejected (the contrast: a
    fixed-sample test watched continuously does not keep its level)."""
    rows = []
    zcrit = float(norm.ppf(1 - alpha / 2))
    for spec in _exact_specs(exact):
        cases = [(p, st) for st in spec.samplings for p in spec.prompts]  # as the audit orders them
        runners = [
            CaseRunner(spec.build(st), EngineCase(i, tuple(p), st, spec.tokens), spec.vocab)
            for i, (p, st) in enumerate(cases)
        ]
        ever = at_random = naive = 0
        rng = np.random.default_rng([seed, spec.tokens])
        t0 = time.perf_counter()
        for st in range(streams):
            stage = TokenStage.start(runners, alpha, seed + st)
            path, total, count = [], 0.0, 0
            naive_hit = False
            for k in range(samples):
                runner = runners[k % len(runners)]  # the cases in turn, one sample each
                index = k // len(runners)
                parts = (seed, st, k) if len(runners) == 1 else (seed, st, runner.case.index, index)
                g = runner.draw([sample_seed(*parts)])[0]
                m = runner.horizon(g.tokens)
                smp = Sample(
                    index,
                    tuple(g.tokens[:m]),
                    runner.laws_along(g.tokens),
                    block_indices(g.steps, m) if stage.blocks[runner.case.index] else None,
                    runner.draft_laws_along(g.tokens),
                )
                runner.end_chunk()
                tcase = stage.cases[runner.case.index]
                obs = stage.test.observe(tcase, smp)
                stage.test.update(tcase, [obs])
                path.append(stage.test.log_wealth)
                total += float((obs.u - 0.5).sum())
                count += len(obs)
                naive_hit |= abs(total) / math.sqrt(count / 12) > zcrit
            threshold = math.log(1 / alpha)
            ever += max(path) >= threshold
            at_random += path[int(rng.integers(0, len(path)))] >= threshold
            naive += naive_hit
        row = {
            "engine": spec.name,
            "vocab": spec.vocab,
            "tokens": spec.tokens,
            "cases": len(runners),
            "streams": streams,
            "looks": samples,
            "alpha": alpha,
            "ever_crossed": ever,
            "ever_ci95": list(Rate(ever, streams).ci),
            "crossed_at_random_stop": at_random,
            "naive_rejected": naive,
            "naive_ci95": list(Rate(naive, streams).ci),
            "seconds": time.perf_counter() - t0,
        }
        rows.append(row)
        say(
            f"stopping {spec.name}: ever crossed {ever}/{streams}, at a random stop {at_random}/{streams}, "
            f"naive z-test looked at {samples} times {naive}/{streams}"
        )
    return rows


# --------------------------------------------------------------------------- side by side


class TiltedEngine:
    """An engine that draws each token from the target's law, except at the positions of
    ``where``, where it mixes in the argmax so that the emitted law is at per-token TV ``tv`` from
    the target's: ``(1 - eps) p + eps delta_argmax``, ``eps = tv / (1 - max p)`` (verification
    silently greedy some of the time). The target: a seeded law over ``vocab`` ids for each last
    two tokens."""

    capabilities = frozenset({"teacher_forcing"})

    def __init__(self, vocab: int, tv: float, where: tuple[int, int], seed: int = 5) -> None:
        self.vocab, self.tv, self.where, self.seed = vocab, tv, where, seed
        self._laws: dict[tuple[int, ...], np.ndarray] = {}

    def p(self, context: Sequence[int]) -> np.ndarray:
        """The target's law after ``context``."""
        key = tuple(context[-2:])
        if key not in self._laws:
            z = np.random.default_rng([self.seed, *key]).standard_normal(self.vocab) * 1.2
            p = np.exp(z - z.max())
            p /= p.sum()
            if 1 - p.max() < 2 * self.tv:
                raise UsageError("tv: too large for the target's laws")
            self._laws[key] = p
        return self._laws[key]

    def target_law(self, context: Sequence[int]) -> Sequence[float]:
        return list(self.p(context))

    def target_laws_along(self, prompt_ids: list[int], tokens: list[int]) -> np.ndarray:
        seq = list(prompt_ids) + list(tokens)
        return np.array([self.p(seq[: len(prompt_ids) + d]) for d in range(len(tokens))])

    def emitted_law(self, context: Sequence[int], position: int) -> np.ndarray:
        """The law position ``position`` (1-based) is drawn from."""
        p = self.p(context)
        lo, hi = self.where
        if not lo <= position <= hi:
            return p
        eps = self.tv / (1 - p.max())
        out = (1 - eps) * p
        out[int(np.argmax(p))] += eps
        return out

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        rng = np.random.default_rng(seed)
        seq = list(prompt_ids)
        for t in range(max_new_tokens):
            c = np.cumsum(self.emitted_law(seq, t + 1))
            seq.append(int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), self.vocab - 1)))
        return seq[len(prompt_ids) :]


def tilted_spec(vocab: int, tv: float, where: tuple[int, int], tokens: int) -> EngineSpec:
    lo, hi = where
    label = f"token {lo}" if lo == hi else f"tokens {lo} on"
    return EngineSpec(
        f"tilted[tv={tv:g}, {label}]",
        "user",
        f"per-token TV {tv:g} toward the argmax at {label}",
        lambda s: TiltedEngine(vocab, tv, where),
        vocab,
        ((1, 2),),
        (T1,),
        expect="lossy",
        tokens=tokens,
    )


def side_by_side_rows(
    tvs: Sequence[float] = (0.03, 0.01, 0.003), vocab: int = 64, say: Say = print
) -> list[dict[str, Any]]:
    """The cells test and the token test on the same tilted engines (per-token TV ``tv`` toward
    the argmax at token 1, or at tokens 40 to 64), each audit planned for that TV (the cells test:
    its joint TV at M = 1, the token test: per token), alpha 1e-4, seed 0, stopped at the first
    rejection or at the end of its plan (no time budget: the plan alone decides)."""
    rows = []
    for tv in tvs:
        for where, m in (((1, 1), 1), ((40, 64), 64)):
            for test in ("cells", "tokens"):
                spec = tilted_spec(vocab, tv, where, m)
                row: dict[str, Any] = {"tv": tv, "bug": spec.doc, "test": test, "tokens": m}
                if test == "cells" and where[0] > 12:
                    row.update(
                        verdict="not run",
                        why="the cells test takes M <= 12: the law of the first 12 tokens is exact here, "
                        "so it cannot see a deviation from token 40 on",
                    )
                    rows.append(row)
                    say(f"side by side {spec.name} {test}: not run ({row['why']})")
                    continue
                cfg = EngineAuditConfig(tv=tv, test=test, budget_seconds=1e9, report_samples=0)
                t0 = time.perf_counter()
                r = audit_engine(spec, cfg)
                row.update(
                    verdict=r.verdict.value,
                    samples=r.samples,
                    observed_tokens=sum(c.observed_tokens for c in r.cases)
                    if test == "tokens"
                    else r.samples * m,
                    planned_samples=sum(c.planned for c in r.cases),
                    seconds=time.perf_counter() - t0,
                    flagged_by=r.short_witness() if r.verdict == Verdict.LOSSY else None,
                )
                rows.append(row)
                say(
                    f"side by side {spec.name} {test}: {row['verdict']} after {r.samples:,} samples "
                    f"({row['seconds']:.0f} s)"
                )
    return rows


# --------------------------------------------------------------------------- all


def calibrate_tokens(
    runs: int = 300,
    alpha: float = 0.01,
    tv: float = 0.05,
    power_runs: int = 60,
    exact: Sequence[str] | None = None,
    sections: Sequence[str] = ("power", "false_alarms", "stopping", "side_by_side"),
    say: Say = print,
) -> dict[str, Any]:
    """The sections asked (module docstring); ``runs``: audits for the false alarms (shared among
    the exact engines) and token tests per engine for the stopping rows (100 looks each)."""
    from specproof.properties.engine.audit import ENGINE_PACKAGES
    from specproof.properties.outputs import versions

    doc: dict[str, Any] = {"versions": versions(ENGINE_PACKAGES), "sections": list(sections)}
    if "power" in sections:
        doc["power"] = power_rows(runs=power_runs, say=say)
        doc["pooled_power"] = pooled_power_rows(runs=power_runs, say=say)
    if "false_alarms" in sections:
        doc["false_alarms"] = false_alarm_rows(runs, alpha, tv, exact, say)
    if "stopping" in sections:
        doc["stopping"] = stopping_rows(runs, 100, alpha, exact or STOPPING, say=say)
    if "side_by_side" in sections:
        doc["side_by_side"] = side_by_side_rows(say=say)
    return doc
