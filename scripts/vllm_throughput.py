"""Is the endpoint audit of vLLM's CPU build slower than the server it audits? Side by side.

Against one ``vllm serve`` of the tiny pair with n-gram speculation and the launcher's fixes, its
speculation-off twin beside it (where the audit reads its laws), at concurrency 8, this alternates
four measurements over the same number of samples of the same request (the repeating prompt,
M = 6, T = 1), as ``specproof bench --section endpoint`` does for llama-server
(properties/bench/endpoint.py: the same sample-stage timer):

* **plain**: a bare load generator (``httpx``, one keep-alive client) posting the generation
  bodies the audit posts, reading each answer's JSON, nothing else;
* **warm**: the audit's whole sample stage with its laws already read (the plan run a second time
  on the same seeds: not one law request), which times the server and the auditor alone;
* **cold**: the same stage reading every law from the twin (the vLLM profile's teacher-forced
  read: one twin request a sample), the twin on the server's core;
* **whole audit**: an audit of the same size end to end (contract checks, plan, sampling, the
  control and the report check), whose fixed stages weigh on a short run.

The servers run on the first half of the cores and this process on the rest (each vLLM process
runs one thread), so the auditor's CPU does not slow the server it measures. It prints, and
writes as Markdown and JSON, the samples per second of each (medians over the rounds), this
process's CPU milliseconds per sample, and each one's ratio to the plain generator. Needs
``specproof vllm install``::

    python scripts/vllm_throughput.py --markdown docs/measurements/bench-vllm-cpu.md \\
        --json docs/measurements/bench-vllm-cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import time
from typing import Any

import httpx

from specproof.properties.bench.endpoint import StageTimer, split_cores
from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.families.vllm import VLLM
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine, sample_seed
from specproof.properties.engine.contract import T1
from specproof.properties.servers import gguf_models, vllm_cpu

PROMPT = (1, 2, 3, 1, 2, 3, 1, 2)
TOKENS = 6
CONCURRENCY = 8


def plain_rate(url: str, samples: int, seed: int) -> tuple[float, float]:
    """Samples per second of a bare load generator posting the audit's generation bodies, and its
    CPU milliseconds per sample."""
    profile = VLLM(model="tiny")
    bodies = [
        profile.generation(PROMPT, TOKENS, sample_seed(seed, 0, j), T1, False)[1] for j in range(samples)
    ]

    async def go() -> float:
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=CONCURRENCY)) as http:
            gate = asyncio.Semaphore(CONCURRENCY)

            async def one(body: dict[str, Any]) -> None:
                async with gate:
                    (await http.post(url + "/v1/completions", json=body)).json()

            t0 = time.perf_counter()
            await asyncio.gather(*(one(b) for b in bodies))
            return time.perf_counter() - t0

    c0 = time.process_time()
    seconds = asyncio.run(go())
    return samples / seconds, 1000 * (time.process_time() - c0) / samples


def whole_rate(endpoint: Endpoint, samples: int, seed: int) -> tuple[float, float, str]:
    """Samples per second of a whole audit of ``samples`` samples, its CPU ms per sample, verdict."""
    spec = endpoint_spec(endpoint, prompts=[PROMPT], samplings=[T1], tokens=TOKENS)
    t0, c0 = time.perf_counter(), time.process_time()
    r = audit_engine(spec, EngineAuditConfig(alpha=1e-4, samples=samples, seed=seed, report_samples=16))
    return (
        r.samples / (time.perf_counter() - t0),
        1000 * (time.process_time() - c0) / max(1, r.samples),
        r.verdict.value,
    )


WHAT = {
    "plain": "plain load generator (generation requests only)",
    "warm": "audit sample stage, laws already read (chunks asked ahead)",
    "cold": "audit sample stage, the laws along each sample read from the twin (on the server's core)",
    "whole": "whole audit (contract checks, plan, sampling with its laws, control, report check)",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows: dict[str, list[tuple[float, float]]] = {k: [] for k in WHAT}
    verdicts: list[str] = []
    split = split_cores()
    own = os.sched_getaffinity(0) if split else None
    if split:
        os.sched_setaffinity(0, split[0])  # the servers started now inherit these cores
    try:
        with (
            vllm_cpu.VLLMServer("plain") as twin,
            vllm_cpu.VLLMServer("ngram", fixes=("expand", "topk")) as server,
        ):
            if split:
                os.sched_setaffinity(0, split[1])
            options = EndpointOptions(
                (server.url,), "vllm", twin=twin.url, vocab=len(gguf_models.VOCAB), concurrency=CONCURRENCY
            )
            endpoint = Endpoint(options).open()
            try:
                timer = StageTimer(endpoint, args.samples, PROMPT, TOKENS)
                for k in range(args.rounds):
                    rows["plain"].append(plain_rate(server.url, args.samples, 100 + k))
                    if k == 0:
                        t, cpu, _ = timer.run(warm=False)
                        rows["cold"].append((args.samples / t, 1000 * cpu / args.samples))
                    t, cpu, _ = timer.run(warm=True)
                    rows["warm"].append((args.samples / t, 1000 * cpu / args.samples))
                    rate, cpu, verdict = whole_rate(endpoint, args.samples, 100 + k)
                    rows["whole"].append((rate, cpu))
                    verdicts.append(verdict)
                    print(
                        f"round {k + 1}: "
                        + ", ".join(f"{name} {v[-1][0]:.1f}/s" for name, v in rows.items() if v),
                        flush=True,
                    )
                verdicts += timer.verdicts
            finally:
                endpoint.close()
    finally:
        if own is not None:
            os.sched_setaffinity(0, own)
    med = {
        k: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v)) for k, v in rows.items()
    }
    plain = med["plain"][0]
    day = datetime.date.today().isoformat()
    where = (
        f"the servers on cores {sorted(split[0])}, the auditor on {sorted(split[1])}"
        if split
        else "servers and auditor sharing the cores"
    )
    lines = [
        f"vLLM CPU build {vllm_cpu.VERSION}, {day}: one `vllm serve` (n-gram, 3 tokens, the launcher's "
        f"fixes) and its plain twin, one thread each; {where}; M = {TOKENS}, T = 1, concurrency "
        f"{CONCURRENCY}, {args.samples} samples a measurement, {args.rounds} rounds alternated (the cold "
        "stage once), medians. Command: `python scripts/vllm_throughput.py`.",
        "",
        "| what | samples / s | auditor CPU ms / sample | / plain |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {WHAT[k]} | {med[k][0]:.1f} | {med[k][1]:.2f} | {med[k][0] / plain:.2f} |" for k in WHAT]
    lines += ["", f"Verdicts of the audits: {', '.join(sorted(set(verdicts)))}.", ""]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"rows": rows, "medians": med, "verdicts": verdicts, "samples": args.samples}, f, indent=2
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
