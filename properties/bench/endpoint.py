"""Is the endpoint auditor the bottleneck? Its sample stage beside a plain load generator.

Against the same llama-server (the tiny target and draft, draft-model speculation, four slots),
with the same concurrency and the same request bodies, this times

* the **plain load generator**: an ``httpx`` client posting the bodies, reading each answer's
  JSON, nothing else;
* the **audit's sample stage**, whole: :meth:`EngineAudit.sample
  <specproof.properties.engine.audit.EngineAudit.sample>` of an endpoint audit at a fixed size
  (requests built and sent, answers read and checked against the contract, the laws read, the
  token test scored, the cells test at every look, the server's metrics read before and after),
  with its chunks asked for ahead (:class:`~specproof.properties.engine.drawing.DrawAhead`), and
  once more with no chunk asked ahead (how the stage drew before), so the gain is measured too.

The audit reads its laws from the twin, a second server. Those reads are the twin's work, not
the auditor's: the **warm** rows run the same plan a second time with the laws of the first run
already read (same seeds, same samples: not one law request), so they time the generating server
and the auditor alone; the **cold** row reads every law, its twin on the server's cores.

Where the machine has at least two cores, the servers run on the first half of them and this
process on the rest (``sched_setaffinity``; llama-server with one thread a core it has), so
that the auditor's own CPU does not slow the server it measures, as on a deployment where the
server has its accelerator and the auditor a host core. Each row's CPU milliseconds per sample
(this process's) say what the auditor costs. Rounds alternate the rows so that drifts hit
every row alike; medians are reported, with the ratio to the plain generator (the goal: at least
0.9 for the warm audit).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from specproof.properties.bench.kernels import Row
from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.families.llamacpp import LlamaCpp
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.engine import drawing
from specproof.properties.engine.audit import EngineAudit, EngineAuditConfig, sample_seed
from specproof.properties.engine.contract import T1
from specproof.properties.servers import gguf_models, llamacpp

PROMPT = (1, 2)
TOKENS = 4
CONCURRENCY = 4


class PlainGenerator:
    """A bare load generator: one event loop and one keep-alive client for all its rounds (as the
    audit's client has), posting bodies ``CONCURRENCY`` at once."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.loop = asyncio.new_event_loop()
        self.http = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=CONCURRENCY))

    def seconds(self, bodies: list[dict[str, Any]]) -> float:
        async def go() -> None:
            gate = asyncio.Semaphore(CONCURRENCY)

            async def one(body: dict[str, Any]) -> None:
                async with gate:
                    r = await self.http.post(self.url + "/completion", json=body)
                    r.json()

            await asyncio.gather(*(one(b) for b in bodies))

        t0 = time.perf_counter()
        self.loop.run_until_complete(go())
        return time.perf_counter() - t0

    def close(self) -> None:
        self.loop.run_until_complete(self.http.aclose())
        self.loop.close()


@contextlib.contextmanager
def ahead(n: int) -> Iterator[None]:
    """The sample stage with ``n`` chunks asked for ahead (0: none, as it drew before)."""
    saved = drawing.AHEAD
    drawing.AHEAD = n
    try:
        yield
    finally:
        drawing.AHEAD = saved


class StageTimer:
    """The endpoint audit's sample stage at ``samples`` samples of one case (``prompt``, T = 1,
    ``tokens`` new tokens), timed; ``warm`` runs reuse the laws a first, cold run read (module
    docstring)."""

    def __init__(
        self, endpoint: Endpoint, samples: int, prompt: tuple[int, ...] = PROMPT, tokens: int = TOKENS
    ) -> None:
        self.endpoint = endpoint
        self.spec = endpoint_spec(endpoint, prompts=[prompt], samplings=[T1], tokens=tokens)
        self.config = EngineAuditConfig(alpha=1e-3, samples=samples, seed=1, report_samples=0)
        self.memo: list[dict[Any, Any]] | None = None
        self.verdicts: list[str] = []

    def run(self, warm: bool) -> tuple[float, float, int]:
        """Seconds and CPU seconds of one sample stage, and the law requests it sent."""
        audit = EngineAudit(self.spec, self.config)
        audit.contract()
        audit.plan()
        if warm:
            assert self.memo is not None, "a cold run first"
            for runner, memo in zip(audit.runners, self.memo):
                runner.memo.limit = 2**62  # every law the cold run read stays
                runner.memo.update(memo)
        law_client = self.endpoint.twin_client or self.endpoint.client
        before = law_client.requests
        t0, c0 = time.perf_counter(), time.process_time()
        audit.sample()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        if not warm:
            self.memo = [dict(r.memo.items()) for r in audit.runners]
        audit.verdict()
        self.verdicts.append(str(audit.result.verdict))
        assert audit.result.samples == self.config.samples, audit.result.summary()
        return seconds, cpu, law_client.requests - before


