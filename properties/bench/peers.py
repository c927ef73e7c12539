"""Side by side on one GPU, in one process: the optimized kernels and their peers' kernels on the
same inputs, against the byte floor and the copy bandwidth measured in the same run.

Chains (token-level and block verification), for each size and dtype:

* ``optimized.token`` and ``optimized.block`` (the split paths on a GPU), plain launches and
  CUDA-graph replay (how a serving stack runs them);
* FlashInfer's ``sampling.chain_speculative_sampling`` (token-level, from probabilities);
* vLLM's V1 ``rejection_sample`` and its model runner V2 ``rejection_sample`` (token-level and
  block verification). vLLM's API takes target *logits*, so its time includes the softmax its
  function computes; it is fed ``log p`` so its law is the same;
* SGLang's Triton ``chain_speculative_sampling_triton`` (token-level and block verification).

Trees: ``optimized.target_only`` against SGLang's CUDA ``tree_speculative_sampling_target_only``
(the same rule with thresholds 1), and the other tree rules of this package on their own.

Every row reports the median time per call, the step's byte floor (from this package's output
for the same rule on the same inputs: the rules are lossless, so every engine's step has this
floor in law), time / floor time, and the ratio to this package's kernel for the same rule
(plain launches to plain launches). A peer that is not installed, needs CUDA, or whose call
fails is listed with the reason and never timed. vLLM's and SGLang's Triton files are executed
through the conformance adapters' loaders (no engine import).

``python -m specproof.properties.bench.peers --quick --device cpu`` is a smoke run of the same
code under the interpreter at a tiny size (no timings worth reading; peers are reported as
skipped with their reasons). ``specproof bench --section gpu`` runs it on a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from specproof.properties.bench.kernels import (
    _time,
    chain_inputs,
    copy_bandwidth,
    floor_bytes,
    floor_bytes_block,
    graphed,
)

SIZES_FULL = [
    (B, K, V)
    for V in (32000, 128256, 152064, 262144)
    for B, K in ((1, 1), (1, 8), (64, 4), (256, 1), (256, 4), (256, 8))
]
SIZES_QUICK = [(1, 8, 128256), (64, 4, 128256), (256, 8, 128256), (256, 8, 262144)]
TREES = {"binary depth 2 (N=7)": [-1, 0, 0, 1, 1, 2, 2], "chain (N=9)": [-1, 0, 1, 2, 3, 4, 5, 6, 7]}


@dataclass
class Result:
    rule: str
    engine: str
    shape: str
    dtype: str
    us: float | None  # median microseconds per call; None when not timed
    calls: int = 0
    floor_bytes: int | None = None
    x_floor: float | None = None
    x_ours: float | None = None  # time / this package's time for the same rule, plain launches
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def versions() -> dict[str, str]:
    """Versions of everything timed (``not installed`` for an absent peer)."""
    import importlib.metadata as md

    import triton

    out = {"python": sys.version.split()[0], "torch": torch.__version__, "triton": triton.__version__}
    for dist in ("flashinfer-python", "vllm", "sglang", "sgl-kernel", "specproof"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "not installed"
    if torch.cuda.is_available():
        out["device"] = torch.cuda.get_device_name()
        out["cuda"] = str(torch.version.cuda)
    return out


def _installed(dist: str) -> str | None:
    import importlib.metadata as md

    try:
        md.version(dist)
    except md.PackageNotFoundError:
        return f"{dist} is not installed"
    return None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    import numpy as np

    with np.errstate(invalid="ignore", divide="ignore"):
        yield


class Peer:
    """A peer's kernel bound to one input set; ``why`` says why it cannot run (None if it can)."""

    def __init__(self, rule: str, engine: str, note: str = "") -> None:
        self.rule, self.engine, self.note = rule, engine, note
        self.why: str | None = None
        self.call: Callable[[], Any] | None = None


def _needs_cuda(device: str) -> str | None:
    return None if device == "cuda" else "needs CUDA (its kernels exist only for CUDA)"


