"""The subcommands beside the audits: ``matrix``, ``rule``, ``calibrate``, ``bench``, ``e2e``,
``conform`` and ``backends``. Each parses its options, calls the library and prints what it
returned; output paths are checked first and files written atomically.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from specproof.properties.cli.common import (
    add_outputs,
    add_progress,
    check_outputs,
    counter,
    progress_lines,
    show_progress,
    write_json_to,
    write_text,
)
from specproof.reference.errors import UsageError
from specproof.reference.processes import PROCESSES
from specproof.reference.rules import RULES

# --------------------------------------------------------------------------- matrix


def add_matrix_parser(sub: Any) -> None:
    m = sub.add_parser("matrix", help="the exactness matrix, proposal process x rule (exact arithmetic)")
    add_outputs(m, markdown="write the table as Markdown", json="write the cells as JSON")
    m.add_argument("--instances", type=int, default=16, help="seeded instances per process (default 16)")
    m.add_argument("--seed", type=int, default=0, help="seed of the instance draw (default 0)")
    m.add_argument("--rule", action="append", choices=list(RULES), help="only this rule (repeatable)")
    m.add_argument(
        "--process", action="append", choices=list(PROCESSES), help="only this process (repeatable)"
    )
    m.add_argument("--witnesses", action="store_true", help="print the witness of every lossy cell")
    m.add_argument(
        "--params",
        action="store_true",
        help="the matrix of request parameters instead: every parameter x proposer x exact rule, two "
        "decoding steps enumerated on the 4-token target (about an hour on 2 cores; --proposer to narrow)",
    )
    m.add_argument("--proposer", action="append", help="with --params: only this proposer (repeatable)")
    m.add_argument("--param", action="append", help="with --params: only this parameter (repeatable)")
    add_progress(m)
    m.set_defaults(func=cmd_matrix)


def cmd_matrix(args: argparse.Namespace) -> int:
    """Exit 0 when every cell agrees with what its rule declares, 1 when some cell disagrees."""
    from specproof.properties.oracle.matrix import LOSSY, exactness_matrix, markdown

    if args.params:
        return cmd_params_matrix(args)
    cells = exactness_matrix(
        instances=args.instances,
        seed=args.seed,
        rules=args.rule or None,
        processes=args.process or None,
        progress=counter(show_progress(args.progress)),
    )
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
    write_json_to(args.json, [c.to_json() for c in cells])
    write_text(args.markdown, table)
    if args.witnesses:
        for c in cells:
            if c.verdict == LOSSY:
                print(f"\n{c.witness}")
    return 1 if bad else 0


def cmd_params_matrix(args: argparse.Namespace) -> int:
    """Exit 0 when every cell is exact (every rule there is declared exact for its process)."""
    from specproof.properties.oracle import params
    from specproof.reference.proposers import PROPOSERS

    bad = [n for n in args.param or () if n not in params.PARAMETERS]
    bad += [n for n in args.proposer or () if n not in PROPOSERS]
    if bad:
        raise UsageError(f"--param/--proposer: unknown {bad[0]!r}")
    cells = params.params_matrix(args.param, args.proposer, progress_lines(args.progress))
    table = params.markdown(cells)
    print(table)
    lossy = [c for c in cells if c.verdict != "exact"]
    print(f"\n{len(cells)} cells, two steps enumerated on the 4-token target; {len(lossy)} not exact")
    write_json_to(args.json, [c.to_json() for c in cells])
    write_text(args.markdown, table)
    return 1 if lossy else 0


# --------------------------------------------------------------------------- rule

RULE_EPILOG = """\
exit status:
  0  every cell agrees with the rule's declaration
  1  some cell disagrees: a declared-exact process found lossy (the witness is printed), or a
     process found exact on every instance that the rule does not declare
  2  contract violation: the rule raised on valid input or returned an invalid Outcome
  4  usage error (bad RULE, unknown process, unwritable path)"""


def add_rule_parser(sub: Any) -> None:
    r = sub.add_parser(
        "rule",
        help="a new rule through the exact oracle: its matrix row, witnesses and a proof-note skeleton",
        description=(
            "Run a rule written against the choice interface through the exact oracle under every "
            "proposal process (the matrix's seeded instances), compare with what it declares, shrink "
            "a witness for every lossy process and write a proof-note skeleton. "
            "Guide: docs/adding-a-rule.md."
        ),
        epilog=RULE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument(
        "rule",
        metavar="RULE",
        help="path/to/file.py:NAME or module:NAME: a Rule, or a function (ch, step) -> Outcome "
        "with --exact-for",
    )
    r.add_argument(
        "--exact-for",
        nargs="*",
        metavar="PROCESS",
        help="for a function: the processes it claims to be exact for (none: declared exact for nothing)",
    )
    r.add_argument("--chain-only", action="store_true", default=None, help="for a function: chains only")
    r.add_argument(
        "--preserves",
        choices=("target", "greedy"),
        help="for a function: the law it preserves (default target)",
    )
    r.add_argument("--instances", type=int, default=16, help="seeded instances per process (default 16)")
    r.add_argument("--seed", type=int, default=0, help="seed of the instance draw (default 0)")
    r.add_argument(
        "--process", action="append", choices=list(PROCESSES), help="only this process (repeatable)"
    )
    r.add_argument("--no-shrink", action="store_true", help="report the smallest lossy seeded instance")
    r.add_argument("--note", metavar="PATH", help="write the proof-note skeleton (Markdown)")
    add_outputs(r, markdown="write the matrix row as Markdown", json="write the report as JSON")
    r.set_defaults(func=cmd_rule)


def cmd_rule(args: argparse.Namespace) -> int:
    from specproof.properties.oracle.rule_report import DECLARABLE, load_rule, loader_line, rule_report

    check_outputs(args, "note")
    unknown = sorted(set(args.exact_for or ()) - DECLARABLE)
    if unknown:
        known = ", ".join(sorted(DECLARABLE))
        raise UsageError(f"--exact-for: unknown process {', '.join(unknown)}; known: {known}")
    rule = load_rule(args.rule, args.exact_for, args.chain_only, args.preserves)
    report = rule_report(
        rule,
        instances=args.instances,
        seed=args.seed,
        processes=args.process,
        shrink=not args.no_shrink,
        source=args.rule,
    )
    report.loader = loader_line(args.rule, rule, function=args.exact_for is not None)
    print(report.summary())
    write_text(args.note, report.note_skeleton())
    write_json_to(args.json, report.to_json())
    write_text(args.markdown, report.markdown())
    return report.exit_code


# --------------------------------------------------------------------------- calibrate


def add_calibrate_parser(sub: Any) -> None:
    from specproof.properties.measure.calibrations import CALIBRATIONS, TOKEN_SECTIONS, TOKEN_TV

    c = sub.add_parser("calibrate", help="measure false-alarm rate and power of the audits' tests")
    runs = "; ".join(f"{cal.flag} {cal.runs}" for cal in CALIBRATIONS.values() if cal.mode)
    c.add_argument(
        "--runs",
        type=int,
        default=None,
        help=f"seeds per (backend, case) (default {CALIBRATIONS[''].runs}; {runs})",
    )
    for cal in CALIBRATIONS.values():
        if cal.mode:
            c.add_argument(f"--{cal.mode}", action="store_true", help=cal.what)
    c.add_argument(
        "--exact",
        action="append",
        metavar="ENGINE[@M]",
        help="--tokens: an exact engine for the false alarms and stopping rows (repeatable; default the "
        "calibration's own speculative engines, e.g. calibration.speculative[V=4096]@256)",
    )
    c.add_argument(
        "--tv",
        "--token-tv",
        dest="tv",
        type=float,
        default=None,
        help=f"--tokens: per-token TV the audits plan for (default {TOKEN_TV:g})",
    )
    c.add_argument(
        "--section",
        action="append",
        choices=TOKEN_SECTIONS,
        help="--tokens: only these sections (repeatable; default all)",
    )
    samples = "; ".join(
        f"{cal.flag} {cal.samples}" for cal in CALIBRATIONS.values() if cal.mode and cal.samples
    )
    c.add_argument(
        "--samples",
        type=int,
        default=None,
        help=f"steps per run (default {CALIBRATIONS[''].samples}; {samples}; --tokens plans its own)",
    )
    c.add_argument("--alpha", type=float, default=0.01, help="level of each run (default 0.01)")
    c.add_argument("--power-runs", type=int, default=20, help="seeds per lossy (backend, case) (default 20)")
    c.add_argument(
        "--only",
        action="append",
        metavar="ENGINE",
        help="--engine: only the rows of this engine (repeatable), e.g. alternative.sampling_params",
    )
    _add_endpoint_axes(c)
    add_outputs(c, markdown="write the table as Markdown", json="write the measurements as JSON")
    add_progress(c)
    c.set_defaults(func=cmd_calibrate)


def _add_endpoint_axes(c: Any) -> None:
    """``calibrate --endpoint``'s workload axes (one at a time, as in an audit)."""
    c.add_argument(
        "--completions",
        type=int,
        default=None,
        metavar="N",
        help="--endpoint: every audit on the completions axis (one and N completions a request): the "
        "independence test's false alarms, power on shared_choices",
    )
    c.add_argument(
        "--load",
        type=int,
        action="append",
        default=None,
        metavar="N",
        help="--endpoint: every audit on the load axis at these levels (repeatable, e.g. --load 1 --load 8), "
        "against a twin: the seed checks', background token test's and acceptance comparison's false "
        "alarms, power on batch_rows",
    )
    c.add_argument(
        "--prefix-cache",
        action="store_true",
        help="--endpoint: every audit cold and after a prefix-cache hit, against a twin: the acceptance "
        "comparison's false alarms, power on prefix_poison",
    )


