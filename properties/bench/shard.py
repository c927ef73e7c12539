"""Does sharding scale? The engine audit's sampling stage here and on 1 and 2 local Ray workers.

On a CPU-bound engine (``reference.draft.token``: the reference loop on the tiny transformer,
M = 4, V = 8, one case at T = 1, one look), this measures

* **samples per second** of the sampling stage: here (no Ray), and with 1 and 2 Ray actors
  (started, their engines built and a short warm-up audit drawn before the clock starts), against
  the ideal: 2 workers at twice the rate of one; and the CPU time a sample costs here and in the
  workers (which contention on a loaded machine does not change, unlike the rate);
* **what the driver pays per merged sample**: its CPU time inside the drawer (dispatching shards,
  waiting, unpacking), and its own work on each sample (counting, reading laws, the tests), timed
  by replaying the same samples from memory through the same audit, with no engine and no Ray:
  the driver's ceiling is one over that;
* **bytes per sample** that crossed the wire each way.

On a 2-core machine the two workers share the cores with the driver and Ray's own processes (and
with whatever else runs), so the ratio measures that contention as much as the sharding; the
load average is recorded beside the figures. With one replica per GPU, each actor's rate is its
GPU's, and the driver's ceiling bounds the sum.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from specproof.properties.bench.kernels import Row
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import T1, Generation
from specproof.properties.engine.drawing import Drawer
from specproof.properties.engine.registry import resolve_engine, with_options
from specproof.properties.engine.runner import CaseRunner

ENGINE = "reference.draft.token"
PROMPT = (0, 6)


class Recorder(Drawer):
    """Draws here and keeps every sample by seed (for the replay), and the CPU time it took."""

    def __init__(self) -> None:
        self.kept: dict[int, Generation] = {}
        self.cpu = 0.0

    def draw(self, runner: CaseRunner, seeds: list[int]) -> list[Generation]:
        t0 = time.process_time()
        gens = runner.draw(seeds)
        self.cpu += time.process_time() - t0
        self.kept.update(zip(seeds, gens))
        return gens


def _worker_cpu(drawer: Any) -> float:
    return float(sum(w["cpu_seconds"] for w in drawer.pool.each("ready") if isinstance(w, dict)))


class Replay(Drawer):
    """Returns the recorded samples: the sampling stage then times the driver's own work alone."""

    def __init__(self, kept: dict[int, Generation], chunk: int) -> None:
        self.kept, self.size = kept, chunk
        self.sampling = False  # set at the first draw: the sampling stage has begun

    def chunk(self, runner: CaseRunner) -> int:
        return self.size

    def draw(self, runner: CaseRunner, seeds: list[int]) -> list[Generation]:
        self.sampling = True
        return [self.kept[s] for s in seeds]


def _sampling_seconds(res: Any) -> float:
    return float(sum(r.seconds for r in res.cases))


def run(
    quick: bool = False, report: Callable[[str], None] = print, workers: tuple[int, ...] = (1, 2)
) -> list[Row]:
    """Here and on each number of ``workers``, alternated (here, 1, 2, here, 1, 2, ...) over
    ``rounds`` so that drifts of the machine's load hit every configuration alike; the median
    rate of each, the CPU per sample summed over the rounds."""
    import contextlib

    from specproof.properties.shard.engine import RayDrawer
    from specproof.properties.shard.pool import connect

    samples, rounds = (240, 1) if quick else (1200, 3)
    spec = with_options(resolve_engine(ENGINE), prompts=[PROMPT], samplings=[T1])
    # one torch thread here as in each worker, so that a sample costs the same CPU in both
    config = EngineAuditConfig(alpha=1e-3, samples=samples, looks=1, report_samples=0, seed=0, threads=1)
    warmup = EngineAuditConfig(alpha=1e-3, samples=64, looks=1, report_samples=0, seed=1, threads=1)
    shape = f"M={spec.tokens} V={spec.vocab}, {samples} samples x {rounds}"
    loads: list[float] = []
    rates: dict[int, list[float]] = {w: [] for w in (0, *workers)}  # 0: here
    cpu = dict.fromkeys((0, *workers), 0.0)
    recorder = Recorder()
    pvalue = None
    # every configuration's actors live at once (idle ones cost nothing): room for all of them
    connect(None, sum(workers), 1.0)
    with contextlib.ExitStack() as stack:
        report(f"shard: starting {', '.join(map(str, workers))} Ray worker(s) and warming up")
        drawers = {w: stack.enter_context(RayDrawer.for_spec(spec, w)) for w in workers}
        audit_engine(spec, warmup)  # first calls (allocations, caches) outside the clock
        for d in drawers.values():
            d.warm(list(spec.samplings))
            audit_engine(spec, warmup, drawer=d)
        for i in range(rounds):
            for w in (0, *workers):
                report(f"shard: round {i + 1} of {rounds}: {'here' if w == 0 else f'{w} Ray worker(s)'}")
                loads.append(os.getloadavg()[0])
                if w == 0:
                    before = recorder.cpu
                    res = audit_engine(spec, config, drawer=recorder)
                    cpu[0] += recorder.cpu - before
                else:
                    cpu0 = _worker_cpu(drawers[w])
                    res = audit_engine(spec, config, drawer=drawers[w])
                    cpu[w] += _worker_cpu(drawers[w]) - cpu0
                p = res.to_json()["cases"][0]["pvalue"]
                if pvalue is not None and p != pvalue:
                    raise AssertionError(f"the p-value on {w} workers differs from here's")
                pvalue = p
                rates[w].append(res.samples / _sampling_seconds(res))
        stats = {w: (d.pool.stats, d.drawn, d.driver_seconds) for w, d in drawers.items()}
    rows = _rows(rates, cpu, stats, loads, samples * rounds, shape, workers)
    report("shard: the driver's own work per merged sample (replayed samples)")
    rows.append(_driver_merge(spec, config, recorder, shape))
    return rows


