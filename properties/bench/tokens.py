"""``specproof bench --section tokens``: the token test's own cost beside the engine's, at real
vocabularies, and its peak memory.

**Overhead.** For V = 512, 32,768 and 151,936, with and without ``target_laws_along``, the narrow
engine of :mod:`specproof.properties.engine.narrow` (one prompt, T = 1, M = 64), and with laws
along the path at twice its logit scale (laws as sharp as a chat model's, :data:`LAWS`):

* *generation alone*: the samples' ``generate`` calls, timed;
* *under the audit*: the engine audit's sample stage on the same seeds (a fixed plan of that many
  samples, the token test alone), every call the audit makes to the engine timed apart
  (``generate``, ``target_laws_along``, ``target_law``, ``draft_laws_along``, ``draft_law``).

Reported per token: the engine's generation, the engine's law reads, and the audit's own work
(the stage's time less every engine call): the audit's **overhead** is its own work over the
engine's time (generation and law reads). The compiled scoring's first use in a process (numba's
import, and its compile or cache load: :func:`.scan.warm`) is paid before the stage and reported
apart, in seconds: a cost a process, not a token. Each configuration runs in a process of its own, whose
peak resident memory is reported beside it.

**Whole audits** (not with ``--quick``): the narrow engine at its default plan, V = 4,096 and
M = 32, and V = 151,936 and M = 256 (two cases each, T = 1 and 0.7): verdict, tokens, seconds and
peak memory, in a process of its own.

Speed is measured here, never asserted; quote the ratios from one run, absolute times only as
this machine's.
"""

from __future__ import annotations

import functools
import multiprocessing
import resource
import time
from collections.abc import Callable
from typing import Any

from specproof.properties.bench.kernels import Row

