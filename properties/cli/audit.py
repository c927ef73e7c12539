"""``specproof audit``, ``specproof replay`` and ``specproof robustness``.

``specproof audit chain|tree TARGET`` audits one verifier (:mod:`..audit.stages`); ``specproof
audit engine TARGET`` a whole generate loop (:mod:`..engine.audit`); ``specproof audit`` alone
runs the main job (:mod:`..audit.main_job`). ``specproof replay AUDIT.json`` turns a witness into
a pytest test; ``specproof robustness`` feeds malformed inputs. Output paths are checked before
anything runs; JSON and reports are written atomically, also when a run is interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from specproof.properties.audit.config import MAIN_JOB_GUARD, AuditConfig
from specproof.properties.cli.common import (
    TvIn,
    add_flags,
    add_outputs,
    add_progress,
    built,
    check_outputs,
    config_from,
    end_bar,
    from_args,
    plan_options,
    progress_bar,
    show_progress,
    write_json_to,
    write_text,
)
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.engine.config import MAX_HORIZON, MAX_TOKENS, EngineAuditConfig
from specproof.properties.engine.request import EngineRequest
from specproof.properties.options import flags
from specproof.properties.plan import PlanConfig, defaults
from specproof.properties.shard.options import ShardOptions
from specproof.properties.verdicts import EXIT_TABLE, USAGE_ERROR, Verdict
from specproof.reference.errors import UsageError
from specproof.reference.processes import PROCESSES

HELP_EPILOG = (
    EXIT_TABLE
    + """

