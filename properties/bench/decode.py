"""``specproof bench --section decode``: the optimized decoding loop against the reference loop.

**Speed, side by side.** For each configuration (proposer, rule) and batch size B (1, 8, 32):
B requests of different prompts (2 to 7 tokens) decode ``steps`` steps each on the same random
tapes, with

* the reference loop (``reference.decode.decode``, fed the tapes by
  :func:`~specproof.optimized.decode.reference_decode_on_tape`), one request after the other:
  it has no batching;
* the optimized loop in float64 (:class:`~specproof.optimized.decode.OptimizedDecoder`), all B
  requests in one batch: its tokens must equal the reference's (checked, reported);
* the optimized loop in float32: equal except where a decision falls within rounding.

Reported: emitted tokens per second of wall time (warm: one small decode of each engine first),
the optimized loop's ratio to the reference loop, whether the outputs are equal, and the share
of the optimized loop's time in prefill, drafting, target forward, verification and commit.
Both engines run with one intra-op thread. On a CPU the Triton kernels run under the
interpreter: quote ratios from this machine, absolute times only from a GPU.

**Float32 agreement.** For every proposer x exact rule with a kernel, ``requests`` requests of
``steps`` steps in float32 against the float64 reference loop on the same tapes: the steps
compared (up to each request's first divergence, after which their contexts differ), the steps
in which some uniform fell within ``delta`` of the threshold it was compared with (the
reference's margins, :func:`~specproof.optimized.decode.reference_decode_on_tape`), and the
steps that diverged, each with its margin; plus the largest difference between float32 and
float64 target laws measured on the same trees, which ``delta`` must exceed.

Speed is measured, never asserted (tests/test_optimized_decode.py checks the outputs).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from specproof.optimized.decode import PHASES, OptimizedDecoder, TapeUniforms, reference_decode_on_tape
from specproof.properties.bench.kernels import Row
from specproof.reference.decode import e2e_models

#: (proposer, rule) configurations of the speed table: a draft model's chain, Medusa's static
#: tree, EAGLE-2's dynamic tree
SPEED_CONFIGS = (("draft", "token"), ("medusa", "mss"), ("eagle2", "rrs"))
BATCHES = (1, 8, 32)
DELTA = 1e-5


def _workload(B: int, steps: int, S: int, N: int, seed: int) -> tuple[list[tuple[int, ...]], list[tuple]]:
    rng = np.random.default_rng(seed)
    prompts = [tuple(int(t) for t in rng.integers(0, 16, int(rng.integers(2, 8)))) for _ in range(B)]
    tapes = [(rng.random((steps, S)), rng.random((steps, N)), rng.random(steps)) for _ in range(B)]
    return prompts, tapes


def _optimized(proposer: str, rule: str, prompts, tapes, steps: int, dtype: torch.dtype):
    dec = OptimizedDecoder(e2e_models()[1], proposer, rule, dtype=dtype)
    t0 = time.perf_counter()
    for i, (p, t) in enumerate(zip(prompts, tapes)):
        dec.admit(i, p, steps=steps, tape=TapeUniforms(*t))
    out = dec.run()
    return time.perf_counter() - t0, [out[i] for i in range(len(prompts))], dec


def _reference(proposer: str, rule: str, prompts, tapes, steps: int):
    big = e2e_models()[1]
    t0 = time.perf_counter()
    out = [
        reference_decode_on_tape(big, proposer, rule, p, TapeUniforms(*t), steps)
        for p, t in zip(prompts, tapes)
    ]
    return time.perf_counter() - t0, out


def speed(quick: bool, report: Callable[[str], None]) -> list[Row]:
    steps = 2 if quick else 8
    batches = (1, 4) if quick else BATCHES
    configs = SPEED_CONFIGS[:1] if quick else SPEED_CONFIGS
    rows: list[Row] = []
    for proposer, rule in configs:
        probe = OptimizedDecoder(e2e_models()[1], proposer, rule)
        S, N = probe.S, probe.N
        warm_p, warm_t = _workload(2, 1, S, N, 99)  # warm-up: weights, caches, the interpreter
        _reference(proposer, rule, warm_p, warm_t, 1)
        _optimized(proposer, rule, warm_p, warm_t, 1, torch.float64)
        _optimized(proposer, rule, warm_p, warm_t, 1, torch.float32)
        for B in batches:
            prompts, tapes = _workload(B, steps, S, N, 1000 + B)
            t_ref, ref = _reference(proposer, rule, prompts, tapes, steps)
            tokens = sum(sum(r.emitted_per_step) for r in ref)
            shape = f"{proposer}, B={B}, {steps} steps"
            rows.append(
                Row("decode", rule, "reference", shape, 1e3 * t_ref / steps, steps,
                    extra={"tokens": tokens, "tokens_per_s": tokens / t_ref, "B": B, "proposer": proposer})
            )  # fmt: skip
            report(f"  decode {shape:28s} reference      {tokens / t_ref:9.1f} tokens/s")
            for name, dtype in (("optimized", torch.float64), ("optimized-fp32", torch.float32)):
                t_opt, got, dec = _optimized(proposer, rule, prompts, tapes, steps, dtype)
                n = sum(sum(o.emitted_per_step) for o in got)
                equal = all(o.tokens == r.tokens for o, r in zip(got, ref))
                total = sum(dec.timings.values()) or 1.0
                rows.append(
                    Row(
                        "decode",
                        rule,
                        name,
                        shape,
                        1e3 * t_opt / steps,
                        steps,
                        ratio=t_opt / t_ref,
                        baseline="reference",
                        extra={
                            "tokens": n,
                            "tokens_per_s": n / t_opt,
                            "speedup": (n / t_opt) / (tokens / t_ref),
                            "outputs_equal": equal,
                            "share": {k: dec.timings[k] / total for k in PHASES},
                            "B": B,
                            "proposer": proposer,
                        },
                    )
                )
                report(
                    f"  decode {shape:28s} {name:14s} {n / t_opt:9.1f} tokens/s "
                    f"({(n / t_opt) / (tokens / t_ref):.2f}x, outputs {'equal' if equal else 'DIFFER'})"
                )
    return rows


def law_rounding(trees: int = 16, seed: int = 0) -> float:
    """The largest ``|p32 - p64|`` between the float32 and float64 target laws of the optimized
    target forward, over ``trees`` random trees after random prompts (the 16-token target)."""
    from specproof.optimized.paged_kv import QueryBatch, chain_rows, tree_rows
    from specproof.optimized.transformer import PagedTransformer

    big = e2e_models()[1]
    g = torch.Generator().manual_seed(seed)
    worst = 0.0
    models = {dt: PagedTransformer(big, dt) for dt in (torch.float64, torch.float32)}
    for _ in range(trees):
        n = int(torch.randint(2, 9, (1,), generator=g))
        prompt = torch.randint(0, 16, (n,), generator=g).tolist()
        parents = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, 7)]
        toks = [prompt[-1]] + torch.randint(0, 16, (6,), generator=g).tolist()
        laws = {}
        for dt, model in models.items():
            cache = model.new_cache(8, 16)
            cache.admit(0)
            model.forward(QueryBatch.build(cache, [0], chain_rows([0], [prompt[:-1]])), cache)
            cache.set_length(0, n - 1)
            logits, _ = model.forward(
                QueryBatch.build(cache, [0], tree_rows([n - 1], [parents], [toks])), cache
            )
            laws[dt] = model.laws(logits, 1.0).double()
        worst = max(worst, float((laws[torch.float32] - laws[torch.float64]).abs().max()))
    return worst


def float32_agreement(
    pairs: list[tuple[str, str]] | None = None,
    requests: int = 8,
    steps: int = 16,
    seed: int = 0,
    delta: float = DELTA,
    report: Callable[[str], None] = lambda s: None,
    law_trees: int = 16,
) -> dict[str, Any]:
    """The float32 agreement study (module doc): per pair and in total, the steps compared, the
    near-threshold steps (a uniform within ``delta`` of its threshold), the divergent steps and
    each one's margin, and the largest float32 law error (:func:`law_rounding`)."""
    big = e2e_models()[1]
    rows: list[dict[str, Any]] = []
    for proposer, rule in pairs or exact_kernel_pairs():
        dec = OptimizedDecoder(big, proposer, rule, dtype=torch.float32)
        prompts, tapes = _workload(requests, steps, dec.S, dec.N, seed)
        for i, (p, t) in enumerate(zip(prompts, tapes)):
            dec.admit(i, p, steps=steps, tape=TapeUniforms(*t))
        got = dec.run()
        compared = near = 0
        diverged: list[float] = []
        for i, (p, t) in enumerate(zip(prompts, tapes)):
            margins: list[float] = []
            ref = reference_decode_on_tape(big, proposer, rule, p, TapeUniforms(*t), steps, margins=margins)
            pos = len(p)
            for s, (n_ref, n_opt) in enumerate(zip(ref.emitted_per_step, got[i].emitted_per_step)):
                compared += 1
                near += margins[s] < delta
                if ref.tokens[pos : pos + n_ref] != got[i].tokens[pos : pos + n_opt]:
                    diverged.append(margins[s])
                    break
                pos += n_ref
        row = {
            "proposer": proposer,
            "rule": rule,
            "compared": compared,
            "near": near,
            "diverged": len(diverged),
            "margins": diverged,
        }
        rows.append(row)
        report(
            f"  fp32 {proposer}/{rule}: {compared} steps, {near} near a threshold, {len(diverged)} diverged"
        )
    total = {k: sum(r[k] for r in rows) for k in ("compared", "near", "diverged")}
    margins_all = [m for r in rows for m in r["margins"]]
    return {
        "requests": requests,
        "steps": steps,
        "seed": seed,
        "delta": delta,
        "law_rounding": law_rounding(law_trees),
        "pairs": rows,
        **total,
        "unexplained": sum(m >= delta for m in margins_all),
    }


