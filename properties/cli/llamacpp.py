"""``specproof llamacpp``: the pinned llama.cpp the served-engine tests run. ``build`` it once
(cached outside the clone), say where it is (``info``), audit every served configuration on
loopback (``table``), install llama-cpp-python's server on the same library (``install-python``),
and put the draft-model server through the token test with a recorded-traffic audit of what it
served (``tokens``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from specproof.properties.cli.common import (
    TvIn,
    add_outputs,
    add_progress,
    progress_bar,
    progress_lines,
    show_progress,
    write_json_to,
    write_text,
)
from specproof.reference.errors import UsageError


def add_llamacpp_parser(sub: Any) -> None:
    g = sub.add_parser(
        "llamacpp",
        help="the pinned llama.cpp the served-engine tests run: build it, say where it is, audit it",
        description="build: the pinned llama.cpp, once, cached outside the clone (about 12 to 15 min cold "
        "on 2 cores); info: version, commit, cache; table: every served configuration audited on loopback; "
        "install-python: llama-cpp-python's server on the same pinned library (12 min cold); tokens: the "
        "draft-model server at 128 tokens a request through the token test, and a recorded-traffic audit "
        "of what it served.",
    )
    g.add_argument("action", choices=("build", "info", "table", "install-python", "tokens"))
    g.add_argument("--only", action="append", metavar="NAME", help="table: only this configuration")
    g.add_argument(
        "--tv",
        type=float,
        help="table: the joint TV the cells test's plan detects (default 0.1; --joint-tv); tokens: the "
        "per-token TV (default 0.01; --token-tv)",
    )
    g.add_argument(
        "--joint-tv", dest="tv", type=float, metavar="TV", action=TvIn, unit="joint", help="table: --tv"
    )
    g.add_argument(
        "--token-tv", dest="tv", type=float, metavar="TV", action=TvIn, unit="per token", help="tokens: --tv"
    )
    g.add_argument("--samples", type=int, help="table, tokens: fixed samples per case instead of the plan")
    g.add_argument(
        "--budget-seconds",
        type=float,
        help="tokens: the endpoint audit's time guard (default 3600 s; what cannot finish in it is "
        "underpowered, never pass)",
    )
    g.add_argument(
        "--records",
        type=int,
        help="tokens: requests per setting recorded as traffic (default: the plan's samples per case)",
    )
    g.add_argument(
        "--traffic", metavar="PATH", help="tokens: where to write the recorded traffic (JSON lines)"
    )
    add_outputs(g, markdown="table: write it as Markdown", json="table: write every audit as JSON")
    add_progress(g)
    g.set_defaults(func=cmd_llamacpp)


def cmd_llamacpp(args: argparse.Namespace) -> int:
    """build: exit 0 with the folder; table: 0 when every verdict is the expected one."""
    from specproof.properties.servers import llamacpp

    if args.action == "build":
        print(llamacpp.ensure_built(progress=lambda m: print(m, file=sys.stderr, flush=True)))
        return 0
    if args.action == "info":
        print(json.dumps(llamacpp.info(), indent=2))
        return 0
    if args.action == "install-python":
        from specproof.properties.servers import llamacpp_python

        llamacpp_python.ensure_installed(progress=lambda m: print(m, file=sys.stderr, flush=True))
        print(json.dumps(llamacpp_python.info(), indent=2))
        return 0
    from specproof.properties.engine.audit import EngineAuditConfig
    from specproof.properties.measure import llamacpp_suite as suite
    from specproof.properties.plan import build_config

    unit, option = getattr(args, "tv_unit", None) or (None, None)
    if unit is not None and (unit == "joint") != (args.action == "table"):
        want = "--joint-tv (table)" if args.action == "table" else "--token-tv (tokens)"
        raise UsageError(f"{option}: not the unit of {args.action}'s plan; give {want}, or --tv")
    if args.action == "tokens":
        return _llamacpp_tokens(args)
    unknown = [n for n in args.only or () if n not in suite.BY_NAME]
    if unknown:
        raise UsageError(f"--only: unknown {unknown[0]!r}; configurations: {', '.join(suite.BY_NAME)}")
    # the table reads the joint law of M = 4 with the cells test, as its figures were measured
    tv = 0.1 if args.tv is None else args.tv
    config = build_config(EngineAuditConfig, {"tv": tv, "samples": args.samples, "test": "cells"})
    results = suite.table(config, args.only, progress_lines(args.progress))
    text = suite.markdown(results, config)
    print(text)
    for r in results:
        print(r.summary())
    write_text(args.markdown, text)
    skipped = [{"configuration": name, "reason": why} for name, why in getattr(results, "skipped", ())]
    write_json_to(args.json, {"audits": [r.to_json() for r in results], "skipped": skipped})
    return 0


def _llamacpp_tokens(args: argparse.Namespace) -> int:
    """``specproof llamacpp tokens``: exit 0 when the law held in both audits at their plan (the
    endpoint's verdict may still be ``misreported``: the server reports wrong probabilities for
    drafts); lossy's exit code when either is lossy, else underpowered's when either ran short."""
    import tempfile
    from pathlib import Path

    from specproof.properties.engine.audit import EngineAuditConfig
    from specproof.properties.measure import llamacpp_suite as suite
    from specproof.properties.plan import build_config
    from specproof.properties.verdicts import Verdict

    tv = 0.01 if args.tv is None else args.tv
    budget = 3600.0 if args.budget_seconds is None else args.budget_seconds
    values = {"tv": tv, "samples": args.samples, "test": "tokens", "budget_seconds": budget}
    config = build_config(EngineAuditConfig, values)
    bar = progress_bar(show_progress(args.progress), suite.LONG.name)
    with tempfile.TemporaryDirectory(prefix="specproof-traffic-") as tmp:
        where = args.traffic or str(Path(tmp) / "llama-server-traffic.jsonl")
        found = suite.long_audit(config, args.records, where, bar)
    text = suite.long_markdown(found, config)
    print(text)
    print(found.summary())
    write_text(args.markdown, text)
    write_json_to(args.json, found.to_json())
    verdicts = (found.endpoint.verdict, found.traffic.verdict)
    for worst in (Verdict.LOSSY, Verdict.UNDERPOWERED):  # a short run never exits as a pass
        if worst in verdicts:
            return worst.exit_code
    return 0