def _rows(
    rates: dict[int, list[float]],
    cpu: dict[int, float],
    stats: dict[int, Any],
    loads: list[float],
    n: int,
    shape: str,
    workers: tuple[int, ...],
) -> list[Row]:
    """The rows of the rates measured here and on each number of workers (medians over rounds)."""
    load = statistics.median(loads)
    here = statistics.median(rates[0])
    extra = {"samples_per_s": here, "cpu_ms": 1e3 * cpu[0] / n, "load": load, "rates": rates[0]}
    rows = [Row("shard", "here", ENGINE, shape, 1e3 / here, n, None, "", extra)]
    one = statistics.median(rates[workers[0]]) / workers[0]
    for w in workers:
        rate = statistics.median(rates[w])
        st, drawn, driver = stats[w]
        rows.append(
            Row(
                "shard",
                f"ray x{w}",
                ENGINE,
                shape,
                1e3 / rate,
                n,
                rate / one,
                "ray x1",
                {
                    "samples_per_s": rate,
                    "rates": rates[w],
                    "ideal": w * one,
                    "of_ideal": rate / (w * one),
                    "driver_cpu_us": 1e6 * driver / max(1, drawn),
                    "cpu_ms": 1e3 * cpu[w] / n,  # the workers' CPU per sample
                    "bytes_up": st.bytes_up / max(1, drawn),
                    "bytes_down": st.bytes_down / max(1, drawn),
                    "shards": st.jobs,
                    "load": load,
                },
            )
        )

    return rows


def _driver_merge(spec: Any, config: EngineAuditConfig, recorder: Recorder, shape: str) -> Row:
    """The driver's own work per merged sample: the audit replayed on the recorded samples, the
    time it spends reading laws counted apart."""
    replay = Replay(recorder.kept, 64)
    reading = [0.0]
    law = CaseRunner.law

    def timed_law(self: CaseRunner, prefix: Any) -> np.ndarray:  # the sampling stage's law reads
        t = time.perf_counter()
        try:
            return law(self, prefix)
        finally:
            reading[0] += (time.perf_counter() - t) if replay.sampling else 0.0

    CaseRunner.law = timed_law  # type: ignore[method-assign]
    try:
        t0 = time.process_time()
        again = audit_engine(spec, config, drawer=replay)
        audit_cpu = time.process_time() - t0
    finally:
        CaseRunner.law = law  # type: ignore[method-assign]
    merge = _sampling_seconds(again) / again.samples
    laws = reading[0] / again.samples
    return Row(
        "shard",
        "driver merge",
        ENGINE,
        shape,
        1e3 * merge,
        again.samples,
        None,
        "",
        {"samples_per_s": 1.0 / merge, "audit_cpu_s": audit_cpu, "law_us": 1e6 * laws},
    )


def markdown(rows: list[Row]) -> str:
    out = [
        "| where | samples / s | x one worker (ideal) | sampler CPU ms / sample | driver CPU in the drawer, "
        "us / sample | bytes / sample back, out | load |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        e = r.extra
        if r.rule == "driver merge":
            out.append(
                f"| the driver's own work (replayed samples) | {e['samples_per_s']:.0f} (its ceiling) | | | "
                f"{1e3 * r.ms_per_call:.0f} per merged sample, {e['law_us']:.0f} of it reading laws | | |"
            )
            continue
        rounds = ", ".join(f"{x:.0f}" for x in e["rates"])
        if r.rule == "here":
            out.append(
                f"| here, no Ray | {e['samples_per_s']:.1f} ({rounds}) | | {e['cpu_ms']:.2f} | | | "
                f"{e['load']:.1f} |"
            )
            continue
        w = int(r.rule.split("x")[1])
        out.append(
            f"| {w} Ray worker{'s' if w > 1 else ''} | {e['samples_per_s']:.1f} ({rounds}) | "
            f"{r.ratio:.2f} ({w:.2f}) | "
            f"{e['cpu_ms']:.2f} | {e['driver_cpu_us']:.0f} | {e['bytes_up']:.1f}, {e['bytes_down']:.1f} | "
            f"{e['load']:.1f} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    print(markdown(run(quick="--quick" in sys.argv)))