def exact_kernel_pairs() -> list[tuple[str, str]]:
    """Every (proposer, rule) with a kernel declared exact for the proposer's default process."""
    from specproof.optimized.decode import KERNEL_RULES
    from specproof.reference.proposers import PROPOSERS
    from specproof.reference.rules import RULES
    from specproof.reference.tree import DraftTree

    out = []
    for name, p in PROPOSERS.items():
        chain = DraftTree(p.shape).is_chain and p.process.chain
        for rule in KERNEL_RULES:
            if p.process.name in RULES[rule].exact_for and RULES[rule].applies_to(chain):
                out.append((name, rule))
    return out


def agreement_markdown(study: dict[str, Any]) -> str:
    lines = [
        f"float32 against float64: {study['requests']} requests x {study['steps']} steps per pair, "
        f"seed {study['seed']}; largest |p32 - p64| of the target laws: {study['law_rounding']:.2g}; "
        f"near a threshold: some uniform within {study['delta']:g} of it",
        "",
        "| proposer, rule | steps compared | near a threshold | diverged | margins of the diverged steps |",
        "|---|---:|---:|---:|---|",
    ]
    for r in study["pairs"]:
        ms = ", ".join(f"{m:.1e}" for m in r["margins"]) or "-"
        lines.append(
            f"| {r['proposer']}, {r['rule']} | {r['compared']} | {r['near']} | {r['diverged']} | {ms} |"
        )
    c, n, d = study["compared"], study["near"], study["diverged"]
    lines.append(f"| **all** | {c} | {n} ({n / max(1, c):.2%}) | {d} ({d / max(1, c):.2%}) | |")
    return "\n".join(lines)


