"""The ``specproof`` command.

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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
