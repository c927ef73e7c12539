"""Does a correct engine reach ``pass`` at the defaults, within the default budget? Each exact
engine audited at the engine audit's default plan (per-token TV 0.01, alpha 1e-4, power 0.99,
the 600 s guard), two cases each (one prompt at T = 1 and 0.7, as a factory is audited unless
told otherwise), one after the other, each in a process of its own (its peak memory its own):

* ``tinylm``: the one-layer attention engine of docs/examples/engines/tinylm.py (flat KV cache,
  token-level speculative sampling, four drafts a step) at V = 512 (M = 64 and 256), V = 4,096
  (M = 32 and 256) and V = 32,768 (M = 64);
* ``narrow``: properties/engine/narrow.py at V = 512 and 32,768 (M = 64);
* the endpoint audit at its defaults (M = 64, T = 1 and 0.7) of the project's correct stand-in
  server against its speculation-off twin (each served by ``specproof standin`` in a process of
  its own, as a user starts a server: the peak memory is the audit's), and of llama-server (the
  pinned build, its draft model) against its twin, where the build is there.

    python scripts/plan_fits.py --markdown docs/measurements/plan-fits.md \\
        --json docs/measurements/plan-fits.json

``--only KIND`` with ``--update`` runs those rows again and keeps the others from the JSON, each
row with the date it was measured.

Timings are this machine's; run it on idle cores (nothing else running).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import resource
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINES = os.path.join(HERE, "..", "docs", "examples", "engines")

#: (V, M) of each engine's rows
SIZES = {
    "tinylm": [(512, 64), (512, 256), (4096, 32), (4096, 256), (32768, 64)],
    "narrow": [(512, 64), (32768, 64)],
}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _row(name: str, res: Any, seconds: float) -> dict[str, Any]:
    return {
        "engine": name,
        "verdict": res.verdict.value,
        "cases": len(res.cases),
        "tokens": res.tokens,
        "vocab": res.vocab,
        "samples": res.samples,
        "scored_tokens": sum(c.observed_tokens for c in res.cases),
        "planned_samples": sum(c.planned for c in res.cases),
        "seconds": seconds,
        "peak_rss_mb": _peak_mb(),
        "fit": res.fit,
        "summary": res.summary(),
        "date": datetime.date.today().isoformat(),
    }


def tinylm_spec(vocab: int, tokens: int) -> Any:
    sys.path.insert(0, ENGINES)
    import tinylm  # the user's engine, as docs/examples has it

    from specproof import EngineSpec, Sampling

    def build(sampling: Sampling) -> Any:
        target = tinylm.AttentionLM(vocab, seed=1)
        return tinylm.Speculative(target, target.draft_of(0.25, seed=2), temperature=sampling.temperature)

    return EngineSpec(
        f"tinylm[V={vocab}]", "user", "tinylm.Speculative", build, vocab, ((3, 17, 5),),
        (Sampling(1.0), Sampling(0.7)), tokens=tokens,
    )  # fmt: skip


def _plan(tv: float | None) -> Any:
    from specproof.properties.engine.config import EngineAuditConfig

    return EngineAuditConfig() if tv is None else EngineAuditConfig(tv=tv)


def engine_row(kind: str, vocab: int, tokens: int, tv: float | None = None) -> dict[str, Any]:
    from specproof.properties.engine.audit import audit_engine
    from specproof.properties.engine.narrow import narrow_spec

    spec = tinylm_spec(vocab, tokens) if kind == "tinylm" else narrow_spec(vocab, tokens)
    t0 = time.perf_counter()
    res = audit_engine(spec, _plan(tv))
    return _row(f"{kind}[V={vocab}] M={tokens}", res, time.perf_counter() - t0)


def standin_row(tv: float | None = None) -> dict[str, Any]:
    """The correct stand-in and its twin, each served by ``specproof standin`` in a process of its
    own (as a user starts a server), audited from this process."""
    import contextlib
    import subprocess

    from specproof.properties.engine.request import EngineRequest
    from specproof.properties.run import EndpointOptions, run_endpoint

    def server(*flags: str) -> Any:
        cmd = [sys.executable, "-m", "specproof.properties.cli", "standin", *flags]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        return proc, proc.stdout.readline().strip()

    with contextlib.ExitStack() as stack:
        urls = []
        for flags in ((), ("--no-speculation",)):
            proc, url = server(*flags)
            stack.callback(proc.wait, 30)
            stack.callback(proc.terminate)
            if not url.startswith("http://"):
                raise RuntimeError(f"specproof standin {' '.join(flags)} printed no URL")
            urls.append(url)
        server_url, twin_url = urls
        t0 = time.perf_counter()
        options = EndpointOptions((server_url,), "llamacpp", twin=twin_url)
        res = run_endpoint(options, EngineRequest(), _plan(tv))
        return _row("stand-in (correct) against its twin", res, time.perf_counter() - t0)


def llama_server_row(tv: float | None = None) -> dict[str, Any]:
    import tempfile

    from specproof.properties.engine.request import EngineRequest
    from specproof.properties.measure import llamacpp_suite as suite
    from specproof.properties.run import EndpointOptions, run_endpoint
    from specproof.properties.servers import gguf_models, llamacpp

    binary = llamacpp.ensure_built(progress=lambda m: None)
    with tempfile.TemporaryDirectory() as tmp:
        files = suite.models(tmp)
        spec = ("--spec-draft-n-max", "4")
        with (
            llamacpp.start_server(binary, files["target"], draft=files["draft"], extra_args=spec) as url,
            llamacpp.start_server(binary, files["target"]) as twin,
        ):
            request = EngineRequest(prompts=((1, 2),), token_map=tuple(gguf_models.VOCAB))
            t0 = time.perf_counter()
            res = run_endpoint(EndpointOptions((url,), "llamacpp", twin=twin), request, _plan(tv))
            return _row("llama-server (draft model) against its twin", res, time.perf_counter() - t0)


def _apart(fn: Any, *args: Any) -> dict[str, Any]:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def markdown(rows: list[dict[str, Any]], when: str) -> str:
    out = [
        "# A correct engine at the defaults",
        "",
        f"`python scripts/plan_fits.py` ({platform.machine()}, {os.cpu_count()} cores, nothing else "
        "running; each row on the date in its last column, this page written on " + when + "): each exact "
        "engine audited at the default plan (per-token TV 0.01, alpha 1e-4, power 0.99, 600 s guard), two "
        "cases (T = 1 and 0.7), each in a process of its own.",
        "",
        "| engine | M | V | verdict | tokens scored | samples | seconds | peak MB | measured |",
        "|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['engine']} | | | not run: {r['error']} | | | | | {r.get('date', '')} |")
            continue
        out.append(
            f"| {r['engine']} | {r['tokens']} | {r['vocab']:,} | **{r['verdict']}** | {r['scored_tokens']:,} "
            f"| {r['samples']:,} | {r['seconds']:.0f} | {r['peak_rss_mb']:.0f} | {r.get('date', when)} |"
        )
    fits = [r for r in rows if r.get("fit")]
    if fits:
        out += ["", "Where the probe said the plan would not fit, what the audit said before sampling:", ""]
        out += [f"* {r['engine']} (then {r['verdict']} in {r['seconds']:.0f} s): {r['fit']}" for r in fits]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="tinylm, narrow, standin or llama-server (repeatable)")
    ap.add_argument("--tv", type=float, help="a per-token TV other than the default's (a smoke run)")
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    ap.add_argument("--update", action="store_true", help="keep the JSON's rows that are not run again")
    ap.add_argument("--rows", help="just the rows whose name contains one of these (comma-separated)")
    args = ap.parse_args(argv)
    want = set(args.only or ("tinylm", "narrow", "standin", "llama-server"))
    rows: list[dict[str, Any]] = []
    jobs: list[tuple[str, Any, tuple[Any, ...]]] = []
    for kind in ("tinylm", "narrow"):
        if kind in want:
            jobs += [(f"{kind}[V={v}] M={m}", engine_row, (kind, v, m, args.tv)) for v, m in SIZES[kind]]
    if "standin" in want:
        jobs.append(("stand-in", standin_row, (args.tv,)))
    if "llama-server" in want:
        jobs.append(("llama-server", llama_server_row, (args.tv,)))
    if args.rows:
        jobs = [j for j in jobs if any(part in j[0] for part in args.rows.split(","))]
    for label, fn, a in jobs:
        try:
            row = _apart(fn, *a)
        except Exception as e:  # a row that cannot run says why
            row = {"engine": label, "error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "summary"}), flush=True)
    when = datetime.date.today().isoformat()
    if args.update and args.json and os.path.exists(args.json):
        with open(args.json) as f:
            old = json.load(f)
        fresh = {r["engine"]: r for r in rows}
        kept = [dict(r, date=r.get("date", old["date"])) for r in old["rows"]]
        rows = [fresh.pop(r["engine"], r) for r in kept] + list(fresh.values())
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": when, "rows": rows}, f, indent=2)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(rows, when))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
