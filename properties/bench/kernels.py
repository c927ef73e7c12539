"""``specproof bench``: the optimized engine's speed, measured side by side in one run.

CPU (always): each rule's optimized kernel (the Triton interpreter when there is no GPU)
against a straightforward batched PyTorch implementation of the same rule where one exists
(``torch.token``, ``torch.block`` of :mod:`specproof.properties.conformance.backends.torch_chain`) and
against the reference (pure Python, row by row), on the same inputs, reported as time per call
and ratios to the batched PyTorch (or reference) time; plus the audit's throughput in verified
steps per second for the same three engines.

GPU (when CUDA is present): chain verification at realistic sizes, with the bytes each call
must move (the floor: gathered ``p(x_i)``, ``q(x_i)``, and one full row per batch row where
its step stops, counted from the actual outputs) over the measured time, against the device's
copy bandwidth measured in the same run, for the split paths (the GPU default) and the
one-program-per-row paths; then the side by side of :mod:`.peers` (FlashInfer, vLLM and
SGLang on the same inputs, versions recorded).

Speed is never asserted in a test: this command and ``tox -e bench`` (pytest-benchmark) only
measure.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch


@dataclass
class Row:
    section: str
    rule: str
    engine: str
    shape: str
    ms_per_call: float
    calls: int
    ratio: float | None = None  # time / time of the baseline engine of the same shape
    baseline: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _time(
    fn: Callable[[], Any], min_calls: int, min_seconds: float, sync: Callable[[], None]
) -> tuple[float, int]:
    """Median seconds per call over at least ``min_calls`` calls and ``min_seconds``."""
    fn()  # warm-up (compilation, caches)
    sync()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
        if len(times) >= 1000:
            break
    return statistics.median(times), len(times)


def _laws(gen: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    w = torch.rand(shape, generator=gen, device=device, dtype=torch.float32) ** 4
    t = (w / w.sum(-1, keepdim=True)).to(dtype)
    return (t.float() / t.float().sum(-1, keepdim=True)).to(dtype)


def chain_inputs(
    B: int, K: int, V: int, dtype: torch.dtype = torch.float32, device: str = "cpu", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random laws generated on ``device``, a draft close to the target (so acceptance is
    realistic: neither always nor never) and drafts sampled from it."""
    gen = torch.Generator(device=device).manual_seed(seed)
    tp = _laws(gen, (B, K + 1, V), dtype, device)
    mix = 0.7 * tp[:, :K].float() + 0.3 * _laws(gen, (B, K, V), torch.float32, device)
    dp = (mix / mix.sum(-1, keepdim=True)).to(dtype)
    dp = (dp.float() / dp.float().sum(-1, keepdim=True)).to(dtype)
    x = torch.multinomial(dp.reshape(B * K, V).float(), 1, generator=gen).reshape(B, K)
    return x, dp, tp


