"""The ``specproof`` command.

``specproof audit chain|tree TARGET`` audits a black-box verifier statistically; ``specproof
audit`` alone audits every built-in backend (the reference rules, the correct alternatives and
the mutant corpus) and checks each verdict against what the backend declares
(:mod:`.audit.cli`); ``specproof replay`` turns an audit's witness into a pytest test.
``specproof backends`` lists the registered names.

``specproof matrix`` prints the exactness matrix (proposal process x rule), each cell checked
exactly with Fraction arithmetic on seeded instances, and writes it as JSON (a list of objects
with keys ``process``, ``rule``, ``verdict``, ``tv`` and more) and Markdown on request: exit 0
when every cell agrees with what its rule declares, 1 when some cell disagrees.

Exit status of an audit: 0 pass, 1 lossy, 2 contract violation, 3 underpowered; every subcommand
exits 4 on a usage or internal error (:mod:`.verdicts`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from specproof.properties.audit.cli import (
    UsageError,
    add_audit_parser,
    add_replay_parser,
    add_robustness_parser,
    show_progress,
)
from specproof.properties.oracle.matrix import LOSSY, exactness_matrix, markdown
from specproof.properties.oracle.rule_report import add_rule_parser
from specproof.properties.verdicts import EXIT_TABLE, USAGE_ERROR
from specproof.reference.processes import PROCESSES
from specproof.reference.rules import RULES


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
        return USAGE_ERROR
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
    return show_progress(mode)


def _cmd_backends(args: argparse.Namespace) -> int:
    """Verifier backends (chain, tree) and engines (``specproof audit engine``), registered."""
    from specproof.properties.conformance.backends import all_backends
    from specproof.properties.engine.registry import list_engines

    backends = all_backends()
    engines = list_engines()
    if args.json:
        data = [dict(b.to_json(), kind=b.kind) for b in backends]
        data += [dict(e, kind="engine") for e in engines]
        print(json.dumps(data, indent=2))
        return 0
    for b in backends:
        print(f"{b.kind:6s} {b.name:45s} {b.group:11s} expect {b.expect:18s} {', '.join(b.processes)}")
        if b.doc:
            print(f"{'':53s}{b.doc}")
    for e in engines:
        where = "" if e["available"] else f"  (not available: {e['reason']})"
        print(f"engine {e['name']:45s} {e['group']:11s} expect {e['expect']:18s}{where}")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from specproof.properties.audit.calibration import calibrate, markdown

    show = _show_progress(args.progress)
    report = (lambda s: print(s, file=sys.stderr)) if show else None
    if args.deep:
        from specproof.properties.audit.calibration import calibrate_deep, markdown_deep

        runs = 300 if args.runs is None else args.runs
        table = markdown_deep(calibrate_deep(runs, args.samples, args.alpha, args.power_runs, report))
    else:
        runs = 100 if args.runs is None else args.runs
        rows = calibrate(runs, args.samples, args.alpha, args.power_runs, report)
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
    from specproof.properties.e2e import check as e2e
    from specproof.reference.errors import SpecproofInputError
    from specproof.reference.proposers import PROPOSERS

    def fail(msg: str) -> int:
        print(f"specproof e2e: {msg}", file=sys.stderr)
        return USAGE_ERROR

    if args.steps < 1:
        return fail(f"--steps must be >= 1, got {args.steps}")
    if args.runs < 0:
        return fail(f"--runs must be >= 0, got {args.runs}")
    show = _e2e_progress(args.progress)
    if args.table:
        rows = e2e.table_rows(args.steps, args.seed, show, engine=args.engine)
        print(e2e.markdown_table(rows, args.steps))
        if args.json:
            _write_json(args.json, [r.to_json() for r in rows])
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
    if not args.calibration_temperature > 0:
        return fail(f"--calibration-temperature must be > 0, got {args.calibration_temperature}")
    try:
        result = e2e.run(
            proposer,
            rule,
            steps=args.steps,
            seed=args.seed,
            runs=args.runs,
            process_index=index,
            progress=show,
            against=args.against,
            mismatch_kind=args.mismatch,
            engine=args.engine,
        )
    except SpecproofInputError as err:  # a mismatched deployment, refused before decoding
        return fail(str(err))
    print(result.summary())
    cals: list[Any] = []
    if args.calibration:
        result.calibration, cals = e2e.calibration(
            proposer, rule, args.seed, args.calibration_temperature, index, show
        )
        print("\n".join(e2e.calibration_lines(result.calibration, cals)))
    if args.report:
        if args.report.lower().endswith(".svg") and not args.calibration:
            return fail("--report PATH.svg holds the reliability diagrams: add --calibration")
        e2e.write_report(args.report, result, cals)
    if args.json:
        _write_json(args.json, result.to_json())
    return result.exit_code


def _cmd_conform(args: argparse.Namespace) -> int:
    from specproof.properties.conformance import conform

    if not args.budget_seconds > 0:
        print(
            f"specproof conform: --budget-seconds must be positive, got {args.budget_seconds}",
            file=sys.stderr,
        )
        return USAGE_ERROR
    try:
        report = conform.run(
            args.backend or None,
            budget_seconds=args.budget_seconds,
            seed=args.seed,
            shrink_seconds=args.shrink_seconds,
            progress=_e2e_progress(args.progress),
        )
    except KeyError as e:
        print(f"specproof conform: {e.args[0]}", file=sys.stderr)
        return USAGE_ERROR
    table = report.markdown()
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    if args.json:
        _write_json(args.json, report.to_json())
    return report.exit_code


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
    parser = argparse.ArgumentParser(
        prog="specproof",
        description=__doc__.split("\n\n")[0],
        epilog=EXIT_TABLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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

    add_audit_parser(sub)
    add_replay_parser(sub)
    add_robustness_parser(sub)
    add_rule_parser(sub)

    c = sub.add_parser("calibrate", help="measure false-alarm rate and power of the audit's test")
    c.add_argument(
        "--runs", type=int, default=None, help="seeds per (backend, case) (default 100; --deep 300)"
    )
    c.add_argument(
        "--deep",
        action="store_true",
        help="the per-position tests on K = 8 cases: false alarms, and power on a deep-only mutant",
    )
    c.add_argument("--samples", type=int, default=20000, help="steps per run (default 20000)")
    c.add_argument("--alpha", type=float, default=0.01, help="level of each run (default 0.01)")
    c.add_argument("--power-runs", type=int, default=20, help="seeds per lossy (backend, case) (default 20)")
    c.add_argument("--markdown", metavar="PATH", help="write the table as Markdown")
    c.add_argument("--progress", choices=("auto", "on", "off"), default="auto")
    c.set_defaults(func=_cmd_calibrate)

    be = sub.add_parser("bench", help="time the optimized engine against batched PyTorch and the reference")
    be.add_argument("--quick", action="store_true", help="small sizes and few calls (a smoke run)")
    be.add_argument(
        "--section",
        action="append",
        choices=("cpu", "audit", "gpu", "decode"),
        help="only this section (repeatable; decode: the optimized decoding loop against the reference loop)",
    )
    be.add_argument("--markdown", metavar="PATH", help="write the tables as Markdown")
    be.add_argument("--json", metavar="PATH", help="write every measurement as JSON")
    be.add_argument("--progress", choices=("auto", "on", "off"), default="on")
    be.set_defaults(func=_cmd_bench)

    e = sub.add_parser(
        "e2e", help="decode with a proposer and a rule on a transformer target: lossless or lossy"
    )
    e.add_argument("--proposer", help="draft, ngram, medusa, medusa2, eagle1, eagle2, eagle3, mtp or dflash")
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
    e.add_argument(
        "--engine",
        choices=("reference", "optimized"),
        default="reference",
        help="the decoding loop checked: the reference's (default) or the optimized batched loop, "
        "coupled to the reference's on shared tapes",
    )
    e.add_argument("--json", metavar="PATH", help="write the report as JSON")
    e.add_argument(
        "--against",
        choices=("verifier", "original"),
        default="verifier",
        help="baseline of the lossless checks: the model that verifies (default) or the original target "
        "(differs for medusa2, whose backbone is fine-tuned)",
    )
    e.add_argument(
        "--mismatch",
        choices=("revision", "layer", "vocab", "width"),
        help="deploy the draft weights mismatched: trained for another target (revision), reading the "
        "feature layer below (layer), built for another vocabulary or hidden size (refused before decoding)",
    )
    e.add_argument(
        "--calibration",
        action="store_true",
        help="path confidence against acceptance: the drafter beside the same drafter at another temperature",
    )
    e.add_argument(
        "--calibration-temperature",
        type=float,
        default=0.5,
        help="draft temperature of the drafter compared in --calibration (default 0.5)",
    )
    e.add_argument(
        "--report",
        metavar="PATH",
        help="write a report: Markdown, .html with the diagrams, or .svg (diagrams)",
    )
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

    b = sub.add_parser("backends", help="list the registered verifier backends and engines")
    b.add_argument("--json", action="store_true", help="as JSON")
    b.set_defaults(func=_cmd_backends)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand. Usage errors exit 4 with their message; an internal error exits 4 with
    its traceback (a bug of specproof, never a verdict); Ctrl-C exits 4."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 on --help
        return USAGE_ERROR if e.code not in (0, None) else 0
    try:
        return int(args.func(args))
    except UsageError as e:
        print(f"specproof {args.command}: {e}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print(f"specproof {args.command}: interrupted", file=sys.stderr)
        return USAGE_ERROR
    except Exception:
        import traceback

        print(
            f"specproof {args.command}: internal error (a bug of specproof, please report it):",
            file=sys.stderr,
        )
        traceback.print_exc()
        return USAGE_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