def flashinfer_chain(x, dp, tp, device: str) -> Peer:
    peer = Peer("token", "flashinfer chain_speculative_sampling", "from probabilities")
    peer.why = _installed("flashinfer-python") or _needs_cuda(device)
    if peer.why:
        return peer
    try:
        from flashinfer.sampling import chain_speculative_sampling as fn
    except Exception as e:  # an install whose JIT or import fails: say so
        peer.why = f"import failed ({type(e).__name__}: {str(e)[:120]})"
        return peer
    B, K = x.shape
    ids = x.to(torch.int32)
    params = inspect.signature(fn).parameters
    if "uniform_samples" in params:  # the older API takes the uniforms
        u = torch.rand(B, K + 1, device=device, dtype=torch.float32)
        peer.call = functools.partial(fn, dp, ids, u, tp)
    else:  # newer ones draw them (Philox) from a CUDA generator
        gen = torch.Generator(device=device).manual_seed(0)
        peer.call = functools.partial(fn, dp, ids, tp, generator=gen)
    return peer


def _vllm_modules() -> dict[str, Any]:
    from specproof.properties.conformance.backends.thirdparty import vllm as adapter

    return adapter._load()


def _vllm_module(peer: Peer, name: str) -> Any:
    """vLLM's module ``name`` loaded from its files, or None with ``peer.why`` saying why not."""
    peer.why = _installed("vllm")
    if peer.why:
        return None
    try:
        return _vllm_modules()[name]
    except Exception as e:
        peer.why = f"its files did not load ({type(e).__name__}: {str(e)[:120]})"
        return None


def vllm_v1(x, dp, tp, device: str) -> Peer:
    peer = Peer("token", "vllm V1 rejection_sample", "from logits: includes its softmax")
    rs = _vllm_module(peer, "vllm.v1.sample.rejection_sampler")
    if rs is None:
        return peer
    from types import SimpleNamespace

    B, K = x.shape
    V = tp.shape[-1]
    ids = x.to(torch.int32).reshape(-1).contiguous()
    cu = (torch.arange(1, B + 1, dtype=torch.int32, device=device) * K).contiguous()
    logits = torch.log(tp[:, :K].float()).reshape(B * K, V).contiguous()
    q = dp.float().reshape(B * K, V).contiguous()
    bonus = torch.zeros(B, 1, dtype=torch.int64, device=device)
    meta = SimpleNamespace(
        all_greedy=False,
        all_random=True,
        temperature=torch.ones(B, device=device),
        generators={},
    )
    peer.call = functools.partial(rs.rejection_sample, ids, [K] * B, K, cu, q, logits, bonus, meta)
    return peer


def vllm_mrv2(x, dp, tp, device: str, block_verification: bool) -> Peer:
    rule = "block" if block_verification else "token"
    peer = Peer(rule, f"vllm MRV2 rejection_sample{' [block]' if block_verification else ''}", "from logits")
    utils = _vllm_module(peer, "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils")
    if utils is None:
        return peer
    B, K = x.shape
    V = tp.shape[-1]
    S = K + 1
    logits = torch.log(tp.float()).reshape(B * S, V).contiguous()
    draft_logits = torch.log(dp.float()).contiguous()
    inputs = torch.cat([torch.zeros(B, 1, dtype=torch.int64, device=device), x], 1).reshape(-1)
    args = (
        logits,
        draft_logits,
        inputs.to(torch.int32),
        torch.arange(B + 1, dtype=torch.int32, device=device) * S,
        (17 + torch.arange(S, dtype=torch.int64, device=device)).repeat(B),
        torch.arange(B, dtype=torch.int32, device=device),
        torch.arange(B, dtype=torch.int32, device=device).repeat_interleave(S),
        torch.arange(S, dtype=torch.int32, device=device).repeat(B),
        torch.ones(B, dtype=torch.float32, device=device),
        torch.arange(B, dtype=torch.int64, device=device),
        K,
    )
    peer.call = functools.partial(utils.rejection_sample, *args, use_block_verification=block_verification)
    return peer