The main job (no kind, no TARGET) exits 0 when every backend got its declared verdict, 1 otherwise.
The plan (samples per case) comes from --alpha, --tv, --power and the cells; --budget-seconds is a
guard only: a plan that cannot finish in it ends underpowered, never pass."""
)
GROUPS = ("builtin", "alternative", "mutant", "optimized", "thirdparty")


def add_audit_parser(sub: Any) -> argparse.ArgumentParser:
    a = sub.add_parser(
        "audit",
        help="statistical audit of a black-box verifier or engine (or of every built-in verifier)",
        description="Audit a verifier's or an engine's law against the one it must preserve.",
        epilog=HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a.add_argument(
        "kind", nargs="?", choices=("chain", "tree", "engine", "endpoint", "traffic"), help="what TARGET is"
    )
    a.add_argument(
        "target",
        nargs="?",
        help="registered name, module:function or path/to/file.py:function; for endpoint, the server's URL; "
        "for traffic, a JSON-lines file of served requests (prompt, tokens, sampling)",
    )
    _add_plan_options(a)
    _add_verifier_options(a)
    _add_engine_options(a)
    _add_endpoint_options(a)
    _add_shard_options(a)
    a.add_argument("--json", metavar="PATH", help="write the verdict and per-case details as JSON")
    a.add_argument(
        "--report",
        metavar="PATH",
        help="write a report: .md (text plots), .html (SVG plots) or .json (its blocks)",
    )
    add_progress(a)
    a.set_defaults(func=cmd_audit)
    return a


def _add_plan_options(a: argparse.ArgumentParser) -> None:
    g = a.add_argument_group(
        "the plan (every audit)",
        "The plan (samples per case) comes from --alpha, --tv, --power and the cells; --budget-seconds is "
        f"a guard only (the main job's: {MAIN_JOB_GUARD:g} s per backend).",
    )
    add_flags(g, AuditConfig, only=tuple(flags(PlanConfig)), also=EngineAuditConfig)
    add_flags(g, EngineAuditConfig, only=("looks", "report_samples", "test"))
    for spelling, unit, what in TV_UNITS:
        g.add_argument(spelling, dest="tv", metavar="TV", action=TvIn, unit=unit, help=what)


#: the spellings of --tv that name its unit: (flag, unit, help)
TV_UNITS = (
    (
        "--token-tv",
        "per token",
        "engine, endpoint, traffic: --tv as the token test reads it, the TV of each emitted token's law "
        "from the target's at its prefix (not with --test cells)",
    ),
    (
        "--joint-tv",
        "joint",
        "engine, endpoint with --test cells: --tv as the cells test's plan reads it, the TV of the law of "
        "the M tokens together",
    ),
)


def check_tv_unit(args: argparse.Namespace) -> None:
    """A TV given as ``--token-tv`` or ``--joint-tv`` must be the unit the audit's plan reads:
    per token for the token test (engine, endpoint and traffic audits, unless ``--test cells``),
    joint for the cells test (``--test cells``); the verifier audit's ``--tv`` (one call's output
    law) has neither spelling."""
    unit, option = getattr(args, "tv_unit", None) or (None, None)
    if unit is None:
        return
    if args.kind not in ("engine", "endpoint", "traffic"):
        raise UsageError(
            f"{option}: for the engine, endpoint and traffic audits; the verifier audit takes --tv"
        )
    cells = getattr(args, "test", None) == "cells"
    if unit == "per token" and cells:
        raise UsageError(
            f"{option}: with --test cells the plan is the cells test's, of a joint TV: give --joint-tv"
        )
    if unit == "joint" and not cells:
        raise UsageError(
            f"{option}: the joint TV plans the cells test alone (--test cells); the token test's plan is "
            "per token: give --token-tv"
        )


def _add_verifier_options(a: argparse.ArgumentParser) -> None:
    d = defaults(AuditConfig)
    g = a.add_argument_group("verifier audit (specproof audit chain|tree TARGET, and the main job)")
    g.add_argument(
        "--process",
        action="append",
        choices=list(PROCESSES),
        help="proposal process the verifier claims (repeatable; required for tree)",
    )
    g.add_argument(
        "--large-vocab-tv",
        type=float,
        help=f"TV planned for the memory-bound cases, V > 4096 (default {d['large_vocab_tv']:g})",
    )
    g.add_argument("--batch", type=int, help=f"rows per verifier call (default {d['batch']})")
    g.add_argument(
        "--call-timeout",
        type=float,
        help=f"seconds before a call counts as a hang (default {d['call_timeout']:g})",
    )
    g.add_argument(
        "--shrink",
        type=int,
        help="after a lossy verdict, smaller cases to try for a smaller witness "
        f"(default {d['shrink']}; 0: off)",
    )
    g.add_argument(
        "--shrink-seconds", type=float, help=f"time guard on shrinking (default {d['shrink_seconds']:g})"
    )
    g.add_argument(
        "--no-probes", action="store_true", help="skip the id-range probes (laws on ids up to 2**24 + 1)"
    )
    g.add_argument(
        "--no-wide-probe",
        action="store_true",
        help="skip the probe at V = 2**24 + 2 (float32 id round trips): slow for interpreted kernels",
    )
    g.add_argument(
        "--robustness",
        action="store_true",
        help="also feed malformed inputs (NaN, negative mass, bad ids, bad trees) in a subprocess; "
        "reported in its own section",
    )
    g.add_argument(
        "--group", action="append", choices=GROUPS, help="with no TARGET: only these backend groups"
    )


def _add_engine_options(a: argparse.ArgumentParser) -> None:
    g = a.add_argument_group(
        "engine audit (specproof audit engine TARGET; the cases of an endpoint audit too)",
        "TARGET: " + flags(EngineRequest)["target"].help + ".",
    )
    add_flags(g, EngineRequest)
    g.add_argument(
        "--engine-group",
        action="append",
        metavar="GROUP",
        help="with no TARGET: audit every available engine of GROUP (reference, mutant, alternative, hf, "
        "vllm, sglang, optimized, all) against what it declares",
    )


def _add_endpoint_options(a: argparse.ArgumentParser) -> None:
    g = a.add_argument_group(
        "endpoint audit (specproof audit endpoint URL)",
        "A served engine through its HTTP API; the engine options above give its cases. "
        "docs/endpoint-audit.md has each server family's launch commands.",
    )
    add_flags(g, EndpointOptions)
    g.add_argument(
        "--replica", action="append", metavar="URL", help="another replica of the endpoint (repeatable)"
    )


def _add_shard_options(a: argparse.ArgumentParser) -> None:
    g = a.add_argument_group(
        "sharding (audit chain|tree|engine|endpoint; docs/sharding.md)",
        "Samples drawn by Ray actors, each with its own replica of the engine or verifier; the same "
        "verdict and JSON (timings aside) for any number of workers. pip install 'specproof[ray]'.",
    )
    add_flags(g, ShardOptions)


def shard_options(args: argparse.Namespace) -> ShardOptions:
    return built(ShardOptions, from_args(args, ShardOptions))


def cmd_audit(args: argparse.Namespace) -> int:
    check_outputs(args, "json", "report")
    check_tv_unit(args)
    if args.kind == "engine":
        return cmd_audit_engine(args)
    if args.kind == "endpoint":
        return cmd_audit_endpoint(args)
    if args.kind == "traffic":
        return cmd_audit_traffic(args)
    if args.kind is None:
        if args.target or args.process:
            raise UsageError("TARGET and --process need a kind: specproof audit chain|tree TARGET")
        if args.workers is not None or args.ray:
            raise UsageError("--workers/--ray: for specproof audit chain|tree|engine|endpoint TARGET")
        if args.replica:
            raise UsageError("--replica: for specproof audit endpoint URL")
        return cmd_main_job(args)
    if not args.target:
        raise UsageError(f"TARGET: missing; usage: specproof audit {args.kind} TARGET")
    check_processes(args.kind, args.process)
    return cmd_audit_verifier(args)


# --------------------------------------------------------------------------- verifier audits


def verifier_config(args: argparse.Namespace, budget: float | None = None) -> AuditConfig:
    options = plan_options(args)
    if options["budget_seconds"] is None:
        options["budget_seconds"] = budget
    options.update(
        large_vocab_tv=args.large_vocab_tv,
        batch=args.batch,
        call_timeout=args.call_timeout,
        shrink=args.shrink,
        shrink_seconds=args.shrink_seconds,
        probes=False if args.no_probes else None,
        wide_probe=False if args.no_wide_probe else None,
    )
    return config_from(AuditConfig, options)


def check_processes(kind: str, processes: list[str] | None) -> None:
    for p in processes or ():
        if PROCESSES[p].chain != (kind == "chain"):
            fits = ", ".join(q for q in PROCESSES if PROCESSES[q].chain == (kind == "chain"))
            drafts = "chains" if PROCESSES[p].chain else "trees"
            raise UsageError(f"--process {p!r} drafts {drafts}; a {kind} audit takes {fits}")


def _resolve_verifier(target: str, kind: str, processes: list[str] | None) -> Any:
    from specproof.properties.conformance.backends import TargetError, resolve

    try:
        return resolve(target, kind, tuple(processes) if processes else None)
    except TargetError as e:
        raise UsageError(str(e)) from e


def cmd_audit_verifier(args: argparse.Namespace) -> int:
    from specproof.properties.audit.report import write_report
    from specproof.properties.audit.stages import audit, plan_table
    from specproof.properties.shard.options import caller_for

    config = verifier_config(args)
    shard = shard_options(args)
    backend = _resolve_verifier(args.target, args.kind, args.process)
    show = show_progress(args.progress)
    with caller_for(backend, shard) as caller:
        result = audit(
            backend,
            config,
            progress_bar(show, backend.name),
            on_plan=lambda res, left: print(plan_table(res, left), flush=True),
            caller=caller,
        )
        sharding = caller.summary() if caller is not None else None
    result.target, result.saved_to = args.target, args.json
    end_bar(show)
    if sharding:
        print(sharding)
    robust = None
    if args.robustness:
        from specproof.properties.audit.robustness import robustness

        robust = robustness(backend, target=args.target, timeout=min(config.call_timeout, 30.0))
    print(result.summary())
    if robust is not None:
        print(robust.summary())
    data = result.to_json()
    if robust is not None:
        data["robustness"] = robust.to_json()
    write_json_to(args.json, data)
    if args.report:
        title = f"specproof audit: {backend.name}"
        write_report(args.report, [result], title, robustness=[robust] if robust else None)
    return result.exit_code


def cmd_main_job(args: argparse.Namespace) -> int:
    """Every built-in backend under its speed class's fixed plan, against its declaration."""
    from specproof.properties.audit.main_job import main_job_backends, run_main_job
    from specproof.properties.audit.report import write_report

    report = args.report or "audit-report.md"
    check_outputs(argparse.Namespace(report=report), "report")
    show = show_progress(args.progress)
    backends, note = main_job_backends(args.group)
    if note:
        print(f"({note})")
    print(
        "each line: ok when the backend got its declared verdict (BAD otherwise), its kind and name, the "
        "declared and the measured verdict, the TV its speed class's fixed plan detects at power 0.99 "
        "(plan TV), the steps drawn and the seconds taken"
    )

    def bar(i: int, b: Any) -> Any:
        return progress_bar(show, f"[{i + 1}/{len(backends)}] {b.name}")

    def line(r: Any, config: AuditConfig) -> None:
        end_bar(show)
        mark = "ok " if r.verdict == r.expected else "BAD"
        print(
            f"{mark} {r.kind:5s} {r.backend:45s} expected {r.expected:18s} got {r.verdict.value:18s} "
            f"plan TV {config.tv:<5g} {sum(c.n for c in r.cases):>9,} steps {r.seconds:5.1f} s",
            flush=True,
        )

    base = verifier_config(args, budget=MAIN_JOB_GUARD)
    job = run_main_job(
        base,
        backends,
        tv=plan_options(args)["tv"],
        large_vocab_tv=args.large_vocab_tv,
        progress=bar,
        on_result=line,
    )
    write_report(report, job.results, "specproof audit: every built-in backend", overall=job.verdict)
    write_json_to(args.json, job.to_json())
    agreed = len(job.results) - len(job.disagreeing)
    print(
        f"\n{agreed}/{len(job.backends)} backends got their declared verdict"
        + (" (interrupted)" if job.interrupted else "")
        + f" in {job.seconds:.0f} s; report: {report}"
    )
    return job.exit_code


