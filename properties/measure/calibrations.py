"""Every calibration ``specproof calibrate`` runs, in one table: the mode flag that picks it, the
flags only it takes, its defaults, the page under docs/measurements it writes, and how it runs.

Each calibration measures through :mod:`.rate` (seeded runs, the rate flagged, its binomial
interval) and returns its document (JSON) and its Markdown. The command reads this table for its
help, for which flags go with which mode (a flag given to a mode that does not take it is refused
by name, never ignored) and to run the mode; a test reads it against the parser and the pages.

To add a calibration: write its module here (a function from the options to ``(markdown,
document)``), and add a :class:`Calibration` row.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from specproof.reference.errors import UsageError

Say = Callable[[str], None]
#: what a calibration returns: its Markdown and its document (written by ``--json``)
Result = tuple[str, dict[str, Any]]

#: the per-token TV the token calibration's audits plan for, unless --tv says
TOKEN_TV = 0.05
#: the token calibration's sections (--section picks some)
TOKEN_SECTIONS = ("power", "false_alarms", "stopping", "side_by_side")


@dataclass(frozen=True)
class Calibration:
    """One mode of ``specproof calibrate``."""

    mode: str  # the flag's dest that picks it ("" for the default, the verifiers)
    what: str  # one line: what it measures
    runs: int  # the default of --runs
    samples: int | None  # the default of --samples; None where the mode takes no --samples
    takes: tuple[str, ...]  # the dests of the flags only this mode takes
    page: str  # the page that quotes its figures
    run: Callable[[argparse.Namespace, int, Say], Result]

    @property
    def flag(self) -> str:
        return f"--{self.mode}" if self.mode else "the verifiers' calibration (no mode flag)"


def _verifiers(args: argparse.Namespace, runs: int, say: Say) -> Result:
    from specproof.properties.measure import verifier_calibration as cal

    rows = cal.calibrate(runs, args.samples or 20000, args.alpha, args.power_runs, say)
    return cal.markdown(rows), {"rows": [asdict(r) for r in rows]}


def _deep(args: argparse.Namespace, runs: int, say: Say) -> Result:
    from specproof.properties.measure import verifier_calibration as cal

    rows = cal.calibrate_deep(runs, args.samples or 20000, args.alpha, args.power_runs, say)
    return cal.markdown_deep(rows), {"rows": [asdict(r) for r in rows]}


def _engine(args: argparse.Namespace, runs: int, say: Say) -> Result:
    from specproof.properties.measure.engine_calibration import calibration, calibration_markdown

    doc = calibration(runs, args.samples or 300, args.alpha, args.power_runs, say, args.only)
    return calibration_markdown(doc), doc


def _endpoint(args: argparse.Namespace, runs: int, say: Say) -> Result:
    from specproof.properties.engine.completions import check_completions
    from specproof.properties.measure.endpoint_calibration import calibrate_http

    completions = 1 if args.completions is None else args.completions
    doc = calibrate_http(
        runs,
        args.samples or 300,
        args.alpha,
        say,
        args.power_runs,
        completions=check_completions(completions, bool(args.load or args.prefix_cache)),
        loads=tuple(args.load or ()),
        prefix_cache=bool(args.prefix_cache),
    )
    return doc.pop("markdown"), doc


def _tokens(args: argparse.Namespace, runs: int, say: Say) -> Result:
    from specproof.properties.measure import token_calibration as tc
    from specproof.properties.measure import token_calibration_md

    tv = TOKEN_TV if args.tv is None else args.tv
    if not 0 < tv < 0.5:
        raise UsageError(f"--tv: a per-token TV in (0, 0.5), not {tv}")
    doc = tc.calibrate_tokens(
        runs,
        args.alpha,
        tv,
        args.power_runs,
        args.exact,
        args.section or TOKEN_SECTIONS,
        say,
    )
    return token_calibration_md.markdown(doc), doc


CALIBRATIONS: dict[str, Calibration] = {
    c.mode: c
    for c in (
        Calibration(
            "",
            "the verifier audit: false alarms of exact verifiers, power on lossy ones",
            100,
            20000,
            (),
            "docs/verifier-audit.md",
            _verifiers,
        ),
        Calibration(
            "deep",
            "the per-position tests on K = 8 cases: false alarms, and power on a deep-only mutant",
            300,
            20000,
            (),
            "docs/verifier-audit.md",
            _deep,
        ),
        Calibration(
            "engine",
            "the engine audit: false alarms on exact engines, power on the mutant loops",
            300,
            300,
            ("only",),
            "docs/measurements/engine-audit-calibration.md",
            _engine,
        ),
        Calibration(
            "endpoint",
            "the endpoint audit through HTTP: false alarms on the correct stand-in server, power on one "
            "that verifies greedily (or on the axis's planted bug)",
            300,
            300,
            ("completions", "load", "prefix_cache"),
            "docs/measurements/endpoint-calibration.md",
            _endpoint,
        ),
        Calibration(
            "tokens",
            "the token test: power against the information limit, false alarms of whole engine audits, "
            "stopping at any time, and the cells test beside it",
            300,
            None,
            ("exact", "tv", "section"),
            "docs/measurements/token-calibration.md",
            _tokens,
        ),
    )
}
#: the flags every mode takes
COMMON = ("runs", "alpha", "power_runs", "markdown", "json", "progress")


def chosen(args: argparse.Namespace) -> Calibration:
    """The calibration the parsed ``args`` pick: at most one mode flag; every flag given is one
    that mode takes (:class:`UsageError` naming the flag otherwise)."""
    modes = [m for m in CALIBRATIONS if m and getattr(args, m, False)]
    if len(modes) > 1:
        raise UsageError(f"calibrate: one mode at a time, got {' and '.join('--' + m for m in modes)}")
    cal = CALIBRATIONS[modes[0] if modes else ""]
    for mode, other in CALIBRATIONS.items():
        for dest in other.takes:
            if mode != cal.mode and dest not in cal.takes and _given(args, dest):
                flag = "--" + dest.replace("_", "-")
                raise UsageError(f"{flag} goes with {other.flag}, not {cal.flag}")
    if cal.samples is None and args.samples is not None:
        raise UsageError(f"--samples: {cal.flag} takes no sample size (it plans its own)")
    return cal


def _given(args: argparse.Namespace, dest: str) -> bool:
    v = getattr(args, dest, None)
    return v is not None and v is not False


def calibrate(args: argparse.Namespace, say: Say) -> Result:
    """Run the calibration ``args`` pick (:func:`chosen`) with its defaults where not given."""
    cal = chosen(args)
    runs = cal.runs if args.runs is None else args.runs
    if runs < 1 or args.power_runs < 1:
        raise UsageError("--runs and --power-runs: at least 1")
    return cal.run(args, runs, say)