def sglang_chain(x, dp, tp, device: str, block_verification: bool) -> Peer:
    rule = "block" if block_verification else "token"
    peer = Peer(rule, f"sglang chain_speculative_sampling_triton{' [block]' if block_verification else ''}")
    peer.why = _installed("sglang")
    if peer.why:
        return peer
    try:
        from specproof.properties.conformance.backends.thirdparty import sglang as adapter

        kernels = adapter._kernels()
    except Exception as e:
        peer.why = f"its file did not load ({type(e).__name__}: {str(e)[:120]})"
        return peer
    B, K = x.shape
    S = K + 1
    predicts = torch.full((B * S,), -1, dtype=torch.int32, device=device)
    accept_index = torch.full((B, S), -1, dtype=torch.int32, device=device)
    accept_num = torch.zeros(B, dtype=torch.int32, device=device)
    candidates = torch.cat([torch.zeros(B, 1, dtype=torch.int64, device=device), x], 1).to(torch.int32)
    retrive = torch.arange(B * S, dtype=torch.int32, device=device).reshape(B, S)
    u = torch.rand(B, S, device=device)
    uf = torch.rand(B, device=device)
    args = (
        predicts,
        accept_index,
        accept_num,
        candidates,
        retrive,
        None,
        None,
        u,
        uf,
        tp.float(),
        dp.float(),
    )
    peer.call = functools.partial(
        kernels.chain_speculative_sampling_triton,
        *args,
        1.0,
        1.0,
        True,
        block_verification=block_verification,
    )
    return peer


def sglang_tree_target_only(parents, tokens, tp, device: str) -> Peer:
    peer = Peer("target_only", "sglang tree_speculative_sampling_target_only (CUDA)")
    peer.why = _installed("sglang") or _needs_cuda(device)
    if peer.why:
        return peer
    try:
        from specproof.properties.conformance.backends.thirdparty import sglang_cuda
        from specproof.properties.conformance.backends.thirdparty.sglang import tree_links

        fn = sglang_cuda._kernel()
    except Exception as e:
        peer.why = f"import failed ({type(e).__name__}: {str(e)[:120]})"
        return peer
    B, N = parents.shape
    first_child, next_sibling, depth = tree_links(parents.cpu())
    S = depth + 1
    p = tp.float().contiguous()
    kw = dict(
        predicts=torch.full((B * N,), -1, dtype=torch.int32, device=device),
        accept_index=torch.full((B, S), -1, dtype=torch.int32, device=device),
        accept_token_num=torch.zeros(B, dtype=torch.int32, device=device),
        candidates=tokens.to(device, torch.int64),
        retrive_index=torch.arange(B * N, dtype=torch.long, device=device).reshape(B, N),
        retrive_next_token=first_child.to(device),
        retrive_next_sibling=next_sibling.to(device),
        uniform_samples=torch.rand(B, N, device=device),
        uniform_samples_for_final_sampling=torch.rand(B, device=device),
        target_probs=p,
        draft_probs=torch.zeros_like(p),
        threshold_single=1.0,
        threshold_acc=1.0,
        deterministic=True,
    )
    peer.call = functools.partial(fn, **kw)
    return peer


def _timeit(call: Callable[[], Any], on_gpu: bool, seconds: float) -> tuple[float, int]:
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    with _quiet():
        return _time(call, 10 if on_gpu else 1, seconds if on_gpu else 0.0, sync)


def chain_rows(
    B: int, K: int, V: int, dtype: torch.dtype, device: str, bw: float | None, seconds: float, report
) -> list[Result]:
    from specproof.optimized import block, token

    on_gpu = device == "cuda"
    x, dp, tp = chain_inputs(B, K, V, dtype, device)
    ua = torch.rand(B, K + 1, dtype=torch.float64, device=device)
    uf = torch.rand(B, dtype=torch.float64, device=device)
    elt = tp.element_size()
    shape, dname = f"B={B} K={K} V={V}", str(dtype).split(".")[-1]
    small: dict[str, Any] = {} if on_gpu else {"path": "split", "chunk": 16, "block": 8}
    ours = {
        "token": functools.partial(token, validate=False, **small),
        "block": functools.partial(block, validate=False, **small),
    }
    rows: list[Result] = []
    base: dict[str, float] = {}
    floors: dict[str, int] = {}
    for rule, fn in ours.items():
        out = fn(x, dp, tp, ua, uf)
        floors[rule] = (
            floor_bytes(out, K, V, elt, True) if rule == "token" else floor_bytes_block(out, K, V, elt)
        )
        variants: list[tuple[str, Callable[[], Any]]] = [
            (f"optimized.{rule}", functools.partial(fn, x, dp, tp, ua, uf))
        ]
        if on_gpu:
            try:
                variants.append((f"optimized.{rule}, CUDA graph", graphed(fn, (x, dp, tp, ua, uf))))
            except Exception as e:  # report, do not hide
                report(f"  {rule}: CUDA graph capture failed ({type(e).__name__}: {e})")
        for name, call in variants:
            sec, n = _timeit(call, on_gpu, seconds)
            base.setdefault(rule, sec)
            rows.append(_row(rule, name, shape, dname, sec, n, floors[rule], bw, base[rule]))
    peers = [
        flashinfer_chain(x, dp, tp, device),
        vllm_v1(x, dp, tp, device),
        vllm_mrv2(x, dp, tp, device, False),
        vllm_mrv2(x, dp, tp, device, True),
        sglang_chain(x, dp, tp, device, False),
        sglang_chain(x, dp, tp, device, True),
    ]
    for peer in peers:
        rows.append(_run_peer(peer, shape, dname, floors[peer.rule], bw, base[peer.rule], on_gpu, seconds))
    for r in rows:
        report("  " + line(r))
    del x, dp, tp
    if on_gpu:
        torch.cuda.empty_cache()
    return rows