# --------------------------------------------------------------------------- engine audits


def engine_config(args: argparse.Namespace) -> EngineAuditConfig:
    return config_from(EngineAuditConfig, from_args(args, EngineAuditConfig))


def engine_request(args: argparse.Namespace, target: Any = None) -> EngineRequest:
    """What the options ask of an engine audit (or of an endpoint audit's cases)."""
    values = from_args(args, EngineRequest)
    top = MAX_TOKENS if getattr(args, "test", None) in ("cells", "both") else MAX_HORIZON
    if values.get("tokens") is not None and not 1 <= values["tokens"] <= top:
        why = " (the cells test of the joint law takes M <= 12)" if top == MAX_TOKENS else ""
        raise UsageError(f"--tokens: must lie in [1, {top:,}]{why}, got {values['tokens']:,}")
    return built(EngineRequest, {**values, "target": target})


def engine_specs(args: argparse.Namespace) -> list[Any]:
    """The engines TARGET or ``--engine-group`` names, with the options in place of their
    defaults (prompts, settings, horizon, name, claim)."""
    from dataclasses import replace

    groups: list[str] = list(args.engine_group or [])
    if args.target and groups:
        raise UsageError("give TARGET or --engine-group, not both")
    if not args.target and not groups:
        raise UsageError("TARGET: missing; usage: specproof audit engine TARGET (or --engine-group GROUP)")
    request = engine_request(args, args.target)  # the options read (a bad one is refused) first
    from specproof.properties.engine.registry import ENGINES, EngineTargetError, ensure_registered
    from specproof.properties.run import engine_spec

    try:
        if args.target:
            return [engine_spec(request)]
        ensure_registered()
        known = {s.group for s in ENGINES.values()} | {"all"}
        bad = [g for g in groups if g not in known]
        if bad:
            raise UsageError(f"--engine-group: unknown {bad[0]!r}; known: {', '.join(sorted(known))}")
        names = [s.name for s in ENGINES.values() if "all" in groups or s.group in groups]
        return [engine_spec(replace(request, target=n)) for n in names]
    except EngineTargetError as e:
        raise UsageError(str(e)) from e


