"""Is the endpoint auditor the bottleneck? Its sampling beside a plain load generator.

Against the same llama-server (the tiny target and draft, draft-model speculation, four slots),
with the same concurrency and the same request bodies, this times

* the **plain load generator**: an ``httpx`` client posting the bodies, reading each answer's
  JSON, nothing else;
* the **audit's sampling**: :meth:`CaseRunner.draw <specproof.properties.engine.audit.CaseRunner.draw>`
  on an :class:`~specproof.properties.endpoint.engine.EndpointEngine`, in the chunks the audit's
  sample stage draws (request building, retries, reading token ids and counters, checking each
  sample against the contract),

alternating the two (A B A B ...) so that load drifts hit both alike, and reports samples per
second of each and their ratio (the goal: at least 0.9), for one server and for two replicas.
The laws the audit reads go to the twin, a separate server, and are counted apart: law requests
per sample drawn, from a short audit of the same server.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import httpx

from specproof.properties.bench.kernels import Row
from specproof.properties.endpoint.client import Client
from specproof.properties.endpoint.engine import EndpointEngine
from specproof.properties.endpoint.families.llamacpp import LlamaCpp
from specproof.properties.engine.audit import CaseRunner, sample_seed
from specproof.properties.engine.contract import T1
from specproof.properties.engine.results import EngineCase
from specproof.properties.servers import gguf_models, llamacpp

PROMPT = (1, 2)
TOKENS = 4
CONCURRENCY = 4
SERVER_ARGS = ("--spec-draft-n-max", "4", "-np", str(CONCURRENCY), "-c", "1024")


class PlainGenerator:
    """A bare load generator: one event loop and one keep-alive client for all its rounds (as the
    audit's client has), posting bodies ``CONCURRENCY`` at once, round-robin over the replicas."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.loop = asyncio.new_event_loop()
        self.http = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=CONCURRENCY))

    def seconds(self, bodies: list[dict[str, Any]]) -> float:
        async def go() -> None:
            gate = asyncio.Semaphore(CONCURRENCY)

            async def one(i: int) -> None:
                async with gate:
                    r = await self.http.post(self.urls[i % len(self.urls)] + "/completion", json=bodies[i])
                    r.json()

            await asyncio.gather(*(one(i) for i in range(len(bodies))))

        t0 = time.perf_counter()
        self.loop.run_until_complete(go())
        return time.perf_counter() - t0

    def close(self) -> None:
        self.loop.run_until_complete(self.http.aclose())
        self.loop.close()


def _audit_draws(runner: CaseRunner, seeds: list[int], chunk: int) -> float:
    """Seconds for the audit's sample stage to draw ``seeds`` in chunks, as it does."""
    t0 = time.perf_counter()
    for i in range(0, len(seeds), chunk):
        runner.draw(seeds[i : i + chunk])
    return time.perf_counter() - t0


def compare(urls: list[str], samples: int, rounds: int, report: Callable[[str], None]) -> dict[str, Any]:
    """Samples per second of the plain generator and of the audit's sampling, alternated."""
    profile = LlamaCpp()
    client = Client(urls, concurrency=CONCURRENCY)
    bare = PlainGenerator(urls)
    try:
        engine = EndpointEngine(client, profile, T1, vocab=len(gguf_models.VOCAB))
        runner = CaseRunner(engine, EngineCase(0, PROMPT, T1, TOKENS), engine.vocab)
        plain, audit = [], []
        for k in range(rounds):
            seeds = [sample_seed(7, k, j) for j in range(samples)]
            bodies = [profile.generation(PROMPT, TOKENS, s, T1, False)[1] for s in seeds]
            plain.append(samples / bare.seconds(bodies))
            audit.append(samples / _audit_draws(runner, seeds, engine.batch))
            report(f"  round {k + 1}: plain {plain[-1]:.0f}/s, audit {audit[-1]:.0f}/s")
    finally:
        client.close()
        bare.close()
    p, a = statistics.median(plain), statistics.median(audit)
    return {
        "replicas": len(urls),
        "samples": samples,
        "rounds": rounds,
        "plain": p,
        "audit": a,
        "ratio": a / p,
    }


def run(quick: bool = False, report: Callable[[str], None] = print) -> list[Row]:
    """The comparison on one server and on two replicas (section ``endpoint`` of ``specproof bench``)."""
    binary = llamacpp.ensure_built(progress=report)
    samples, rounds = (100, 2) if quick else (400, 5)
    rows = []
    with tempfile.TemporaryDirectory(prefix="specproof-gguf-") as tmp:
        files = gguf_models.write_models(tmp, seed=0)
        with (
            llamacpp.start_server(binary, files["target"], draft=files["draft"], extra_args=SERVER_ARGS) as a,
            llamacpp.start_server(binary, files["target"], draft=files["draft"], extra_args=SERVER_ARGS) as b,
        ):
            for urls in ([a], [a, b]):
                report(f"endpoint sampling, {len(urls)} replica(s), concurrency {CONCURRENCY}")
                m = compare(urls, samples, rounds, report)
                rows.append(
                    Row(
                        "endpoint",
                        "llama-server draft-simple",
                        "audit sampling",
                        f"{len(urls)} replica(s), M = {TOKENS}, concurrency {CONCURRENCY}",
                        1000.0 / m["audit"],
                        samples * rounds,
                        ratio=m["ratio"],
                        baseline="plain load generator",
                        extra=m,
                    )
                )
    return rows


def markdown(rows: list[Row]) -> str:
    out = [
        "| server | replicas | samples x rounds | plain samples / s | audit samples / s | audit / plain |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        e = r.extra
        out.append(
            f"| {r.rule} | {e['replicas']} | {e['samples']} x {e['rounds']} | {e['plain']:.0f} | "
            f"{e['audit']:.0f} | {e['ratio']:.2f} |"
        )
    return "\n".join(out)
