"""Is the endpoint audit of vLLM's CPU build slower than the server it audits? Side by side.

Against one ``vllm serve`` of the tiny pair with n-gram speculation and the launcher's fixes, its
speculation-off twin beside it (where the audit reads its laws), at concurrency 8, this alternates
three measurements, each over the same number of samples of the same request (the repeating
prompt, M = 6, T = 1):

* **plain**: a bare load generator (``httpx``, one keep-alive client) posting the generation
  bodies the audit posts, reading each answer's JSON, nothing else;
* **audit, laws along each sample**: a whole endpoint audit at a fixed size (contract checks,
  sampling, the laws read from the twin, the token and cells tests, the report and control
  checks) with the vLLM profile's teacher-forced law reads (one request per sample);
* **audit, one request per prefix**: the same audit reading each prefix's law by its own request
  (the recipe without teacher forcing).

It prints, and writes as Markdown and JSON, the samples per second of each (the medians over the
rounds) and the audits' ratios to the plain generator. Needs ``specproof vllm install``::

    python scripts/vllm_throughput.py --markdown docs/measurements/bench-vllm-cpu.md \
        --json docs/measurements/bench-vllm-cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import time
from typing import Any

import httpx

from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.families.vllm import VLLM
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine, sample_seed
from specproof.properties.engine.contract import T1
from specproof.properties.servers import gguf_models, vllm_cpu

PROMPT = (1, 2, 3, 1, 2, 3, 1, 2)
TOKENS = 6
CONCURRENCY = 8


def plain_rate(url: str, samples: int, seed: int) -> float:
    """Samples per second of a bare load generator posting the audit's generation bodies."""
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

    return samples / asyncio.run(go())


def audit_rate(url: str, twin: str, samples: int, seed: int, along: bool) -> tuple[float, str]:
    """Samples per second of a whole audit of ``samples`` samples, and its verdict."""
    saved = VLLM.laws_along_request
    if not along:
        VLLM.laws_along_request = lambda self, *a, **k: None  # type: ignore[method-assign]
    try:
        ep = Endpoint(
            EndpointOptions((url,), "vllm", twin=twin, vocab=len(gguf_models.VOCAB), concurrency=CONCURRENCY)
        ).open()
        try:
            spec = endpoint_spec(ep, prompts=[PROMPT], samplings=[T1], tokens=TOKENS)
            t0 = time.perf_counter()
            r = audit_engine(
                spec, EngineAuditConfig(alpha=1e-4, samples=samples, seed=seed, report_samples=16)
            )
            return r.samples / (time.perf_counter() - t0), r.verdict.value
        finally:
            ep.close()
    finally:
        VLLM.laws_along_request = saved  # type: ignore[method-assign]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    args = ap.parse_args()
    rates: dict[str, list[float]] = {"plain": [], "along": [], "per_prefix": []}
    verdicts: list[str] = []
    with (
        vllm_cpu.VLLMServer("plain") as twin,
        vllm_cpu.VLLMServer("ngram", fixes=("expand", "topk")) as server,
    ):
        for k in range(args.rounds):
            seed = 100 + k
            rates["plain"].append(plain_rate(server.url, args.samples, seed))
            rate, v = audit_rate(server.url, twin.url, args.samples, seed, along=True)
            rates["along"].append(rate)
            verdicts.append(v)
            rate, v = audit_rate(server.url, twin.url, args.samples, seed, along=False)
            rates["per_prefix"].append(rate)
            verdicts.append(v)
            print(
                f"round {k + 1}: plain {rates['plain'][-1]:.1f}/s, audit (laws along) "
                f"{rates['along'][-1]:.1f}/s, audit (per prefix) {rates['per_prefix'][-1]:.1f}/s",
                flush=True,
            )
    med = {k: statistics.median(v) for k, v in rates.items()}
    day = datetime.date.today().isoformat()
    text = "\n".join(
        [
            f"vLLM CPU build {vllm_cpu.VERSION}, {day}, 2 cores: one `vllm serve` (n-gram, 3 tokens, the "
            f"launcher's fixes) and its plain twin on the same machine; M = {TOKENS}, T = 1, "
            f"concurrency {CONCURRENCY}, "
            f"{args.samples} samples a measurement, {args.rounds} rounds alternated, medians. "
            "Command: `python scripts/vllm_throughput.py`.",
            "",
            "| what | samples / s | / plain |",
            "|---|---:|---:|",
            f"| plain load generator (generation requests only) | {med['plain']:.1f} | 1.00 |",
            f"| whole audit, laws along each sample (one twin request a sample) | {med['along']:.1f} | "
            f"{med['along'] / med['plain']:.2f} |",
            f"| whole audit, one twin request a prefix | {med['per_prefix']:.1f} | "
            f"{med['per_prefix'] / med['plain']:.2f} |",
            "",
            f"Verdicts of the audits: {', '.join(sorted(set(verdicts)))}.",
            "",
        ]
    )
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"rates": rates, "medians": med, "verdicts": verdicts, "samples": args.samples}, f, indent=2
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