def cmd_audit_engine(args: argparse.Namespace) -> int:
    """One engine: its verdict's exit status. A group: 0 when every verdict is the declared one."""
    config = engine_config(args)
    shard = shard_options(args)
    specs = engine_specs(args)
    from specproof.properties.engine.audit import ENGINE_PACKAGES
    from specproof.properties.engine.report import write_report
    from specproof.properties.outputs import versions
    from specproof.properties.run import run_engine

    show = show_progress(args.progress)
    results, skipped = [], []
    for spec in specs:
        ok, why = spec.available()
        if not ok:
            skipped.append({"engine": spec.name, "reason": why})
            print(f"{spec.name}: not run ({why})")
            continue
        request = EngineRequest(target=args.target or spec.name)
        res = run_engine(request, config, shard, progress_bar(show, spec.name), print, spec=spec)
        end_bar(show)
        print(*filter(None, [res.sharding, res.summary()]), sep="\n")
        results.append(res)
        if res.verdict == Verdict.INTERRUPTED:
            break
    single = len(specs) == 1 and not args.engine_group
    doc = {
        "versions": versions(ENGINE_PACKAGES),
        "results": [r.to_json() for r in results],
        "not_run": skipped,
    }
    write_json_to(args.json, results[0].to_json() if single and results else doc)
    if args.report and results:
        write_report(args.report, results)
    if any(r.verdict == Verdict.INTERRUPTED for r in results):
        return Verdict.INTERRUPTED.exit_code
    if single:
        return results[0].exit_code if results else USAGE_ERROR
    disagree = [r for r in results if r.agrees is False]
    for r in disagree:
        print(f"DISAGREES: {r.engine}: {r.verdict.value}, declared {r.expected}")
    return 1 if disagree else 0