def tree_inputs(B: int, parents: list[int], V: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    N = len(parents)
    tp = _laws(gen, (B, N, V), torch.float32, "cpu")
    dp = _laws(gen, (B, N, V), torch.float32, "cpu")
    tokens = torch.zeros(B, N, dtype=torch.int64)
    for c in range(1, N):
        tokens[:, c] = torch.multinomial(dp[:, parents[c]], 1, generator=gen).squeeze(1)
    return torch.tensor(parents).expand(B, N).contiguous(), tokens, dp, tp


def cpu_section(quick: bool, report: Callable[[str], None]) -> list[Row]:
    from specproof.properties.conformance.backends import REGISTRY

    rows: list[Row] = []
    min_calls, min_s = (2, 0.5) if quick else (3, 2.0)
    chain_shapes = [(8, 4, 128)] if quick else [(8, 4, 128), (32, 8, 1000)]
    for rule in ("token", "block"):
        for B, K, V in chain_shapes:
            x, dp, tp = chain_inputs(B, K, V)
            shape = f"B={B} K={K} V={V}"
            engines = {
                "torch (batched)": REGISTRY[("chain", f"torch.{rule}")].fn,
                "optimized (Triton)": REGISTRY[("chain", f"optimized.{rule}")].fn,
                "reference (Python)": REGISTRY[("chain", f"reference.{rule}")].fn,
            }
            base = None
            for name, fn in engines.items():
                g = torch.Generator().manual_seed(0)
                sec, n = _time(functools.partial(fn, x, dp, tp, g), min_calls, min_s, lambda: None)
                base = sec if base is None else base
                rows.append(Row("cpu", rule, name, shape, sec * 1e3, n, sec / base, "torch (batched)"))
                report(f"  cpu {rule:12s} {name:20s} {shape:18s} {sec * 1e3:10.2f} ms/call")
    tree = [-1, 0, 0, 1, 1, 2, 2]  # binary, depth 2
    tB, tV = (8, 128) if quick else (32, 1000)
    par, tok, dp, tp = tree_inputs(tB, tree, tV)
    for rule in ("mss", "rrs", "target_only", "greedy", "typical"):
        shape = f"B={tB} N={len(tree)} V={tV}"
        base = None
        for name, key in (("reference (Python)", "reference"), ("optimized (Triton)", "optimized")):
            fn = REGISTRY[("tree", f"{key}.{rule}")].fn
            g = torch.Generator().manual_seed(0)
            sec, n = _time(functools.partial(fn, par, tok, dp, tp, g), min_calls, min_s, lambda: None)
            base = sec if base is None else base
            rows.append(Row("cpu", rule, name, shape, sec * 1e3, n, sec / base, "reference (Python)"))
            report(f"  cpu {rule:12s} {name:20s} {shape:18s} {sec * 1e3:10.2f} ms/call")
    return rows


def audit_throughput(quick: bool, report: Callable[[str], None]) -> list[Row]:
    """Verified steps per second of the audit (contract checks, sampling, test) per engine."""
    from specproof.properties.audit.battery import chain_battery
    from specproof.properties.audit.stages import AuditConfig, audit
    from specproof.properties.conformance.backends import REGISTRY

    case = [c for c in chain_battery() if c.name == "iid/K4/V8"]
    rows = []
    for name, samples in (("torch.token", 20000), ("reference.token", 2000), ("optimized.token", 200)):
        if quick:
            samples = max(50, samples // 10)
        r = audit(REGISTRY[("chain", name)], AuditConfig(samples=samples, cases=case))
        steps = sum(c.n for c in r.cases)
        rate = steps / r.seconds
        rows.append(
            Row("audit", "token", name, "iid/K4/V8", r.seconds * 1e3, steps, extra={"steps_per_s": rate})
        )
        report(f"  audit {name:20s} {steps:7d} steps in {r.seconds:6.1f} s: {rate:9.1f} steps/s")
    base = rows[0].extra["steps_per_s"]
    for row in rows:
        row.ratio = base / row.extra["steps_per_s"]
        row.baseline = "torch.token"
    return rows


def copy_bandwidth(device: str, nbytes: int = 1 << 30) -> float:
    """Bytes per second of a device-to-device copy (read + write counted)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    sec, _ = _time(lambda: dst.copy_(src), 5, 0.5, torch.cuda.synchronize)
    return 2 * nbytes / sec


def floor_bytes(out: torch.Tensor, K: int, V: int, elt: int, has_q: bool) -> int:
    """Bytes a chain step must move: gathered p(x_i) (and q(x_i)) of the tested drafts, the full
    p row (and q row for a residual) where the step stops, and the output."""
    lengths = (out >= 0).sum(1) - 1  # accepted drafts
    tested = torch.clamp(lengths + 1, max=K)
    residual = lengths < K
    per_value = 2 if has_q else 1
    gathered = int(tested.sum()) * per_value * elt
    rows = int(residual.sum()) * per_value * V * elt + int((~residual).sum()) * V * elt
    return gathered + rows + out.numel() * 8


def floor_bytes_block(out: torch.Tensor, K: int, V: int, elt: int) -> int:
    """Block verification must read the gathered values, rows tau..K-1 of p and q in full (each
    h_i with i < K needs Z_{i+1}), and p_K for a bonus draw; the residual at tau reuses row tau."""
    tau = (out >= 0).sum(1) - 1
    rows = int((K - tau).sum()) * 2 * V * elt + int((tau == K).sum()) * V * elt
    return out.shape[0] * K * 2 * elt + rows + out.numel() * 8


def graphed(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], Any]:
    """``fn(*args)`` captured in a CUDA graph (as a serving stack runs it): replay costs no
    Python or launch overhead, so its time is the kernels' own."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # compile and warm up outside the capture
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*args)
    return graph.replay


def gpu_section(
    quick: bool,
    report: Callable[[str], None],
    device: str = "cuda",
    sizes: list[tuple[int, int, int]] | None = None,
) -> list[Row]:
    """The GPU tables (``device`` and ``sizes`` exist so a CPU dry run can exercise the code)."""
    from specproof.optimized import block, token

    rows: list[Row] = []
    on_gpu = device == "cuda"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    bw = copy_bandwidth(device) if on_gpu else 1e12
    report(f"  copy bandwidth: {bw / 1e9:.0f} GB/s")
    rows.append(Row("gpu", "copy", "torch copy_", "1 GiB", 0.0, 0, extra={"GB_per_s": bw / 1e9}))
    sizes = sizes or (
        [(256, 8, 128256)]
        if quick
        else [(1, 4, 32000), (64, 4, 32000), (256, 8, 32000), (256, 8, 128256), (256, 8, 152064)]
    )
    for dtype in (torch.float32, torch.bfloat16):
        for B, K, V in sizes:
            x, dp, tp = chain_inputs(B, K, V, dtype, device)
            ua = torch.rand(B, K + 1, dtype=torch.float64, device=device)
            uf = torch.rand(B, dtype=torch.float64, device=device)
            elt = tp.element_size()
            shape = f"B={B} K={K} V={V} {str(dtype).split('.')[-1]}"
            variants: list[tuple[str, str, Callable[..., torch.Tensor]]] = [
                ("token", "optimized, auto path", functools.partial(token, validate=False)),
                (
                    "token",
                    "optimized, one program per row",
                    functools.partial(token, validate=False, path="row"),
                ),
                ("block", "optimized, auto path", functools.partial(block, validate=False)),
                (
                    "block",
                    "optimized, one program per row",
                    functools.partial(block, validate=False, path="row"),
                ),
            ]
            big = (B == 256 and V >= 128256) or not on_gpu
            if big:
                variants.append(("token", "optimized, auto path, inputs validated", token))
            for rule, name, fn in variants:
                out = fn(x, dp, tp, ua, uf)
                if rule == "token":
                    fb = floor_bytes(out, K, V, elt, True)
                else:
                    fb = floor_bytes_block(out, K, V, elt)
                timed: list[tuple[str, Callable[[], Any]]] = [
                    (name, functools.partial(fn, x, dp, tp, ua, uf))
                ]
                if big and on_gpu and "validated" not in name:
                    try:
                        timed.append((name + ", CUDA graph", graphed(fn, (x, dp, tp, ua, uf))))
                    except Exception as e:  # report, do not hide
                        report(f"  gpu {rule} {name}: CUDA graph capture failed ({type(e).__name__}: {e})")
                for label, call in timed:
                    sec, n = _time(call, 10, 1.0 if on_gpu else 0.0, sync)
                    floor_s = fb / bw
                    extra = {"floor_bytes": fb, "of_copy_bw": (fb / sec) / bw, "x_floor": sec / floor_s}
                    rows.append(Row("gpu", rule, label, shape, sec * 1e3, n, extra=extra))
                    report(
                        f"  gpu {rule:6s} {label:52s} {shape:28s} {sec * 1e6:9.1f} us"
                        f"  floor {fb / 1e6:8.2f} MB  {extra['x_floor']:6.2f}x floor"
                    )
            del x, dp, tp
            if on_gpu:
                torch.cuda.empty_cache()
    return rows


def peers_section(quick: bool, report: Callable[[str], None]) -> list[Row]:
    """The side by side with FlashInfer, vLLM and SGLang (:mod:`.peers`), as bench rows."""
    from specproof.properties.bench import peers as bench_peers

    env, results = bench_peers.run(quick, report=report)
    rows = [Row("peers", "env", "versions", "", 0.0, 0, extra=env)]
    for r in results:
        extra = {k: v for k, v in asdict(r).items() if k not in ("rule", "engine", "calls")}
        ms = r.us / 1e3 if r.us is not None else float("nan")
        rows.append(
            Row("peers", r.rule, r.engine, f"{r.shape} {r.dtype}", ms, r.calls, r.x_ours, "ours", extra)
        )
    return rows


def markdown(rows: list[Row]) -> str:
    out = []
    cpu = [r for r in rows if r.section == "cpu"]
    if cpu:
        out += ["| rule | shape | engine | ms / call | ratio |", "|---|---|---|---:|---:|"]
        for r in cpu:
            ratio = f"{r.ratio:.2f}x {r.baseline}" if r.ratio is not None else ""
            out.append(f"| {r.rule} | {r.shape} | {r.engine} | {r.ms_per_call:.2f} | {ratio} |")
    aud = [r for r in rows if r.section == "audit"]
    if aud:
        out += [
            "",
            "| audit of | case | steps | steps / s | slower than torch.token |",
            "|---|---|---:|---:|---:|",
        ]
        for r in aud:
            out.append(
                f"| {r.engine} | {r.shape} | {r.calls} | {r.extra['steps_per_s']:.1f} | {r.ratio:.0f}x |"
            )
    gpu = [r for r in rows if r.section == "gpu"]
    if gpu:
        out += [
            "",
            "| rule | shape | engine | us / call | floor MB | time / floor time | of copy bandwidth |",
            "|---|---|---|---:|---:|---:|---:|",
        ]
        for r in gpu:
            if r.rule == "copy":
                out.append(f"| copy | 1 GiB | torch | | | | {r.extra['GB_per_s']:.0f} GB/s |")
                continue
            e = r.extra
            fb = f"{e['floor_bytes'] / 1e6:.2f}" if "floor_bytes" in e else ""
            xf = f"{e['x_floor']:.2f}x" if "x_floor" in e else ""
            bwf = f"{e['of_copy_bw']:.1%}" if "of_copy_bw" in e else ""
            out.append(
                f"| {r.rule} | {r.shape} | {r.engine} | {r.ms_per_call * 1e3:.1f} | {fb} | {xf} | {bwf} |"
            )
    peers = [r for r in rows if r.section == "peers"]
    if peers:
        from specproof.properties.bench import peers as bench_peers

        env = peers[0].extra
        results = [
            bench_peers.Result(r.rule, r.engine, **{k: v for k, v in r.extra.items()}, calls=r.calls)
            for r in peers[1:]
        ]
        out += ["", bench_peers.markdown(env, results)]
    if any(r.section.startswith("decode") for r in rows):
        from specproof.properties.bench import decode as bench_decode

        out += ["", bench_decode.markdown([r for r in rows if r.section.startswith("decode")])]
    if any(r.section == "endpoint" for r in rows):
        from specproof.properties.bench import endpoint as bench_endpoint

        out += ["", bench_endpoint.markdown([r for r in rows if r.section == "endpoint"])]
    if any(r.section == "shard" for r in rows):
        from specproof.properties.bench import shard as bench_shard

        out += ["", bench_shard.markdown([r for r in rows if r.section == "shard"])]
    if any(r.section == "tokens" for r in rows):
        from specproof.properties.bench import tokens as bench_tokens

        out += ["", bench_tokens.markdown([r for r in rows if r.section == "tokens"])]
    return "\n".join(out)


def run(quick: bool = False, sections: tuple[str, ...] = ("cpu", "audit", "gpu"), report=print) -> list[Row]:
    rows: list[Row] = []
    if "cpu" in sections:
        report("CPU: optimized engine vs batched PyTorch vs reference")
        rows += cpu_section(quick, report)
    if "audit" in sections:
        report("audit throughput")
        rows += audit_throughput(quick, report)
    if "gpu" in sections:
        if torch.cuda.is_available():
            report("GPU: bandwidth against the byte floor")
            rows += gpu_section(quick, report)
            report("GPU: side by side with FlashInfer, vLLM and SGLang")
            rows += peers_section(quick, report)
        else:
            report("GPU: skipped (no CUDA device)")
    if "decode" in sections:
        from specproof.properties.bench import decode as bench_decode

        rows += bench_decode.run(quick, report)
    if "endpoint" in sections:
        from specproof.properties.bench import endpoint as bench_endpoint

        rows += bench_endpoint.run(quick, report)
    if "shard" in sections:
        from specproof.properties.bench import shard as bench_shard

        rows += bench_shard.run(quick, report)
    if "tokens" in sections:
        from specproof.properties.bench import tokens as bench_tokens

        rows += bench_tokens.run(quick, report)
    return rows


def to_json(rows: list[Row]) -> str:
    env = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
    return json.dumps({"env": env, "rows": [asdict(r) for r in rows]}, indent=2)
