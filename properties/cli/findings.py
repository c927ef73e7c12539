"""``specproof findings``: the findings in third-party engines (properties/measure/findings.py).

``list`` prints one line per finding; ``pages`` writes the written part of each page under
docs/findings/ from the table and the measurement JSON (``--check`` only says which differ, and
exits 1 if any does); ``reproduce SLUG`` runs the finding's tests against the engine installed
here and says whether it still holds (exit 0 it holds, 1 it does not hold as written, 3 it did
not run in full: a test skipped, the engine is not installed).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from specproof.properties.cli.common import check_outputs, write_json_to
from specproof.reference.errors import UsageError


def add_findings_parser(sub: Any) -> None:
    g = sub.add_parser(
        "findings",
        help="the findings in third-party engines: list them, write their pages, re-run one",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("action", choices=("list", "pages", "reproduce"))
    g.add_argument("slug", nargs="?", help="reproduce: the finding (see `specproof findings list`)")
    g.add_argument("--check", action="store_true", help="pages: write nothing, say which pages differ")
    g.add_argument("--json", metavar="PATH", help="reproduce: write each test's outcome as JSON")
    g.set_defaults(func=cmd_findings)


def cmd_findings(args: argparse.Namespace) -> int:
    from specproof.properties.measure import pages
    from specproof.properties.measure.findings import FINDINGS, by_slug

    if args.action != "list" and not (pages.ROOT / "tests").is_dir():
        raise UsageError(f"findings {args.action}: needs the repository's checkout (its docs/ and tests/)")
    if args.action != "reproduce" and (args.slug or args.json):
        raise UsageError(f"findings {args.action}: takes no finding and no --json (reproduce does)")
    if args.action == "list":
        for f in FINDINGS:
            print(f"{f.slug:48s} {f.system} {f.version}: {f.verdict}")
        return 0
    if args.action == "pages":
        if args.check:
            stale = pages.stale_pages()
            for p in stale:
                print(f"differs from the table and the JSON: {p.relative_to(pages.ROOT)}")
            return 1 if stale else 0
        for p in pages.write_pages():
            print(f"wrote {p.relative_to(pages.ROOT)}")
        return 0
    if not args.slug:
        raise UsageError("findings reproduce: name a finding (`specproof findings list` lists them)")
    finding = by_slug(args.slug)
    check_outputs(args, "json")
    found = pages.reproduce(finding, lambda m: print(m, file=sys.stderr, flush=True))
    print(found.summary())
    if args.json:
        doc: dict[str, Any] = {"finding": found.finding, "installed": found.installed}
        doc["date"] = datetime.date.today().isoformat()
        doc["state"] = found.state
        doc["tests"] = [{"test": t, "outcome": o, "message": m} for t, o, m in found.outcomes]
        doc["places"] = [{"place": p, "state": state} for p, state in found.places]
        write_json_to(args.json, doc)
    return {"holds": 0, "changed": 1, "not_run": 3}[found.state]