def markdown(rows: list[Row]) -> str:
    out: list[str] = []
    speed_rows = [r for r in rows if r.section == "decode"]
    if speed_rows:
        out += [
            "| proposer, rule | B | reference tokens/s | optimized fp64 tokens/s | ratio | outputs | "
            "optimized fp32 tokens/s | ratio | outputs | "
            "fp64 time: prefill / draft / target / verify / commit |",
            "|---|---:|---:|---:|---:|---|---:|---:|---|---|",
        ]
        keys = sorted(
            {(r.extra["proposer"], r.rule, r.extra["B"]) for r in speed_rows}, key=lambda k: (k[0], k[2])
        )
        for proposer, rule, B in keys:
            cell = {
                r.engine: r
                for r in speed_rows
                if (r.extra["proposer"], r.rule, r.extra["B"]) == (proposer, rule, B)
            }
            ref, o64, o32 = cell["reference"], cell["optimized"], cell["optimized-fp32"]
            share = " / ".join(f"{100 * o64.extra['share'][k]:.0f}%" for k in PHASES)
            out.append(
                f"| {proposer}, {rule} | {B} | {ref.extra['tokens_per_s']:.1f} | "
                f"{o64.extra['tokens_per_s']:.1f} | "
                f"{o64.extra['speedup']:.2f}x | {'equal' if o64.extra['outputs_equal'] else 'DIFFER'} | "
                f"{o32.extra['tokens_per_s']:.1f} | {o32.extra['speedup']:.2f}x | "
                f"{'equal' if o32.extra['outputs_equal'] else 'differ'} | {share} |"
            )
    for r in rows:
        if r.section == "decode-fp32":
            out += ["", agreement_markdown(r.extra)]
    return "\n".join(out)


def run(quick: bool, report: Callable[[str], None]) -> list[Row]:
    """The speed table's rows, then the float32 agreement study as one row (``extra``)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report("decode: the optimized loop against the reference loop")
        rows = speed(quick, report)
        report("decode: float32 against float64, same tapes")
        pairs = exact_kernel_pairs()
        study = float32_agreement(
            pairs[:2] if quick else pairs, requests=2 if quick else 8, steps=4 if quick else 16, report=report
        )
        rows.append(
            Row("decode-fp32", "all", "optimized-fp32", "agreement", 0.0, study["compared"], extra=study)
        )
        return rows
    finally:
        torch.set_num_threads(n)


__all__ = [
    "agreement_markdown",
    "exact_kernel_pairs",
    "float32_agreement",
    "law_rounding",
    "markdown",
    "run",
    "speed",
]