#: (V, samples) of the overhead table; --quick takes a quarter of the samples
OVERHEAD = ((512, 400), (32768, 40), (151936, 12))
#: each overhead configuration runs this many times, each in a process of its own, and the table
#: gives the run of median overhead with the range of all (one run's overhead moved by a third
#: between runs on this machine; --quick runs once)
REPEATS = 3
#: how the laws are read and how sharp they are: (``target_laws_along`` offered, the narrow model's
#: logit scale); 16 gives laws of about 6 to 7 nats at the large vocabularies, 32 about 2 to 2.7,
#: as sharp as a chat model's, whose laws the scoring reads through their head
LAWS = ((True, 16.0), (False, 16.0), (True, 32.0))
#: (V, M) of the whole audits at the default plan
WHOLE = ((4096, 32), (151936, 256))
#: the engine calls the audit makes, timed apart
CALLS = ("generate", "target_laws_along", "target_law", "draft_laws_along", "draft_law")


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(engine: Any, spent: dict[str, float]) -> Any:
    """``engine`` with each of :data:`CALLS` it has timed into ``spent`` (the instance's own
    attributes: its capabilities read as before)."""
    for name in CALLS:
        fn = getattr(engine, name, None)
        if fn is None:
            continue

        @functools.wraps(fn)
        def call(*a: Any, _fn: Callable[..., Any] = fn, _name: str = name, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                spent[_name] = spent.get(_name, 0.0) + time.perf_counter() - t0

        setattr(engine, name, call)
    return engine


def overhead_row(
    vocab: int, samples: int, teacher_forcing: bool, tokens: int = 64, scale: float = 16.0
) -> dict[str, Any]:
    """One configuration of the overhead table (module docstring), in this process."""
    from dataclasses import replace

    from specproof.properties.engine.audit import EngineAudit, EngineAuditConfig
    from specproof.properties.engine.narrow import narrow_spec
    from specproof.properties.engine.runner import sample_seed
    from specproof.properties.tokens import scan, streams

    t0 = time.perf_counter()
    scan.warm()  # once a process, before anything draws or scores (numba's import, and a
    streams.warm()  # compile or a load from its cache): not a cost per token
    first_use = time.perf_counter() - t0
    spec = narrow_spec(vocab, tokens, teacher_forcing, temperatures=(1.0,), scale=scale)
    config = EngineAuditConfig(samples=samples, looks=1, report_samples=0, test="tokens", seed=3)
    alone: dict[str, float] = {}
    engine = _timed(spec.build(spec.samplings[0]), alone)
    prompt = list(spec.prompts[0])
    engine.generate(prompt, tokens, 0)  # warm
    alone.clear()
    for j in range(samples):
        engine.generate(prompt, tokens, sample_seed(config.seed, 0, j))
    spent: dict[str, float] = {}
    timed = replace(spec, build=lambda s: _timed(spec.build(s), spent))
    audit = EngineAudit(timed, config)
    audit.contract()
    audit.plan()
    spent.clear()
    t0 = time.perf_counter()
    audit.sample()
    stage = time.perf_counter() - t0
    audit.verdict()
    n = audit.result.cases[0].observed_tokens
    engine_s = sum(spent.values())
    laws_s = engine_s - spent.get("generate", 0.0)
    return {
        "vocab": vocab,
        "tokens": tokens,
        "samples": samples,
        "teacher_forcing": teacher_forcing,
        "scale": scale,
        "scored_tokens": n,
        "verdict": audit.result.verdict.value,
        "generation_alone_ms_per_token": 1e3 * alone.get("generate", 0.0) / n,
        "generation_ms_per_token": 1e3 * spent.get("generate", 0.0) / n,
        "law_reads_ms_per_token": 1e3 * laws_s / n,
        "audit_own_ms_per_token": 1e3 * (stage - engine_s) / n,
        "overhead": (stage - engine_s) / engine_s,
        "stage_over_generation_alone": stage / alone.get("generate", 1.0),
        "scan_first_use_s": first_use,
        "peak_rss_mb": _peak_mb(),
    }


def whole_audit(vocab: int, tokens: int) -> dict[str, Any]:
    """The narrow engine at ``vocab`` and M = ``tokens`` audited at the default plan, in this
    process: its verdict, tokens, seconds and peak memory."""
    from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
    from specproof.properties.engine.narrow import narrow_spec

    res = audit_engine(narrow_spec(vocab, tokens), EngineAuditConfig())
    return {
        "vocab": vocab,
        "tokens": tokens,
        "verdict": res.verdict.value,
        "cases": len(res.cases),
        "samples": res.samples,
        "scored_tokens": sum(r.observed_tokens for r in res.cases),
        "seconds": res.seconds,
        "peak_rss_mb": _peak_mb(),
        "summary": res.summary(),
    }


def _apart(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``fn(*args)`` in a fresh process (its peak memory its own)."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(fn, args)


def run(quick: bool, report: Callable[[str], None]) -> list[Row]:
    rows: list[Row] = []
    report("token test: the audit's own cost beside the engine's (narrow engine, M = 64)")
    for vocab, samples in OVERHEAD:
        n = max(4, samples // 4) if quick else samples
        for tf, scale in LAWS:
            runs = sorted(
                (_apart(overhead_row, vocab, n, tf, 64, scale) for _ in range(1 if quick else REPEATS)),
                key=lambda x: x["overhead"],
            )
            r = dict(runs[len(runs) // 2], overheads=[x["overhead"] for x in runs])
            how = ("laws along" if tf else "per position") + (", sharp laws" if scale != 16.0 else "")
            report(
                f"  V={vocab:>7,} {how:13s} generation {r['generation_ms_per_token']:.3f} ms/token, "
                f"law reads "
                f"{r['law_reads_ms_per_token']:.3f}, audit's own {r['audit_own_ms_per_token']:.3f} "
                f"(overhead {100 * r['overhead']:.1f} %, {_spread(r)}), peak {r['peak_rss_mb']:.0f} MB"
            )
            rows.append(
                Row(
                    "tokens",
                    "overhead",
                    how,
                    f"V={vocab} M=64",
                    r["audit_own_ms_per_token"],
                    r["scored_tokens"],
                    ratio=r["overhead"],
                    baseline="the engine's calls",
                    extra=r,
                )
            )
    if quick:
        return rows
    report("token test: whole audits at the default plan (narrow engine, T = 1 and 0.7)")
    for vocab, tokens in WHOLE:
        r = _apart(whole_audit, vocab, tokens)
        report(
            f"  V={vocab:>7,} M={tokens}: {r['verdict']} after {r['scored_tokens']:,} tokens in "
            f"{r['seconds']:.0f} s, peak {r['peak_rss_mb']:.0f} MB"
        )
        rows.append(
            Row(
                "tokens",
                "whole audit",
                "narrow",
                f"V={vocab} M={tokens}",
                1e3 * r["seconds"],
                r["samples"],
                extra=r,
            )
        )
    return rows


def _spread(e: dict[str, Any]) -> str:
    """The overheads of a configuration's runs, as a range (one run: "1 run")."""
    o = e.get("overheads") or [e["overhead"]]
    return "1 run" if len(o) == 1 else f"{100 * min(o):.1f} to {100 * max(o):.1f} % over {len(o)} runs"


def markdown(rows: list[Row]) -> str:
    out = [
        "| V | laws read | generation ms/token | law reads ms/token | audit's own ms/token | overhead "
        "(median run) | runs' range | stage / generation alone | first use s | peak MB |",
        "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        if r.rule != "overhead":
            continue
        e = r.extra
        out.append(
            f"| {e['vocab']:,} | {r.engine} | {e['generation_ms_per_token']:.3f} "
            f"| {e['law_reads_ms_per_token']:.3f} | {e['audit_own_ms_per_token']:.3f} "
            f"| {100 * e['overhead']:.1f} % | {_spread(e)} | {e['stage_over_generation_alone']:.2f} "
            f"| {e['scan_first_use_s']:.2f} | {e['peak_rss_mb']:.0f} |"
        )
    whole = [r for r in rows if r.rule == "whole audit"]
    if whole:
        out += [
            "",
            "| V | M | verdict | cases | tokens scored | seconds | peak MB |",
            "|---:|---:|---|---:|---:|---:|---:|",
        ]
        for r in whole:
            e = r.extra
            out.append(
                f"| {e['vocab']:,} | {e['tokens']} | {e['verdict']} | {e['cases']} | {e['scored_tokens']:,} "
                f"| {e['seconds']:.0f} | {e['peak_rss_mb']:.0f} |"
            )
    return "\n".join(out)