def split_cores() -> tuple[set[int], set[int]] | None:
    """The servers' cores and this process's (half each), where there are at least two."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return None
    if len(cores) < 2:
        return None
    half = len(cores) // 2
    return set(cores[:half]), set(cores[half:])


def compare(url: str, twin: str, samples: int, rounds: int, report: Callable[[str], None]) -> dict[str, Any]:
    """Samples per second (and this process's CPU ms per sample) of each row, alternated."""
    profile = LlamaCpp()
    endpoint = Endpoint(EndpointOptions((url,), "llamacpp", twin=twin, concurrency=CONCURRENCY))
    bare = PlainGenerator(url)
    rows: dict[str, list[tuple[float, float]]] = {"plain": [], "warm": [], "warm, none ahead": [], "cold": []}
    law_requests = 0
    try:
        timer = StageTimer(endpoint, samples)
        for k in range(rounds):
            seeds = [sample_seed(7, k, j) for j in range(samples)]
            bodies = [profile.generation(PROMPT, TOKENS, s, T1, False)[1] for s in seeds]
            c0 = time.process_time()
            t = bare.seconds(bodies)
            rows["plain"].append((samples / t, 1000 * (time.process_time() - c0) / samples))
            if k == 0:  # the cold run reads the laws the warm ones reuse
                t, cpu, law_requests = timer.run(warm=False)
                rows["cold"].append((samples / t, 1000 * cpu / samples))
            t, cpu, _ = timer.run(warm=True)
            rows["warm"].append((samples / t, 1000 * cpu / samples))
            with ahead(0):
                t, cpu, _ = timer.run(warm=True)
            rows["warm, none ahead"].append((samples / t, 1000 * cpu / samples))
            report(
                "  round {}: {}".format(
                    k + 1, ", ".join(f"{name} {v[-1][0]:.0f}/s" for name, v in rows.items() if v)
                )
            )
    finally:
        endpoint.close()
        bare.close()
    plain = statistics.median(r for r, _ in rows["plain"])
    out: dict[str, Any] = {
        "samples": samples,
        "rounds": rounds,
        "law_requests_cold": law_requests,
        "rows": {},
    }
    for name, v in rows.items():
        rate = statistics.median(r for r, _ in v)
        out["rows"][name] = {
            "rate": rate,
            "cpu_ms": statistics.median(c for _, c in v),
            "ratio": rate / plain,
            "measured": len(v),
        }
    out["verdicts"] = sorted(set(timer.verdicts))
    return out


def run(quick: bool = False, report: Callable[[str], None] = print) -> list[Row]:
    """The comparison on one server and its twin (section ``endpoint`` of ``specproof bench``)."""
    binary = llamacpp.ensure_built(progress=report)
    samples, rounds = (400, 2) if quick else (2000, 5)
    split = split_cores()
    own = os.sched_getaffinity(0) if split else None
    threads = ("-t", str(len(split[0]))) if split else ()
    args = ("-np", str(CONCURRENCY), "-c", "2048", *threads)
    with tempfile.TemporaryDirectory(prefix="specproof-gguf-") as tmp:
        files = gguf_models.write_models(tmp, seed=0)
        if split:
            os.sched_setaffinity(0, split[0])  # the servers started now inherit these cores
        try:
            with (
                llamacpp.start_server(
                    binary,
                    files["target"],
                    draft=files["draft"],
                    extra_args=("--spec-draft-n-max", "4", *args),
                ) as url,
                llamacpp.start_server(binary, files["target"], extra_args=args) as twin,
            ):
                if split:
                    os.sched_setaffinity(0, split[1])
                report(
                    f"endpoint sample stage, concurrency {CONCURRENCY}, M = {TOKENS}"
                    + (
                        f"; servers on cores {sorted(split[0])}, auditor on {sorted(split[1])}"
                        if split
                        else ""
                    )
                )
                m = compare(url, twin, samples, rounds, report)
        finally:
            if own is not None:
                os.sched_setaffinity(0, own)
    m["cores"] = None if split is None else {"servers": sorted(split[0]), "auditor": sorted(split[1])}
    plain = m["rows"]["plain"]["rate"]
    return [
        Row(
            "endpoint",
            "llama-server draft-simple",
            name,
            f"M = {TOKENS}, concurrency {CONCURRENCY}",
            1000.0 / v["rate"],
            samples * v["measured"],
            ratio=v["rate"] / plain,
            baseline="plain load generator",
            extra={**m, "row": name},
        )
        for name, v in m["rows"].items()
    ]


WHAT = {
    "plain": "plain load generator (generation requests only)",
    "warm": "audit sample stage, laws already read (chunks asked ahead)",
    "warm, none ahead": "audit sample stage, laws already read, no chunk asked ahead (as before)",
    "cold": "audit sample stage, every law read from the twin (on the server's cores)",
}


def markdown(rows: list[Row]) -> str:
    if not rows:
        return ""
    e = rows[0].extra
    cores = e.get("cores")
    where = (
        f"servers on cores {cores['servers']}, the auditor on {cores['auditor']}"
        if cores
        else "servers and auditor sharing the cores"
    )
    out = [
        f"llama-server draft-simple (draft-model speculation, 4 drafts), its twin without speculation; "
        f"M = {TOKENS}, T = 1, concurrency {CONCURRENCY}; {e['samples']} samples a measurement, "
        f"{e['rounds']} rounds alternated, medians; {where}. The cold run read "
        f"{e['law_requests_cold']:,} laws from the twin. Verdicts of the audits: {', '.join(e['verdicts'])}.",
        "",
        "| what | samples / s | auditor CPU ms / sample | / plain |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        v = r.extra["rows"][r.extra["row"]]
        out.append(f"| {WHAT[r.extra['row']]} | {v['rate']:.0f} | {v['cpu_ms']:.2f} | {v['ratio']:.2f} |")
    return "\n".join(out)
