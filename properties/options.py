"""How an option reaches an audit from each of its three doors: Python, the command line, pytest.

Every options class of the run layer (the plan, the engine request, the endpoint's options,
sharding) is a dataclass whose field defaults are the one written default of each option, and
whose class attribute ``FLAGS`` says, per field, how the command line and the pytest plugin spell
it (:class:`Flag`): its flag, help, how its text is read, whether it repeats, and an example value
other than the default (the doors' test gives it through every door and checks it arrives). A
door that must not take a field's default says so in the flag itself (``door_defaults``, with the
reason), so even an exception is written once.

:func:`flags` merges ``FLAGS`` along the class's bases; :func:`build` makes an instance from the
options given (``None``: not given, the default), refusing an unknown name with the list of
known ones. The command line and the plugin derive their options from these tables
(:mod:`specproof.properties.cli.common`, :mod:`specproof.properties.pytest_plugin`); nothing here
imports torch, so ``specproof --help`` is fast.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from specproof.reference.errors import UsageError

DOORS = ("python", "cli", "pytest")


@dataclass(frozen=True)
class Flag:
    """How one field is reached beside Python (module docstring)."""

    cli: str | None  # the command line's flag ("--tokens"); None: the field has no flag of its own
    help: str
    metavar: str | None = None
    #: text -> value, for the command line and pytest (None: the text as is)
    parse: Callable[[str], Any] | None = None
    #: the flag may be given several times; the field then holds a tuple of the parsed values
    repeat: bool = False
    #: the pytest option; "" derives it from the class's pytest prefix and the CLI flag
    pytest: str | None = ""
    #: a value other than the default, in the field's own type (the doors' test sends it)
    example: Any = None
    #: the same example as text, for the command line and pytest (derived from it when None)
    example_text: str | list[str] | None = None
    #: choices the flag accepts
    choices: tuple[str, ...] | None = None
    #: doors this field cannot be reached from, with the reason (e.g. {"cli": "an object"})
    absent: dict[str, str] = field(default_factory=dict)
    #: doors whose default differs from the class's on purpose: door -> (value, reason)
    door_defaults: dict[str, tuple[Any, str]] = field(default_factory=dict)
    #: a flag that is on or off (the command line's store_true; the field a bool)
    switch: bool = False
    #: other spellings the command line still accepts (an old name), and pytest's
    aliases: tuple[str, ...] = ()
    pytest_aliases: tuple[str, ...] = ()

    @property
    def positional(self) -> bool:
        """A positional argument of the command line (``TARGET``, ``URL``), not a flag."""
        return self.cli is not None and not self.cli.startswith("-")

    def pytest_flag(self, prefix: str) -> str | None:
        if self.pytest is None or self.cli is None and not self.pytest:
            return None
        return self.pytest or f"--{prefix}-{self.cli.lstrip('-')}"  # type: ignore[union-attr]

    def reaches(self, door: str) -> bool:
        return door not in self.absent

    def text(self) -> list[str]:
        """The example as the words a user types after the flag (one per repetition)."""
        if self.example_text is not None:
            return [self.example_text] if isinstance(self.example_text, str) else list(self.example_text)
        values = self.example if self.repeat else (self.example,)
        return [str(v) for v in values]


T = TypeVar("T")


def flags(cls: type) -> dict[str, Flag]:
    """``cls``'s ``FLAGS`` merged along its bases (the nearest class wins), for its fields only."""
    merged: dict[str, Flag] = {}
    for base in reversed(cls.__mro__):
        merged.update(getattr(base, "FLAGS", None) or {})
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in merged.items() if k in names}


def defaults(cls: type) -> dict[str, Any]:
    """The default of every field of a dataclass (what a door shows in its help)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def door_default(cls: type, name: str, door: str) -> Any:
    """The default of field ``name`` as seen from ``door`` (the class's, unless the flag says)."""
    flag = flags(cls).get(name)
    if flag is not None and door in flag.door_defaults:
        return flag.door_defaults[door][0]
    return defaults(cls)[name]


#: the TV under a name that says its unit, as the command line's ``--token-tv`` and ``--joint-tv``:
#: per emitted token (the token test's plan) or of the M tokens' joint law (the cells test's)
UNIT_TV = {"token_tv": "per token", "joint_tv": "joint"}


def _unit_tv(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with ``token_tv`` or ``joint_tv`` read as ``tv``, refused where the unit is not
    the one the audit's plan reads (``test="cells"``: joint; otherwise per token)."""
    named = [k for k in UNIT_TV if options.get(k) is not None]
    out = {k: v for k, v in options.items() if k not in UNIT_TV}
    if not named:
        return out
    if len(named) > 1 or options.get("tv") is not None:
        raise UsageError(f"{named[-1]}: give the TV once (tv, token_tv or joint_tv)")
    key, cells = named[0], options.get("test") == "cells"
    if key == "token_tv" and cells:
        raise UsageError(
            "token_tv: with test='cells' the plan is the cells test's, of a joint TV: give joint_tv"
        )
    if key == "joint_tv" and not cells:
        raise UsageError(
            "joint_tv: the joint TV plans the cells test alone (test='cells'); the token test's plan "
            "is per token: give token_tv"
        )
    out["tv"] = options[key]
    return out


def build(cls: type[T], options: dict[str, Any], door: str = "python") -> T:
    """``cls`` from the options given (``None``: not given: the default, or the door's own),
    validated where the class has ``validate``. An unknown name is a :class:`UsageError` that
    lists the known ones. Where the class plans by a TV of either unit (it has ``tv`` and
    ``test``), ``token_tv`` and ``joint_tv`` name it with its unit (:data:`UNIT_TV`)."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    if "tv" in names and "test" in names:
        options = _unit_tv(options)
    unknown = sorted(k for k in options if k not in names)
    if unknown:
        raise UsageError(
            f"{unknown[0]}: not an option of {cls.__name__} (options: {', '.join(sorted(names))})"
        )
    given = {k: v for k, v in options.items() if v is not None}
    for name, flag in flags(cls).items():
        if name not in given and door in flag.door_defaults:
            given[name] = flag.door_defaults[door][0]
    obj = cls(**given)
    check = getattr(obj, "validate", None)
    if callable(check):
        check()
    return obj


def reachable(cls: type) -> Iterator[tuple[str, Flag | None]]:
    """Every field with its flag (None: a field no flag describes, which the doors' test refuses)."""
    table = flags(cls)
    for f in dataclasses.fields(cls):
        yield f.name, table.get(f.name)