def cmd_calibrate(args: argparse.Namespace) -> int:
    from specproof.properties.measure.calibrations import calibrate, chosen

    chosen(args)  # a misplaced flag is refused before anything runs
    table, doc = calibrate(args, progress_lines(args.progress) or (lambda s: None))
    write_json_to(args.json, doc)
    print(table)
    write_text(args.markdown, table)
    return 0


# --------------------------------------------------------------------------- bench


def add_bench_parser(sub: Any) -> None:
    be = sub.add_parser("bench", help="time the optimized engine against batched PyTorch and the reference")
    be.add_argument("--quick", action="store_true", help="small sizes and few calls (a smoke run)")
    be.add_argument(
        "--section",
        action="append",
        choices=("cpu", "audit", "gpu", "decode", "endpoint", "shard", "tokens"),
        help="only this section (repeatable; decode: the optimized decoding loop against the reference loop; "
        "tokens: the token test's own cost beside an engine's at V up to 151,936, and whole audits' memory; "
        "endpoint: the endpoint audit's sampling against a plain load generator on llama-server; "
        "shard: the engine audit's sampling on 1 and 2 local Ray workers, needs specproof[ray])",
    )
    add_outputs(be, markdown="write the tables as Markdown", json="write every measurement as JSON")
    add_progress(be, default="on")
    be.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from specproof.properties.bench import kernels as bench

    rows = bench.run(
        args.quick,
        tuple(args.section or ("cpu", "audit", "gpu")),
        progress_lines(args.progress) or (lambda s: None),
    )
    table = bench.markdown(rows)
    print(table)
    write_text(args.markdown, table)
    write_text(args.json, bench.to_json(rows))
    return 0