def _row(rule, name, shape, dname, sec, n, fb, bw, base, note="") -> Result:
    """``bw`` None (no GPU): no floor ratio, the interpreter's times say nothing about bytes."""
    x_floor = None if bw is None else sec / (fb / bw)
    extra = {} if bw is None else {"of_copy_bw": fb / sec / bw}
    return Result(rule, name, shape, dname, sec * 1e6, n, fb, x_floor, sec / base, note, extra)


def _run_peer(peer: Peer, shape, dname, fb, bw, base, on_gpu, seconds) -> Result:
    if peer.why is None and peer.call is not None:
        try:
            sec, n = _timeit(peer.call, on_gpu, seconds)
            return _row(peer.rule, peer.engine, shape, dname, sec, n, fb, bw, base, peer.note)
        except Exception as e:  # an API that changed, a dtype it refuses: say so, do not guess
            peer.why = f"call failed ({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})"
    return Result(peer.rule, peer.engine, shape, dname, None, note=f"not timed: {peer.why}")


def tree_rows(
    B: int, V: int, dtype: torch.dtype, device: str, bw: float | None, seconds: float, report
) -> list[Result]:
    from specproof.optimized import greedy, mss, rrs, target_only
    from specproof.properties.bench.kernels import _laws

    on_gpu = device == "cuda"
    small: dict[str, Any] = {} if on_gpu else {"path": "split", "chunk": 16, "block": 8}
    rows: list[Result] = []
    dname = str(dtype).split(".")[-1]
    for tname, par_list in TREES.items():
        N = len(par_list)
        gen = torch.Generator(device=device).manual_seed(0)
        tp = _laws(gen, (B, N, V), dtype, device)
        dp = _laws(gen, (B, N, V), dtype, device)
        parents = torch.tensor(par_list, device=device).expand(B, N).contiguous()
        # node c's token drawn from its parent's draft law, siblings without replacement
        draws = torch.multinomial(dp.reshape(B * N, V).float(), N, generator=gen).reshape(B, N, N)
        rows_ = torch.arange(B, device=device)[:, None]
        tokens = draws[rows_, parents.clamp(min=0), torch.arange(N, device=device)[None, :]]
        ua = torch.rand(B, N, dtype=torch.float64, device=device)
        uf = torch.rand(B, dtype=torch.float64, device=device)
        shape = f"B={B} {tname} V={V}"
        elt = tp.element_size()
        calls = {
            "target_only": functools.partial(target_only, parents, tokens, tp, ua, uf, **small),
            "mss": functools.partial(mss, parents, tokens, dp, tp, ua, uf, **small),
            "rrs": functools.partial(rrs, parents, tokens, dp, tp, ua, uf, **small),
            "greedy": functools.partial(greedy, parents, tokens, tp, **small),
        }
        base: dict[str, float] = {}
        tfloor = 1
        for rule, call in calls.items():
            acc, _ = call()
            visited = int((acc >= 0).sum())  # one row read per visited node (a floor's lower bound)
            fb = visited * V * elt
            sec, n = _timeit(call, on_gpu, seconds)
            base[rule] = sec
            tfloor = fb if rule == "target_only" else tfloor
            rows.append(
                _row(
                    rule,
                    f"optimized.{rule}",
                    shape,
                    dname,
                    sec,
                    n,
                    fb,
                    bw,
                    sec,
                    "floor: one row per visited node",
                )
            )
        peer = sglang_tree_target_only(parents, tokens, tp, device)
        rows.append(_run_peer(peer, shape, dname, tfloor, bw, base["target_only"], on_gpu, seconds))
        for r in rows[-5:]:
            report("  " + line(r))
    return rows


