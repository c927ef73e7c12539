"""What every subcommand of ``specproof`` shares: progress on stderr, output paths checked
before a run, results written atomically, and audit configs built from options.

The library returns results; the command line prints them. Options that configure a plan
default to ``None`` here and take their defaults from the config class
(:mod:`specproof.properties.plan`), so Python, the command line and pytest share one set of
defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from specproof.properties.options import Flag, defaults, flags
from specproof.properties.outputs import check_output_path, report_format, write_json
from specproof.properties.plan import PlanConfig
from specproof.reference.errors import UsageError

C = TypeVar("C", bound=PlanConfig)
T = TypeVar("T")

#: config field -> command-line option, for messages that name what the user typed (the fields
#: without a flag table of their own)
OPTION_NAMES = {
    "large_vocab_tv": "--large-vocab-tv",
    "batch": "--batch",
    "call_timeout": "--call-timeout",
    "shrink": "--shrink",
    "shrink_seconds": "--shrink-seconds",
}


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if value is None:
        return "none"
    return str(value)


def add_flags(
    group: Any,
    cls: type,
    only: tuple[str, ...] | None = None,
    skip: tuple[str, ...] = (),
    also: type | None = None,
) -> None:
    """The command line's options for ``cls``'s fields, from its flag table (:mod:`..options`):
    each stores its text (read when the options are built, so that a bad value is a usage error
    naming the flag), default None (the class's default applies); the help ends with the default
    (``also``: a second class whose default is shown beside it, as "engine X")."""
    second = defaults(also) if also is not None else {}
    for name, flag in flags(cls).items():
        if flag.cli is None or flag.positional or name in skip or (only is not None and name not in only):
            continue
        default = defaults(cls).get(name)
        shown = f"default {_shown(default)}"
        if name in second and second[name] != default:
            shown += f"; engine {_shown(second[name])}"
        kw: dict[str, Any] = {"dest": name, "default": None, "help": f"{flag.help} ({shown})"}
        if flag.switch:
            kw["action"] = argparse.BooleanOptionalAction
        elif flag.repeat:
            kw["action"] = "append"
        if flag.metavar and not flag.switch:
            kw["metavar"] = flag.metavar
        if flag.choices and not flag.switch:
            kw["choices"] = list(flag.choices)
        group.add_argument(flag.cli, *flag.aliases, **kw)


def read_flag(flag: Flag, text: Any, name: str) -> Any:
    """One option's text read as its field's value (a tuple for a repeated one), or a
    :class:`UsageError` naming the flag."""
    if text is None or flag.switch:
        return text
    if flag.repeat and isinstance(text, (list, tuple)):
        return tuple(read_flag(dataclasses.replace(flag, repeat=False), t, name) for t in text)
    if flag.parse is None:
        return text
    try:
        return flag.parse(text)
    except UsageError:
        raise
    except (TypeError, ValueError) as e:
        what = getattr(flag.parse, "__name__", "value")
        raise UsageError(f"{flag.cli or name}: cannot read {text!r} as {what} ({e})") from e


def from_args(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The values of ``cls``'s fields the command line was given (None where not given)."""
    out: dict[str, Any] = {}
    for name, flag in flags(cls).items():
        if flag.cli is None or flag.positional or not hasattr(args, name):
            continue
        out[name] = read_flag(flag, getattr(args, name), name)
    return out


def built(cls: type[T], options: dict[str, Any]) -> T:
    """``cls`` from the command line's options, its validation errors worded in the flags'
    names."""
    from specproof.properties.options import build

    names = {n: f.cli for n, f in flags(cls).items() if f.cli and not f.positional}
    try:
        return build(cls, options, door="cli")
    except UsageError as e:
        field, _, rest = str(e).partition(":")
        if field in names and rest:
            raise UsageError(f"{names[field]}:{rest}") from e
        if field in OPTION_NAMES and rest:
            raise UsageError(f"{OPTION_NAMES[field]}:{rest}") from e
        raise


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


def add_outputs(g: argparse.ArgumentParser, markdown: str, json: str) -> None:
    """``--markdown PATH`` and ``--json PATH`` with their help texts; :func:`main` checks both
    are writable before the command runs."""
    g.add_argument("--markdown", metavar="PATH", help=markdown)
    g.add_argument("--json", metavar="PATH", help=json)
    g.set_defaults(outputs=("markdown", "json"))


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
    return built(cls, options)


def plan_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options every audit plans with, as given (None where not given)."""
    return from_args(args, PlanConfig)


class TvIn(argparse.Action):
    """``--token-tv`` and ``--joint-tv``: the value of ``--tv`` (its text, read with the plan's
    other options), and the unit it was given in, checked against the audit once its kind and
    tests are known (``specproof.properties.cli.audit.check_tv_unit``, ``cmd_llamacpp``)."""

    def __init__(self, *args: Any, unit: str, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.unit = unit

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.tv_unit = (self.unit, option)