def endpoint_options(args: argparse.Namespace) -> EndpointOptions:
    if not args.target:
        raise UsageError("URL: missing; usage: specproof audit endpoint URL [--twin URL]")
    urls = (args.target, *(args.replica or []))
    return built(EndpointOptions, {**from_args(args, EndpointOptions), "urls": urls})


def cmd_audit_endpoint(args: argparse.Namespace) -> int:
    """A served engine through its HTTP API: its verdict's exit status."""
    if args.engine_group:
        raise UsageError("--engine-group: not for an endpoint (give its URL)")
    options = endpoint_options(args)
    request = engine_request(args)
    config = engine_config(args)
    shard = shard_options(args)
    from specproof.properties.engine.report import write_report
    from specproof.properties.run import run_endpoint

    show = show_progress(args.progress)
    res = run_endpoint(options, request, config, shard, progress_bar(show, "endpoint"), print)
    end_bar(show)
    print(*filter(None, [res.sharding, res.summary()]), sep="\n")
    write_json_to(args.json, res.to_json())
    if args.report:
        write_report(args.report, [res], f"specproof endpoint audit: {args.target}")
    return res.exit_code


def cmd_audit_traffic(args: argparse.Namespace) -> int:
    """Recorded traffic scored against a twin's laws: its verdict's exit status."""
    if not args.target:
        raise UsageError("TRAFFIC: missing; usage: specproof audit traffic FILE.jsonl --twin URL")
    options = built(EndpointOptions, from_args(args, EndpointOptions))
    request = engine_request(args)
    config = engine_config(args)
    from specproof.properties.run import run_traffic

    show = show_progress(args.progress)
    res = run_traffic(args.target, options, config, request, progress_bar(show, "traffic"))
    end_bar(show)
    print(res.summary())
    write_json_to(args.json, res.to_json())
    if args.report:
        from specproof.properties.engine.report import traffic_blocks
        from specproof.properties.report_model import write_blocks

        # Markdown, HTML or JSON by the file's ending, as every other report
        write_blocks(args.report, traffic_blocks(res))
    return res.exit_code


# --------------------------------------------------------------------------- replay, robustness


def add_signoff_parser(sub: Any) -> argparse.ArgumentParser:
    r = sub.add_parser(
        "signoff",
        help="one sign-off for a deployment: the JSON of several audits of one server merged",
        description="Merge the JSON of audits of one server (load axis, prefix cache, parameters, "
        "recorded traffic) into one checklist: a question is no where any audit said no, yes where one "
        "gathered the evidence and none said no, else not tested; the verdict is the most severe. "
        "Audits of different servers are refused. Exit status: the verdict's.",
    )
    r.add_argument("json", nargs="+", metavar="AUDIT.json", help="the JSON written by specproof audit --json")
    r.add_argument(
        "--report", metavar="PATH", help="write the sign-off: .md, .html or .json (the report model)"
    )
    r.add_argument(
        "--output-json", dest="output_json", metavar="PATH", help="write the merged sign-off as JSON"
    )
    r.set_defaults(func=cmd_signoff)
    return r