def line(r: Result) -> str:
    if r.us is None:
        return f"{r.rule:11s} {r.engine:52s} {r.shape:28s} {r.dtype:9s} {r.note}"
    xf = "" if r.x_floor is None else f"{r.x_floor:7.2f}x floor "
    return f"{r.rule:11s} {r.engine:52s} {r.shape:28s} {r.dtype:9s} {r.us:10.1f} us {xf}{r.x_ours:7.2f}x ours"


def run(
    quick: bool = False,
    device: str | None = None,
    report: Callable[[str], None] = print,
    seconds: float = 0.25,
    jsonl: str | None = None,
) -> tuple[dict[str, Any], list[Result]]:
    """Every side-by-side row; ``jsonl``: append each row as it is measured (a run cut short
    keeps what it measured)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    on_gpu = device == "cuda"
    env = versions()
    bw = copy_bandwidth(device) if on_gpu else None
    env["copy_GB_per_s"] = f"{bw / 1e9:.0f}" if bw is not None else "not measured (no GPU)"
    where = env.get("device", "CPU (interpreter smoke run)")
    report(f"side by side on {where}; copy bandwidth {env['copy_GB_per_s']}")
    report("  " + ", ".join(f"{k} {v}" for k, v in env.items()))
    sizes = (SIZES_QUICK if quick else SIZES_FULL) if on_gpu else [(2, 2, 40)]
    dtypes = (torch.float32, torch.bfloat16)
    results: list[Result] = []
    sink = open(jsonl, "a") if jsonl else None  # noqa: SIM115
    try:
        if sink:
            sink.write(json.dumps({"env": env}) + "\n")
        for B, K, V in sizes:  # both dtypes of a size back to back: a time limit cuts sizes, not a dtype
            for dtype in dtypes:
                t0 = time.perf_counter()
                new = chain_rows(B, K, V, dtype, device, bw, seconds, report)
                results += new
                if sink:
                    sink.writelines(json.dumps(asdict(r)) + "\n" for r in new)
                    sink.flush()
                report(f"  ({time.perf_counter() - t0:.1f} s)")
        tree_sizes = [(256, 128256)] if quick else [(1, 128256), (64, 128256), (256, 128256), (256, 152064)]
        for B, V in tree_sizes if on_gpu else [(2, 40)]:
            for dtype in dtypes:
                new = tree_rows(B, V, dtype, device, bw, seconds, report)
                results += new
                if sink:
                    sink.writelines(json.dumps(asdict(r)) + "\n" for r in new)
                    sink.flush()
    finally:
        if sink:
            sink.close()
    return env, results


def markdown(env: dict[str, Any], results: list[Result]) -> str:
    head = [
        "Side by side in one process (`python -m specproof.properties.bench.peers`); "
        + ", ".join(f"{k} {v}" for k, v in env.items()),
        "",
        "| rule | shape | dtype | engine | us / call | time / floor time | time / ours | note |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    for r in results:
        if r.us is None:
            head.append(f"| {r.rule} | {r.shape} | {r.dtype} | {r.engine} | | | | {r.note} |")
        else:
            xf = "" if r.x_floor is None else f"{r.x_floor:.2f}x"
            cells = [r.rule, r.shape, r.dtype, r.engine, f"{r.us:.1f}", xf, f"{r.x_ours:.2f}x", r.note]
            head.append("| " + " | ".join(cells) + " |")
    return "\n".join(head)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specproof.properties.bench.peers")
    ap.add_argument("--quick", action="store_true", help="four chain sizes and one tree size")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when present")
    ap.add_argument("--seconds", type=float, default=0.25, help="timing per measurement (default 0.25)")
    ap.add_argument("--markdown", metavar="PATH")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--jsonl", metavar="PATH", help="append each row as measured")
    args = ap.parse_args(argv)
    env, results = run(args.quick, args.device, seconds=args.seconds, jsonl=args.jsonl)
    table = markdown(env, results)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "rows": [asdict(r) for r in results]}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
