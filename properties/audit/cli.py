"""``specproof audit`` and ``specproof replay``: the command-line face of :mod:`.audit`.

``specproof audit chain|tree TARGET`` audits one verifier; ``specproof audit`` alone runs the
main job, every built-in backend against its declaration, each under the fixed plan of its
speed class (:data:`MAIN_JOB_PLANS`), so its verdicts are the same on every machine.
``specproof replay AUDIT.json`` turns the witness of an audit into a pytest test.

Output paths are checked before anything runs; JSON is written atomically (a temporary file,
then a rename), also when the run is interrupted (verdict ``interrupted``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from specproof.properties.verdicts import EXIT_TABLE, USAGE_ERROR, Verdict
from specproof.reference.errors import SpecproofError
from specproof.reference.processes import PROCESSES

#: The main job's fixed plan per speed class of backend (``Backend.speed``): the TV planned on
#: small vocabularies and on the memory-bound ones. Chosen so that every declared verdict is
#: reached and the whole job fits in about 3 minutes on 2 cores; stated in README.
MAIN_JOB_PLANS: dict[str, dict[str, float]] = {
    # no probe at V = 2**24 + 2 in the main job (seconds per call for a dense verifier; every
    # single audit runs it); the V = 262,144 probes run for every backend
    "batched": {"tv": 0.03, "large_vocab_tv": 0.5, "wide_probe": 0},
    # one row at a time in Python: a coarser TV; a backend expected lossy runs to its first
    # rejection, planned finer so that the rejection is reached
    # memory-bound cases smoke-only (a row of V = 152,064 costs the Python loop 10 ms; their ids
    # are checked by the smoke stage and the V = 262,144 probes)
    "python": {"tv": 0.4, "large_vocab_tv": -1, "wide_probe": 0, "lossy_tv": 0.25},
    # the interpreter walks every id of a row: no id-range probes (a GPU run has them)
    "interpreted": {"tv": 0.5, "large_vocab_tv": 0.5, "batch": 64, "probes": 0},
}
MAIN_JOB_GUARD = 120.0  # seconds per backend: only a guard (a backend past it is underpowered)

HELP_EPILOG = (
    EXIT_TABLE
    + """

The main job (no kind, no TARGET) exits 0 when every backend got its declared verdict, 1 otherwise.
The plan (samples per case) comes from --alpha, --tv, --power and the cells; --budget-seconds is a
guard only: a plan that cannot finish in it ends underpowered, never pass."""
)


class UsageError(SpecproofError, ValueError):
    """A command-line mistake: exit status 4 with the message, no traceback."""


def check_output_path(path: str | None, option: str) -> None:
    """Fail before the run if ``path`` cannot be written (missing folder, not writable)."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"{option}: the folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{option}: the folder {folder!r} is not writable")
    if os.path.isdir(path):
        raise UsageError(f"{option}: {path!r} is a folder, not a file")


def atomic_write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename, so a
    reader never sees half a file and an interrupted run leaves the old file or the new one."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".specproof-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: str, data: Any) -> None:
    atomic_write(path, json.dumps(data, indent=2) + "\n")


