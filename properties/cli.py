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


def _e2e_row(proposer: Any, rule: str, steps: int, seed: int) -> dict[str, Any]:
    """One proposer x rule: the exact 2-step check on the small target, the sampled loop on the
    larger one."""
    import numpy as np

    from specproof.reference.decode import decode, e2e_models
    from specproof.reference.transformer import TransformerLM

    from .exact import multi_step_check

    process = proposer.processes[0]
    small, big = e2e_models()
    tv, exact_mean = multi_step_check(
        rule, process, TransformerLM(small), proposer.make_draft(small), (-1, 0, 1), (2, 0, 3, 2), steps=2
    )
    shape = (-1, 0, 1, 2)
    out = decode(
        big, proposer.make_draft(big), process, rule, shape, (3, 4), steps, np.random.default_rng(seed)
    )
    return {
        "proposer": proposer.name,
        "process": process,
        "rule": rule,
        "exact_check": {
            "vocab": small.vocab,
            "steps": 2,
            "chain_drafts": 2,
            "tv": float(tv),
            "lossless": bool(tv < 1e-12),  # float64 laws: equal up to rounding
            "mean_emitted_per_step": float(exact_mean),
        },
        "sampled": {
            "vocab": big.vocab,
            "drafts_per_step": len(shape) - 1,
            "steps": out.target_forwards,
            "emitted": sum(out.emitted_per_step),
            "mean_emitted_per_target_forward": out.mean_emitted,
        },
    }


def _cmd_e2e(args: argparse.Namespace) -> int:
    from specproof.reference.proposers import PLANNED, PROPOSERS

    if args.steps < 1:
        print(f"specproof e2e: --steps must be >= 1, got {args.steps}", file=sys.stderr)
        return 2
    if args.table:
        rows = []
        for p in PROPOSERS.values():
            rules = [r.name for r in RULES.values() if r.applies_to(True) and p.processes[0] in r.exact_for]
            for rule in rules + ["typical"]:
                rows.append(_e2e_row(p, rule, args.steps, args.seed))
        lines = [
            "| proposer (process) | rule | exact 2-step check | exact mean tokens / step | "
            f"sampled tokens / target forward ({args.steps} steps) |",
            "|---|---|---|---:|---:|",
        ]
        for r in rows:
            ex, sa = r["exact_check"], r["sampled"]
            verdict = "lossless" if ex["lossless"] else f"LOSSY (TV {ex['tv']:.3g})"
            lines.append(
                f"| {r['proposer']} ({r['process']}) | {r['rule']} | {verdict} | "
                f"{ex['mean_emitted_per_step']:.3f} | {sa['mean_emitted_per_target_forward']:.2f} |"
            )
        print("\n".join(lines))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=2)
                f.write("\n")
        return 0
    if args.proposer not in PROPOSERS:
        known = ", ".join(PROPOSERS)
        why = "is not built yet" if args.proposer in PLANNED else "is unknown"
        if args.proposer is None:
            why = "is required (or --table)"
        print(f"specproof e2e: proposer {args.proposer!r} {why}; available: {known}", file=sys.stderr)
        return 2
    proposer = PROPOSERS[args.proposer]
    rule = args.rule or proposer.default_rule
    if rule not in RULES or not RULES[rule].applies_to(True):
        print(f"specproof e2e: --rule {rule!r} is not a rule that verifies chains", file=sys.stderr)
        return 2
    report = _e2e_row(proposer, rule, args.steps, args.seed)
    ex, sa = report["exact_check"], report["sampled"]
    verdict = "LOSSLESS" if ex["lossless"] else "LOSSY"
    print(
        f"{proposer.name} ({report['process']}) verified by {rule}: {verdict} "
        f"(exact law of 2 steps on a {ex['vocab']}-token transformer: TV = {ex['tv']:.3g})"
    )
    print(
        f"  sampled on a {sa['vocab']}-token transformer: {sa['mean_emitted_per_target_forward']:.2f} "
        f"tokens per target forward over {sa['steps']} steps ({sa['drafts_per_step']} drafts each); "
        f"exact mean in the 2-step check (2 drafts each): {ex['mean_emitted_per_step']:.2f}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0 if ex["lossless"] else 1


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
    m.add_argument(
        "--progress",
        choices=("auto", "on", "off"),
        default="auto",
        help="progress on stderr (auto: on a terminal)",
    )
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
        choices=("builtin", "alternative", "mutant", "optimized"),
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
    e.add_argument("--proposer", help="draft, ngram (medusa, eagle1/2/3, mtp, dflash: not yet)")
    e.add_argument(
        "--table", action="store_true", help="every proposer x exact rule (and typical): the acceptance table"
    )
    e.add_argument("--rule", help="verification rule (default: the proposer's own)")
    e.add_argument("--steps", type=int, default=64, help="sampled steps (default 64)")
    e.add_argument("--seed", type=int, default=0, help="seed of the sampled run (default 0)")
    e.add_argument("--json", metavar="PATH", help="write the report as JSON")
    e.set_defaults(func=_cmd_e2e)

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