# --------------------------------------------------------------------------- e2e


def add_e2e_parser(sub: Any) -> None:
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
    add_progress(e)
    e.set_defaults(func=cmd_e2e)


def cmd_e2e(args: argparse.Namespace) -> int:
    from specproof.properties.e2e import check as e2e
    from specproof.reference.proposers import PROPOSERS

    check_outputs(args, "json")
    if args.steps < 1:
        raise UsageError(f"--steps must be >= 1, got {args.steps}")
    if args.runs < 0:
        raise UsageError(f"--runs must be >= 0, got {args.runs}")
    show = progress_lines(args.progress)
    if args.table:
        rows = e2e.table_rows(args.steps, args.seed, show, engine=args.engine)
        print(e2e.markdown_table(rows, args.steps))
        write_json_to(args.json, [r.to_json() for r in rows])
        return 0
    if args.proposer not in PROPOSERS:
        why = "is required (or --table)" if args.proposer is None else "is unknown"
        raise UsageError(f"proposer {args.proposer!r} {why}; available: {', '.join(PROPOSERS)}")
    proposer = PROPOSERS[args.proposer]
    names = [p.name for p in proposer.processes]
    if args.process is not None and args.process not in names:
        raise UsageError(f"--process {args.process!r} is not one of {args.proposer}'s: {', '.join(names)}")
    index = names.index(args.process) if args.process else 0
    rule = args.rule or proposer.default_rule
    if rule not in RULES:
        raise UsageError(f"--rule {rule!r} is unknown; rules: {', '.join(RULES)}")
    proc = proposer.processes[index]
    if not RULES[rule].applies_to(proc.chain):
        raise UsageError(f"--rule {rule!r} verifies chains only; {args.proposer} drafts trees ({proc.name})")
    if not args.calibration_temperature > 0:
        raise UsageError(f"--calibration-temperature must be > 0, got {args.calibration_temperature}")
    if args.report and args.report.lower().endswith(".svg") and not args.calibration:
        raise UsageError("--report PATH.svg holds the reliability diagrams: add --calibration")
    check_outputs(args, "report")
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
    print(result.summary())
    cals: list[Any] = []
    if args.calibration:
        result.calibration, cals = e2e.calibration(
            proposer, rule, args.seed, args.calibration_temperature, index, show
        )
        print("\n".join(e2e.calibration_lines(result.calibration, cals)))
    if args.report:
        e2e.write_report(args.report, result, cals)
    write_json_to(args.json, result.to_json())
    return result.exit_code