def add_audit_parser(sub: Any) -> argparse.ArgumentParser:
    a = sub.add_parser(
        "audit",
        help="statistical audit of a black-box verifier (or of every built-in one)",
        description="Audit a verifier's law against the one it must preserve.",
        epilog=HELP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a.add_argument("kind", nargs="?", choices=("chain", "tree", "engine"), help="the verifier's contract")
    a.add_argument("target", nargs="?", help="registered name, module:function or path/to/file.py:function")
    a.add_argument(
        "--process",
        action="append",
        choices=list(PROCESSES),
        help="proposal process the verifier claims (repeatable; required for tree)",
    )
    a.add_argument("--alpha", type=float, default=1e-6, help="family-wise false-alarm rate (default 1e-6)")
    a.add_argument(
        "--tv",
        type=float,
        default=None,
        help="smallest TV deviation to detect (default 0.01; the main job: its plans' TV per speed class)",
    )
    a.add_argument("--power", type=float, default=0.99, help="power wanted at that TV (default 0.99)")
    a.add_argument(
        "--large-vocab-tv",
        type=float,
        default=None,
        help="TV planned for the memory-bound cases, V > 4096 (default 0.2; every step moves dense rows)",
    )
    a.add_argument("--seed", type=int, default=0, help="seed of every draw (default 0)")
    a.add_argument(
        "--budget-seconds",
        type=float,
        default=None,
        help="time guard per backend (default 900; main job 120): a plan that does not fit ends underpowered",
    )
    a.add_argument("--samples", type=int, default=None, help="fixed steps per case instead of the planner's")
    a.add_argument("--batch", type=int, default=8192, help="rows per verifier call (default 8192)")
    a.add_argument("--cells", type=int, default=128, help="most cells per case's test (default 128)")
    a.add_argument(
        "--call-timeout",
        type=float,
        default=120.0,
        help="seconds before a call counts as a hang (default 120)",
    )
    a.add_argument(
        "--shrink",
        type=int,
        default=16,
        help="after a lossy verdict, smaller cases to try for a smaller witness (default 16; 0: off)",
    )
    a.add_argument(
        "--shrink-seconds", type=float, default=120.0, help="time guard on shrinking (default 120)"
    )
    a.add_argument(
        "--no-probes", action="store_true", help="skip the id-range probes (laws on ids up to 2**24 + 1)"
    )
    a.add_argument(
        "--no-wide-probe",
        action="store_true",
        help="skip the probe at V = 2**24 + 2 (float32 id round trips): slow for interpreted kernels",
    )
    a.add_argument(
        "--robustness",
        action="store_true",
        help="also feed malformed inputs (NaN, negative mass, bad ids, bad trees) in a subprocess; "
        "reported in its own section",
    )
    a.add_argument(
        "--group",
        action="append",
        choices=("builtin", "alternative", "mutant", "optimized", "thirdparty"),
        help="with no TARGET: only these backend groups",
    )
    a.add_argument("--json", metavar="PATH", help="write the verdict and per-case details as JSON")
    a.add_argument("--report", metavar="PATH", help="write a report (.md, or .html with plots)")
    a.add_argument(
        "--progress",
        choices=("auto", "on", "off"),
        default="auto",
        help="progress bar on stderr (auto: on a terminal, not under CI)",
    )
    try:  # the engine audit brings its own options (--prompt, --tokens, --temperature, ...)
        from specproof.properties.engine import audit as engine_audit

        engine_audit.add_cli_arguments(a)
    except (ImportError, AttributeError):
        pass
    a.set_defaults(func=cmd_audit)
    return a


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
        choices=("builtin", "alternative", "mutant", "optimized", "thirdparty"),
        help="with no TARGET: only these backend groups (default: all but optimized on a CPU)",
    )
    r.add_argument("--timeout", type=float, default=30.0, help="seconds before an input counts as a hang")
    r.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    r.add_argument("--json", metavar="PATH", help="write every outcome as JSON")
    r.set_defaults(func=cmd_robustness)
    return r


def cmd_robustness(args: argparse.Namespace) -> int:
    """Exit 0 when every backend is robust, 1 when some is fragile."""
    import torch

    from specproof.properties.audit.robustness import robustness, table
    from specproof.properties.conformance.backends import TargetError, all_backends, resolve

    check_output_path(args.markdown, "--markdown")
    check_output_path(args.json, "--json")
    if args.target:
        if args.kind is None:
            raise UsageError("TARGET needs a kind: specproof robustness chain|tree TARGET")
        _check_processes(args.kind, args.process)
        try:
            backends = [resolve(args.target, args.kind, tuple(args.process) if args.process else None)]
        except TargetError as e:
            raise UsageError(str(e)) from e
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
    if args.markdown:
        atomic_write(args.markdown, text + "\n")
    if args.json:
        write_json(args.json, [r.to_json() for r in results])
    return 0 if all(r.verdict == "robust" for r in results) else 1


def show_progress(mode: str) -> bool:
    return mode == "on" or (mode == "auto" and sys.stderr.isatty() and not os.environ.get("CI"))


