"""What every subcommand of ``specproof`` shares: progress on stderr, output paths checked
before a run, results written atomically, and audit configs built from options.

The library returns results; the command line prints them. Options that configure a plan
default to ``None`` here and take their defaults from the config class
(:mod:`specproof.properties.plan`), so Python, the command line and pytest share one set of
defaults.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from specproof.properties.outputs import check_output_path, report_format, write_json
from specproof.properties.plan import PlanConfig, build_config
from specproof.reference.errors import UsageError

C = TypeVar("C", bound=PlanConfig)

#: config field -> command-line option, for messages that name what the user typed
OPTION_NAMES = {
    "alpha": "--alpha",
    "tv": "--tv",
    "power": "--power",
    "seed": "--seed",
    "samples": "--samples",
    "max_cells": "--cells",
    "budget_seconds": "--budget-seconds",
    "large_vocab_tv": "--large-vocab-tv",
    "batch": "--batch",
    "call_timeout": "--call-timeout",
    "shrink": "--shrink",
    "shrink_seconds": "--shrink-seconds",
    "looks": "--looks",
    "stop_early": "--stop-early",
}


def show_progress(mode: str) -> bool:
    """``--progress auto`` shows progress on a terminal, never under CI (``CI`` set)."""
    return mode == "on" or (mode == "auto" and sys.stderr.isatty() and not os.environ.get("CI"))


def progress_bar(enabled: bool, label: str) -> Callable[[str, float], None]:
    """A one-line bar on stderr for an audit's ``progress(what, fraction)`` callback."""

    def show(what: str, frac: float) -> None:
        if enabled:
            done = int(30 * max(0.0, min(1.0, frac)))
            sys.stderr.write(f"\r{label[:28]:<28} [{'#' * done}{'.' * (30 - done)}] {what[:30]:<30}")
            sys.stderr.flush()

    return show


def end_bar(enabled: bool) -> None:
    if enabled:
        sys.stderr.write("\n")
        sys.stderr.flush()


def progress_lines(mode: str) -> Callable[[str], None] | None:
    """A ``progress(message)`` callback printing whole lines on stderr, or None when off."""
    if not show_progress(mode):
        return None
    return lambda msg: print(msg, file=sys.stderr, flush=True)


def counter(enabled: bool) -> Callable[[int, int, str], None]:
    """A ``progress(done, total, what)`` callback: ``[done/total] what`` on one line."""

    def show(done: int, total: int, what: str) -> None:
        if enabled:
            sys.stderr.write(f"\r[{done}/{total}] {what[:70]:<70}")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()

    return show


def add_progress(parser: argparse.ArgumentParser, default: str = "auto") -> None:
    parser.add_argument(
        "--progress",
        choices=("auto", "on", "off"),
        default=default,
        help="progress on stderr (auto: on a terminal, not under CI)",
    )


def check_outputs(args: argparse.Namespace, *options: str) -> None:
    """Refuse unwritable output paths before anything runs (``options``: attribute names such as
    ``json``, ``report``, ``markdown``); a report's ending must name its format."""
    for name in options:
        path = getattr(args, name, None)
        flag = "--" + name.replace("_", "-")
        check_output_path(path, flag)
        if name == "report" and path is not None:
            report_format(path, flag)


def write_text(path: str | None, text: str) -> None:
    """``text`` (with a final newline) to ``path`` atomically, when a path was given."""
    if path:
        from specproof.properties.outputs import atomic_write

        atomic_write(path, text if text.endswith("\n") else text + "\n")


def write_json_to(path: str | None, data: Any) -> None:
    if path:
        write_json(path, data)


def config_from(cls: type[C], options: dict[str, Any]) -> C:
    """``cls`` from the given options (None: the class's default), with a validation error
    worded in the command line's option names."""
    try:
        return build_config(cls, options)
    except UsageError as e:
        field, _, rest = str(e).partition(":")
        if field in OPTION_NAMES and rest:
            raise UsageError(f"{OPTION_NAMES[field]}:{rest}") from e
        raise


def plan_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options every audit plans with, as given (None where not given)."""
    return {
        "alpha": args.alpha,
        "tv": args.tv,
        "power": args.power,
        "seed": args.seed,
        "samples": args.samples,
        "max_cells": args.cells,
        "budget_seconds": args.budget_seconds,
        "stop_early": True if getattr(args, "stop_early", False) else None,
    }


def parse_ids(text: str, option: str) -> tuple[int, ...]:
    """Token ids written ``'0 6'`` or ``0,6``: at least one, none negative."""
    try:
        ids = tuple(int(x) for x in text.replace(",", " ").split())
    except ValueError as e:
        raise UsageError(f"{option}: {text!r} is not a list of token ids") from e
    if not ids or any(x < 0 for x in ids):
        raise UsageError(f"{option}: {text!r} must hold at least one non-negative id")
    return ids


def parse_param(text: str, token_text: Sequence[str] | None = None) -> tuple[str, Any]:
    """One ``--param NAME=VALUE`` as a request parameter (reference/sampling.py): a number, a
    ``logit_bias`` as ``ID:BIAS,ID:BIAS`` (``-inf`` bans), ``bad_words`` as ``IDS;IDS`` (ids
    separated by spaces or commas), a ``regex`` (the grammar, over the tokens' texts:
    ``token_text``), or a scope name. An unknown NAME is a usage error naming it."""
    import math

    from specproof.reference.sampling import Grammar, Sampling

    name, sep, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep:
        raise UsageError(f"--param: {text!r} is not NAME=VALUE")
    known = {f for f in Sampling.__dataclass_fields__ if f not in ("extra", "grammar", "temperature")}
    try:
        if name == "regex":
            if token_text is None:
                raise UsageError("--param regex: needs the tokens' texts (--token-map FILE)")
            return "grammar", Grammar.from_regex(value, token_text)
        if name == "logit_bias":
            pairs = [p.split(":") for p in value.split(",") if p.strip()]
            return name, tuple((int(i), -math.inf if b.strip() == "-inf" else float(b)) for i, b in pairs)
        if name == "bad_words":
            return name, tuple(parse_ids(w, "--param bad_words") for w in value.split(";") if w.strip())
        if name in ("repetition_scope", "presence_scope"):
            return name, value
        if name in ("top_k", "no_repeat_ngram_size", "min_new_tokens", "eos"):
            return name, int(value)
        if name in known:
            return name, float(value)
    except ValueError as e:
        raise UsageError(f"--param {name}: cannot read {value!r} ({e})") from e
    raise UsageError(
        f"--param {name}: not a sampling parameter (known: {', '.join(sorted(known | {'regex'}))})"
    )