def cmd_signoff(args: argparse.Namespace) -> int:
    from specproof.properties.engine.deployment import merge

    docs = []
    for path in args.json:
        if not os.path.isfile(path):
            raise UsageError(f"AUDIT.json: no file {path!r}")
        try:
            with open(path) as f:
                docs.append((path, json.load(f)))
        except json.JSONDecodeError as e:
            raise UsageError(f"{path}: not JSON ({e})") from e
    check_outputs(args, "output_json", "report")  # a report's ending names its format
    d = merge(docs)
    print(d.markdown())
    if args.report:
        from specproof.properties.report_model import write_blocks

        write_blocks(args.report, d.blocks())
    write_json_to(args.output_json, d.to_json())
    return d.verdict.exit_code


def add_replay_parser(sub: Any) -> argparse.ArgumentParser:
    r = sub.add_parser(
        "replay",
        help="turn an audit's witness into a self-contained pytest test",
        description="Rebuild the witness of an audit JSON and print a pytest test that reproduces it.",
    )
    r.add_argument("json", metavar="AUDIT.json", help="the JSON written by specproof audit --json")
    r.add_argument("--backend", help="with a main-job JSON: which backend's witness")
    r.add_argument("--target", help="how the test imports the verifier (default: the JSON's target)")
    r.add_argument("-o", "--output", metavar="PATH", help="write the test to PATH instead of stdout")
    r.set_defaults(func=cmd_replay)
    return r


def cmd_replay(args: argparse.Namespace) -> int:
    from specproof.properties.audit.replay import ReplayError, replay_source

    if not os.path.isfile(args.json):
        raise UsageError(f"AUDIT.json: no file {args.json!r}")
    check_outputs(args, "output")
    try:
        with open(args.json) as f:
            data = json.load(f)
        source = replay_source(data, backend=args.backend, target=args.target)
    except (json.JSONDecodeError, ReplayError) as e:
        raise UsageError(f"{args.json}: {e}") from e
    if args.output:
        write_text(args.output, source)
        print(f"wrote {args.output}; run: python -m pytest {args.output}")
    else:
        print(source)
    return 0


def add_robustness_parser(sub: Any) -> argparse.ArgumentParser:
    r = sub.add_parser(
        "robustness",
        help="feed malformed inputs to verifiers (each in a forked child) and tabulate what they do",
        description="The robustness battery of every backend (or TARGET): raised, returned, hung, crashed.",
    )
    r.add_argument("kind", nargs="?", choices=("chain", "tree"), help="with TARGET: its contract")
    r.add_argument("target", nargs="?", help="registered name, module:function or path/to/file.py:function")
    r.add_argument(
        "--process", action="append", choices=list(PROCESSES), help="proposal process (repeatable)"
    )
    r.add_argument(
        "--group",
        action="append",
        choices=GROUPS,
        help="with no TARGET: only these backend groups (default: all but optimized on a CPU)",
    )
    r.add_argument("--timeout", type=float, default=30.0, help="seconds before an input counts as a hang")
    add_outputs(r, markdown="write the table as Markdown", json="write every outcome as JSON")
    r.set_defaults(func=cmd_robustness)
    return r


def cmd_robustness(args: argparse.Namespace) -> int:
    """Exit 0 when every backend is robust, 1 when some is fragile."""
    import torch

    from specproof.properties.audit.robustness import robustness, table
    from specproof.properties.conformance.backends import all_backends

    if args.target:
        if args.kind is None:
            raise UsageError("TARGET needs a kind: specproof robustness chain|tree TARGET")
        check_processes(args.kind, args.process)
        backends = [_resolve_verifier(args.target, args.kind, args.process)]
    else:
        backends = [b for b in all_backends() if args.group is None or b.group in args.group]
        if args.group is None and not torch.cuda.is_available():
            backends = [b for b in backends if b.group != "optimized"]
    results = []
    for b in backends:
        r = robustness(b, timeout=args.timeout)
        results.append(r)
        bad = [o.name for o in r.outcomes if not o.good]
        print(f"{r.verdict:8s} {b.kind:5s} {b.name:45s} {', '.join(bad)}", flush=True)
    text = table(results)
    print()
    print(text)
    write_text(args.markdown, text)
    write_json_to(args.json, [r.to_json() for r in results])
    return 0 if all(r.verdict == "robust" for r in results) else 1