def progress_bar(enabled: bool, label: str) -> Callable[[str, float], None]:
    def show(what: str, frac: float) -> None:
        if enabled:
            done = int(30 * max(0.0, min(1.0, frac)))
            sys.stderr.write(f"\r{label[:28]:<28} [{'#' * done}{'.' * (30 - done)}] {what[:30]:<30}")
            sys.stderr.flush()

    return show


def _config(args: argparse.Namespace, budget: float) -> Any:
    from specproof.properties.audit.stages import AuditConfig

    try:
        config = AuditConfig(
            alpha=float(args.alpha),
            tv=0.01 if args.tv is None else float(args.tv),
            power=float(args.power),
            seed=int(args.seed),
            budget_seconds=float(budget),
            large_vocab_tv=0.2 if args.large_vocab_tv is None else float(args.large_vocab_tv),
            samples=None if args.samples is None else int(args.samples),
            batch=int(args.batch),
            max_cells=int(args.cells),
            probes=not args.no_probes,
            wide_probe=not args.no_wide_probe,
            shrink=int(args.shrink),
            shrink_seconds=float(args.shrink_seconds),
            call_timeout=float(args.call_timeout),
        )
        config.validate()
    except ValueError as e:
        raise UsageError(
            str(e).replace("_", "-", 1) if str(e).startswith(("budget_", "large_")) else str(e)
        ) from e
    return config


def _check_processes(kind: str, processes: list[str] | None) -> None:
    if not processes:
        return
    for p in processes:
        if PROCESSES[p].chain != (kind == "chain"):
            fits = ", ".join(q for q in PROCESSES if PROCESSES[q].chain == (kind == "chain"))
            drafts = "chains" if PROCESSES[p].chain else "trees"
            raise UsageError(f"--process {p!r} drafts {drafts}; a {kind} audit takes {fits}")


def cmd_audit(args: argparse.Namespace) -> int:
    check_output_path(args.json, "--json")
    check_output_path(args.report, "--report")
    if args.kind == "engine":
        from specproof.properties.engine import audit as engine_audit

        return int(engine_audit.run_cli(args))
    if args.kind is None:
        if args.target or args.process:
            raise UsageError("TARGET and --process need a kind: specproof audit chain|tree TARGET")
        return main_job(args)
    if not args.target:
        raise UsageError(f"TARGET: missing; usage: specproof audit {args.kind} TARGET")
    _check_processes(args.kind, args.process)
    return single(args)


def _on_plan(result: Any, left: float) -> None:
    from specproof.properties.audit.stages import plan_table

    print(plan_table(result, left), flush=True)


def single(args: argparse.Namespace) -> int:
    from specproof.properties.audit.report import write_report
    from specproof.properties.audit.stages import audit
    from specproof.properties.conformance.backends import TargetError, resolve

    config = _config(args, 900.0 if args.budget_seconds is None else args.budget_seconds)
    try:
        backend = resolve(args.target, args.kind, tuple(args.process) if args.process else None)
    except TargetError as e:
        raise UsageError(str(e)) from e
    show = show_progress(args.progress)
    result = audit(backend, config, progress_bar(show, backend.name), on_plan=_on_plan)
    result.target = args.target
    if show:
        sys.stderr.write("\n")
    robust = None
    if args.robustness:
        from specproof.properties.audit.robustness import robustness

        robust = robustness(backend, target=args.target, timeout=min(args.call_timeout, 30.0))
    print(result.summary())
    if robust is not None:
        print(robust.summary())
    if args.json:
        data = result.to_json()
        if robust is not None:
            data["robustness"] = robust.to_json()
        write_json(args.json, data)
    if args.report:
        write_report(
            args.report, [result], f"specproof audit: {backend.name}", robustness=[robust] if robust else None
        )
    return result.exit_code