# --------------------------------------------------------------------------- conform, backends


def add_conform_parser(sub: Any) -> None:
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
    add_outputs(c, markdown="write the table as Markdown", json="write every row as JSON")
    add_progress(c)
    c.set_defaults(func=cmd_conform)


def cmd_conform(args: argparse.Namespace) -> int:
    from specproof.properties.audit.conform import run

    if not args.budget_seconds > 0:
        raise UsageError(f"--budget-seconds must be positive, got {args.budget_seconds}")
    report = run(
        args.backend or None,
        budget_seconds=args.budget_seconds,
        seed=args.seed,
        shrink_seconds=args.shrink_seconds,
        progress=progress_lines(args.progress),
    )
    table = report.markdown()
    print(table)
    write_text(args.markdown, table)
    write_json_to(args.json, report.to_json())
    return report.exit_code


def add_backends_parser(sub: Any) -> None:
    b = sub.add_parser("backends", help="list the registered verifier backends and engines")
    b.add_argument("--json", action="store_true", help="as JSON")
    b.add_argument("--kind", action="append", choices=("chain", "tree", "engine"), help="only this kind")
    b.add_argument("--group", action="append", metavar="GROUP", help="only this group (builtin, mutant, ...)")
    b.add_argument("--grep", metavar="TEXT", help="only names containing TEXT")
    b.set_defaults(func=cmd_backends)


def cmd_backends(args: argparse.Namespace) -> int:
    """Verifier backends (chain, tree) and engines (``specproof audit engine``), registered."""
    from specproof.properties.conformance.backends import all_backends
    from specproof.properties.engine.registry import list_engines

    def wanted(kind: str, name: str, group: str) -> bool:
        return (
            (not args.kind or kind in args.kind)
            and (not args.group or group in args.group)
            and (not args.grep or args.grep in name)
        )

    backends = [b for b in all_backends() if wanted(b.kind, b.name, b.group)]
    engines = [e for e in list_engines() if wanted("engine", e["name"], e["group"])]
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
