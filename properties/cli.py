"""The ``specproof`` command.

``specproof audit chain|tree TARGET`` audits a black-box verifier statistically; ``specproof
audit`` alone audits every built-in backend (the reference rules, the correct alternatives and
the mutant corpus) and checks each verdict against what the backend declares. ``specproof
backends`` lists the registered names. Audit exit status: 0 no deviation detected at the stated
power, 1 lossy, 2 contract violation or usage error (the default audit: 0 when every verdict is
the declared one, 1 otherwise).

``specproof matrix`` prints the exactness matrix (proposal process x rule), each cell checked
exactly with Fraction arithmetic on seeded instances, and writes it as JSON (a list of objects
with keys ``process``, ``rule``, ``verdict``, ``tv`` and more) and Markdown on request.

Exit status: 0 when every cell agrees with what its rule declares; 1 when some cell disagrees
(a rule declared exact was found lossy, or a rule declared lossy showed no witness); 2 on a
usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from specproof.reference.processes import PROCESSES
from specproof.reference.rules import RULES

from .matrix import LOSSY, exactness_matrix, markdown


def _progress_printer(enabled: bool) -> Callable[[int, int, str], None]:
    def show(done: int, total: int, what: str) -> None:
        if enabled:
            sys.stderr.write(f"\r[{done}/{total}] {what[:70]:<70}")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()

    return show


def _cmd_matrix(args: argparse.Namespace) -> int:
    show = args.progress == "on" or (
        args.progress == "auto" and sys.stderr.isatty() and not os.environ.get("CI")
    )
    try:
        cells = exactness_matrix(
            instances=args.instances,
            seed=args.seed,
            rules=args.rule or None,
            processes=args.process or None,
            progress=_progress_printer(show),
        )
    except ValueError as e:
        print(f"specproof matrix: {e}", file=sys.stderr)
        return 2
    table = markdown(cells)
    print(table)
    print()
    print(
        f"{len(cells)} cells, {args.instances} seeded instances per process (seed {args.seed}), "
        "exact Fraction arithmetic. '**!**': declared exact but found lossy; "
        "'**?**': declared lossy but no witness found."
    )
    bad = [c for c in cells if not c.agrees]
    for c in bad:
        print(f"\nDISAGREES: {c.process} x {c.rule}: {c.verdict}, declared exact: {c.declared_exact}")
        if c.witness:
            print(c.witness)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([c.to_json() for c in cells], f, indent=2)
            f.write("\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    if args.witnesses:
        for c in cells:
            if c.verdict == LOSSY:
                print(f"\n{c.witness}")
    return 1 if bad else 0


def _show_progress(mode: str) -> bool:
    return mode == "on" or (mode == "auto" and sys.stderr.isatty() and not os.environ.get("CI"))


def _bar(enabled: bool, label: str) -> Callable[[str, float], None]:
    def show(what: str, frac: float) -> None:
        if enabled:
            done = int(30 * max(0.0, min(1.0, frac)))
            sys.stderr.write(f"\r{label[:28]:<28} [{'#' * done}{'.' * (30 - done)}] {what[:30]:<30}")
            sys.stderr.flush()

    return show


def _config(args: argparse.Namespace) -> Any:
    from .audit import AuditConfig

    config = AuditConfig(
        alpha=args.alpha,
        tv=args.tv,
        power=args.power,
        seed=args.seed,
        budget_seconds=args.budget_seconds,
        samples=args.samples,
        max_cells=args.cells,
    )
    config.validate()
    return config


def _cmd_audit(args: argparse.Namespace) -> int:
    from .audit import EXIT, audit
    from .backends import TargetError, all_backends, resolve
    from .report import write_report

    show = _show_progress(args.progress)
    try:
        if args.kind is None:
            if args.target or args.process:
                raise ValueError("TARGET and --process need a kind: specproof audit chain|tree TARGET")
            if args.budget_seconds is None:
                args.budget_seconds = 8.0
            config = _config(args)
            config.stop_early = True
            results = []
            import torch

            backends = [b for b in all_backends() if args.group is None or b.group in args.group]
            if args.group is None and not torch.cuda.is_available():
                # Triton's CPU interpreter runs tens of rows per second: no statistical power in
                # this budget. The kernels are held to the reference sample for sample instead
                # (tests/test_optimized_coupled.py); `--group optimized` audits them anyway.
                print(
                    "(optimized.* skipped: no CUDA; run `specproof audit --group optimized` to audit them "
                    "under the Triton interpreter)"
                )
                backends = [b for b in backends if b.group != "optimized"]
            for i, b in enumerate(backends):
                r = audit(b, config, _bar(show, f"[{i + 1}/{len(backends)}] {b.name}"))
                r.expected = b.expect
                results.append(r)
                if show:
                    sys.stderr.write("\n")
                mark = "ok " if r.verdict == b.expect else "BAD"
                print(
                    f"{mark} {b.kind:5s} {b.name:45s} expected {b.expect:18s} "
                    f"got {r.verdict:18s} {r.seconds:5.1f} s",
                    flush=True,
                )
            report = args.report or "audit-report.md"
            write_report(report, results, "specproof audit: every built-in backend")
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(
                        {
                            "verdict": "agrees"
                            if all(r.verdict == r.expected for r in results)
                            else "disagrees",
                            "backends": [r.to_json() for r in results],
                        },
                        f,
                        indent=2,
                    )
                    f.write("\n")
            bad = [r for r in results if r.verdict != r.expected]
            print(
                f"\n{len(results) - len(bad)}/{len(results)} backends got their declared verdict; "
                f"report: {report}"
            )
            return 1 if bad else 0
        if not args.target:
            raise ValueError(f"TARGET: missing; usage: specproof audit {args.kind} TARGET")
        if args.budget_seconds is None:
            args.budget_seconds = 60.0
        config = _config(args)
        config.shrink_seconds = args.shrink_seconds
        backend = resolve(args.target, args.kind, tuple(args.process) if args.process else None)
    except (TargetError, ValueError) as e:
        print(f"specproof audit: {e}", file=sys.stderr)
        return 2
    result = audit(backend, config, _bar(show, backend.name))
    if show:
        sys.stderr.write("\n")
    print(result.summary())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_json(), f, indent=2)
            f.write("\n")
    if args.report:
        write_report(args.report, [result], f"specproof audit: {backend.name}")
    return EXIT[result.verdict]


def _cmd_backends(args: argparse.Namespace) -> int:
    from .backends import all_backends

    backends = all_backends()
    if args.json:
        print(json.dumps([b.to_json() for b in backends], indent=2))
        return 0
    for b in backends:
        print(f"{b.kind:5s} {b.name:45s} {b.group:11s} expect {b.expect:18s} {', '.join(b.processes)}")
        if b.doc:
            print(f"{'':52s}{b.doc}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from .calibration import calibrate, markdown

    show = _show_progress(args.progress)
    report = (lambda s: print(s, file=sys.stderr)) if show else None
    rows = calibrate(args.runs, args.samples, args.alpha, args.power_runs, report)
    table = markdown(rows)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from specproof.optimized import bench

    report = (
        (lambda s: print(s, file=sys.stderr, flush=True))
        if _show_progress(args.progress)
        else (lambda s: None)
    )
    rows = bench.run(args.quick, tuple(args.section or ("cpu", "audit", "gpu")), report)
    table = bench.markdown(rows)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    if args.json:
        with open(args.json, "w") as f:
            f.write(bench.to_json(rows) + "\n")
    return 0


def _cmd_e2e(args: argparse.Namespace) -> int:
    from specproof.reference.proposers import PROPOSERS

    from . import e2e

    def fail(msg: str) -> int:
        print(f"specproof e2e: {msg}", file=sys.stderr)
        return 2

    if args.steps < 1:
        return fail(f"--steps must be >= 1, got {args.steps}")
    if args.runs < 0:
        return fail(f"--runs must be >= 0, got {args.runs}")
    show = _e2e_progress(args.progress)
    if args.table:
        rows = e2e.table_rows(args.steps, args.seed, show)
        print(e2e.markdown_table(rows, args.steps))
        if args.json:
            _write_json(args.json, rows)
        return 0
    if args.proposer not in PROPOSERS:
        why = "is required (or --table)" if args.proposer is None else "is unknown"
        return fail(f"proposer {args.proposer!r} {why}; available: {', '.join(PROPOSERS)}")
    proposer = PROPOSERS[args.proposer]
    names = [p.name for p in proposer.processes]
    if args.process is not None and args.process not in names:
        return fail(f"--process {args.process!r} is not one of {args.proposer}'s: {', '.join(names)}")
    index = names.index(args.process) if args.process else 0
    rule = args.rule or proposer.default_rule
    if rule not in RULES:
        return fail(f"--rule {rule!r} is unknown; rules: {', '.join(RULES)}")
    proc = proposer.processes[index]
    if not RULES[rule].applies_to(proc.chain):
        return fail(f"--rule {rule!r} verifies chains only; {args.proposer} drafts trees ({proc.name})")
    report = e2e.run(proposer, rule, args.steps, args.seed, args.runs, index, show)
    ex, sa, stat = report["exact_check"], report["sampled"], report["statistical"]
    claim = "declared exact" if report["declared_exact"] else "not declared exact"
    print(
        f"{proposer.name} ({proc.name}) verified by {rule} ({claim}): "
        + ("LOSSLESS" if report["lossless"] else "LOSSY")
    )
    print(
        f"  exact law of 2 steps on a {ex['vocab']}-token transformer ({ex['drafts']} drafts, depth "
        f"{ex['depth']}): TV = {ex['tv']:.3g}; {ex['mean_emitted_per_step']:.3f} tokens per step expected"
    )
    line = (
        f"  sampled on a {sa['vocab']}-token transformer: {sa['mean_emitted_per_target_forward']:.2f} "
        f"tokens per target forward over {sa['steps']} steps ({sa['drafts_per_step']} drafts each); "
        f"first-draft acceptance alpha = {sa['alpha']:.3f}"
    )
    if sa["closed_form_iid"] is not None:
        line += f", i.i.d. closed form {sa['closed_form_iid']:.2f}"
    print(line)
    if stat is not None:
        print(f"  statistical: {stat['summary']}")
    if args.json:
        _write_json(args.json, report)
    return 0 if report["lossless"] else 1


def _cmd_conform(args: argparse.Namespace) -> int:
    from . import conform

    if not args.budget_seconds > 0:
        print(
            f"specproof conform: --budget-seconds must be positive, got {args.budget_seconds}",
            file=sys.stderr,
        )
        return 2
    try:
        report = conform.run(
            args.backend or None,
            args.budget_seconds,
            args.seed,
            args.shrink_seconds,
            _e2e_progress(args.progress),
        )
    except KeyError as e:
        print(f"specproof conform: {e.args[0]}", file=sys.stderr)
        return 2
    table = conform.markdown(report)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    if args.json:
        _write_json(args.json, report)
    return 0 if all(r["agrees"] for r in report["rows"]) else 1


def _write_json(path: str, data: Any) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")


def _e2e_progress(mode: str) -> Callable[[str], None] | None:
    on = mode == "on" or (mode == "auto" and sys.stderr.isatty())
    return (lambda msg: print(msg, file=sys.stderr, flush=True)) if on else None


def _add_progress(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--progress", choices=("auto", "on", "off"), default="auto", help=help)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specproof", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("matrix", help="the exactness matrix, proposal process x rule (exact arithmetic)")
    m.add_argument("--json", metavar="PATH", help="write the cells as JSON")
    m.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    m.add_argument("--instances", type=int, default=16, help="seeded instances per process (default 16)")
    m.add_argument("--seed", type=int, default=0, help="seed of the instance draw (default 0)")
    m.add_argument("--rule", action="append", choices=list(RULES), help="only this rule (repeatable)")
    m.add_argument(
        "--process", action="append", choices=list(PROCESSES), help="only this process (repeatable)"
    )
    m.add_argument("--witnesses", action="store_true", help="print the witness of every lossy cell")
    _add_progress(m, "progress on stderr (auto: on a terminal)")
    m.set_defaults(func=_cmd_matrix)

    a = sub.add_parser("audit", help="statistical audit of a black-box verifier (or of every built-in one)")
    a.add_argument("kind", nargs="?", choices=("chain", "tree"), help="the verifier's contract")
    a.add_argument("target", nargs="?", help="registered name, module:function or path/to/file.py:function")
    a.add_argument(
        "--process",
        action="append",
        choices=list(PROCESSES),
        help="proposal process the verifier claims (repeatable; required for tree)",
    )
    a.add_argument("--alpha", type=float, default=1e-6, help="family-wise false-alarm rate (default 1e-6)")
    a.add_argument("--tv", type=float, default=0.01, help="smallest TV deviation to detect (default 0.01)")
    a.add_argument("--power", type=float, default=0.99, help="power wanted at that TV (default 0.99)")
    a.add_argument("--seed", type=int, default=0, help="seed of every draw (default 0)")
    a.add_argument(
        "--budget-seconds",
        type=float,
        default=None,
        help="time budget per backend (default 60; 8 for the audit of every built-in backend)",
    )
    a.add_argument("--samples", type=int, default=None, help="fixed steps per case instead of the planner's")
    a.add_argument("--cells", type=int, default=128, help="most cells per case's test (default 128)")
    a.add_argument(
        "--shrink-seconds",
        type=float,
        default=20.0,
        help="after a lossy verdict, time to search a smaller witness (default 20; 0: off)",
    )
    a.add_argument(
        "--group",
        action="append",
        choices=("builtin", "alternative", "mutant", "optimized", "thirdparty"),
        help="with no TARGET: only these backend groups",
    )
    a.add_argument("--json", metavar="PATH", help="write the verdict and per-case details as JSON")
    a.add_argument("--report", metavar="PATH", help="write a report (.md, or .html with plots)")
    _add_progress(a, "progress bar on stderr (auto: on a terminal, not under CI)")
    a.set_defaults(func=_cmd_audit)

    c = sub.add_parser("calibrate", help="measure false-alarm rate and power of the audit's test")
    c.add_argument("--runs", type=int, default=100, help="seeds per (backend, case) (default 100)")
    c.add_argument("--samples", type=int, default=20000, help="steps per run (default 20000)")
    c.add_argument("--alpha", type=float, default=0.01, help="level of each run (default 0.01)")
    c.add_argument("--power-runs", type=int, default=20, help="seeds per lossy (backend, case) (default 20)")
    c.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    c.add_argument("--progress", choices=("auto", "on", "off"), default="auto")
    c.set_defaults(func=_cmd_calibrate)

    be = sub.add_parser("bench", help="time the optimized engine against batched PyTorch and the reference")
    be.add_argument("--quick", action="store_true", help="small sizes and few calls (a smoke run)")
    be.add_argument(
        "--section", action="append", choices=("cpu", "audit", "gpu"), help="only this section (repeatable)"
    )
    be.add_argument("--markdown", metavar="PATH", help="write the tables as Markdown")
    be.add_argument("--json", metavar="PATH", help="write every measurement as JSON")
    be.add_argument("--progress", choices=("auto", "on", "off"), default="on")
    be.set_defaults(func=_cmd_bench)

    e = sub.add_parser(
        "e2e", help="decode with a proposer and a rule on a transformer target: lossless or lossy"
    )
    e.add_argument("--proposer", help="draft, ngram, medusa, eagle1, eagle2, eagle3, mtp or dflash")
    e.add_argument(
        "--table", action="store_true", help="every proposer x exact rule (and typical): the acceptance table"
    )
    e.add_argument("--rule", help="verification rule (default: the proposer's own)")
    e.add_argument("--process", help="one of the proposer's processes (default: its first)")
    e.add_argument("--steps", type=int, default=64, help="sampled steps (default 64)")
    e.add_argument(
        "--runs",
        type=int,
        default=400,
        help="decoding runs of the statistical check on the 16-token target (default 400; 0: off)",
    )
    e.add_argument("--seed", type=int, default=0, help="seed of the sampled runs (default 0)")
    e.add_argument("--json", metavar="PATH", help="write the report as JSON")
    _add_progress(e, "progress on stderr (auto: on a terminal)")
    e.set_defaults(func=_cmd_e2e)

    c = sub.add_parser(
        "conform", help="audit every installed third-party adapter and write the conformance table"
    )
    c.add_argument("backend", nargs="*", help="only these adapters or tree builders (default: all installed)")
    c.add_argument(
        "--budget-seconds",
        type=float,
        default=60.0,
        help="audit budget per verifier and process (default 60)",
    )
    c.add_argument("--shrink-seconds", type=float, default=10.0, help="witness shrinking per lossy verdict")
    c.add_argument("--seed", type=int, default=0, help="seed of every draw (default 0)")
    c.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    c.add_argument("--json", metavar="PATH", help="write every row as JSON")
    _add_progress(c, "progress on stderr (auto: on a terminal)")
    c.set_defaults(func=_cmd_conform)

    b = sub.add_parser("backends", help="list the registered backends")
    b.add_argument("--json", action="store_true", help="as JSON")
    b.set_defaults(func=_cmd_backends)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 on --help
        return int(e.code or 0)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