def main_job(args: argparse.Namespace) -> int:
    """Every built-in backend, each under its speed class's fixed plan, against its declaration."""
    import torch

    from specproof.properties.audit.report import write_report
    from specproof.properties.audit.stages import audit
    from specproof.properties.conformance.backends import all_backends

    backends = [b for b in all_backends() if args.group is None or b.group in args.group]
    if args.group is None:
        backends = [b for b in backends if b.group != "thirdparty"]
        if not torch.cuda.is_available():
            # Triton's CPU interpreter runs tens of rows per second: no power in this job. The
            # kernels are held to the reference sample for sample instead
            # (tests/test_optimized_coupled.py); `--group optimized` audits them anyway.
            print(
                "(optimized.* not in the main job without CUDA: run `specproof audit --group optimized` "
                "to audit them under the Triton interpreter; the coupling tests hold them to the reference)"
            )
            backends = [b for b in backends if b.group != "optimized"]
    budget = MAIN_JOB_GUARD if args.budget_seconds is None else args.budget_seconds
    base = _config(args, budget)
    show = show_progress(args.progress)
    results: list[Any] = []
    report = args.report or "audit-report.md"
    check_output_path(report, "--report")
    start = time.perf_counter()
    interrupted = False
    for i, b in enumerate(backends):
        config = main_job_config(b, base, args)
        r = audit(b, config, progress_bar(show, f"[{i + 1}/{len(backends)}] {b.name}"))
        r.expected = b.expect
        r.target = b.name
        results.append(r)
        if show:
            sys.stderr.write("\n")
        mark = "ok " if r.verdict == b.expect else "BAD"
        print(
            f"{mark} {b.kind:5s} {b.name:45s} expected {b.expect:18s} got {r.verdict.value:18s} "
            f"TV {config.tv:<5g} {sum(c.n for c in r.cases):>9,} steps {r.seconds:5.1f} s",
            flush=True,
        )
        if r.verdict == Verdict.INTERRUPTED:
            interrupted = True
            break
    bad = [r for r in results if r.verdict != r.expected]
    agrees = not bad and not interrupted and len(results) == len(backends)
    overall = "interrupted" if interrupted else ("agrees" if agrees else "disagrees")
    write_report(report, results, "specproof audit: every built-in backend", overall=overall)
    if args.json:
        write_json(
            args.json,
            {
                "verdict": overall,
                "plans": MAIN_JOB_PLANS,
                "backends": [r.to_json() for r in results],
                "seconds": time.perf_counter() - start,
            },
        )
    print(
        f"\n{len(results) - len(bad)}/{len(backends)} backends got their declared verdict"
        + (" (interrupted)" if interrupted else "")
        + f" in {time.perf_counter() - start:.0f} s; report: {report}"
    )
    if interrupted:
        return USAGE_ERROR
    return 0 if agrees else 1


def main_job_config(backend: Any, base: Any, args: argparse.Namespace) -> Any:
    """The main job's plan for one backend: its speed class's TVs, stop at the first rejection,
    no shrinking (the job checks verdicts; `specproof audit chain NAME` shrinks)."""
    from dataclasses import replace

    plan = MAIN_JOB_PLANS[backend.speed]
    tv = plan["lossy_tv"] if backend.expect == "lossy" and "lossy_tv" in plan else plan["tv"]
    return replace(
        base,
        tv=tv if args.tv is None else args.tv,
        large_vocab_tv=_large(plan["large_vocab_tv"]) if args.large_vocab_tv is None else args.large_vocab_tv,
        batch=int(plan.get("batch", base.batch)),
        probes=bool(plan.get("probes", base.probes)),
        wide_probe=bool(plan.get("wide_probe", base.wide_probe)),
        stop_early=True,
        shrink=0,
    )


def _large(tv: float) -> float | None:
    """A plan's ``large_vocab_tv``; -1 stands for None (smoke stage only)."""
    return None if tv < 0 else tv


def cmd_replay(args: argparse.Namespace) -> int:
    from specproof.properties.audit.replay import ReplayError, test_source

    if not os.path.isfile(args.json):
        raise UsageError(f"AUDIT.json: no file {args.json!r}")
    check_output_path(args.output, "--output")
    try:
        with open(args.json) as f:
            data = json.load(f)
        source = test_source(data, backend=args.backend, target=args.target)
    except (json.JSONDecodeError, ReplayError) as e:
        raise UsageError(f"AUDIT.json: {e}") from e
    if args.output:
        atomic_write(args.output, source)
        print(f"wrote {args.output}; run: python -m pytest {args.output}")
    else:
        print(source)
    return 0
