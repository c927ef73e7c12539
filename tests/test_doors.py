"""One way in: every field of the run layer reaches the audits from all three doors, with one default.

The engine and endpoint audits are reached from Python (``specproof.audit_engine``,
``specproof.audit_endpoint``), the command line (``specproof audit engine|endpoint``) and the
pytest plugin (``--specproof-engine``, ``--specproof-endpoint``). Each door only translates what
it was given into the run layer's values (:mod:`specproof.properties.run`). These tests send each
field's example value through each door and check that it arrives, and check that a door given
nothing makes the class's own default (or the default the field's flag declares for that door,
with its reason: pytest runs no time guard unless asked).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

import pytest

import specproof
from specproof.properties import pytest_plugin
from specproof.properties.cli import audit as cli_audit
from specproof.properties.cli import build_parser
from specproof.properties.options import DOORS, door_default, flags, reachable
from specproof.properties.run import (
    DOOR_CLASSES,
    EndpointOptions,
    EngineAuditConfig,
    EngineRequest,
    ShardOptions,
)

#: the facade's keyword for a field whose keyword is not its name
FACADE_NAME = {(EngineRequest, "target"): None, (EndpointOptions, "urls"): None}


def fields_of(cls: type) -> list[tuple[str, Any]]:
    return [(name, flag) for name, flag in reachable(cls)]


CASES = [(cls, name) for cls in DOOR_CLASSES for name, _ in fields_of(cls)]
IDS = [f"{cls.__name__}.{name}" for cls, name in CASES]


@pytest.mark.parametrize("cls", list(DOOR_CLASSES), ids=lambda c: c.__name__)
def test_every_field_has_a_flag_and_reaches_every_door_or_says_why(cls):
    for name, flag in fields_of(cls):
        assert flag is not None, f"{cls.__name__}.{name} has no flag: no door but Python reaches it"
        for door in DOORS:
            assert flag.reaches(door) or flag.absent[door], f"{name}: absent from {door} without a reason"
        default = {f.name: f.default for f in dataclasses.fields(cls)}[name]
        assert flag.example != default, f"{cls.__name__}.{name}: its example is its default"


# --------------------------------------------------------------------------- the command line


def cli_values(argv: list[str]) -> dict[type, Any]:
    args = build_parser().parse_args(argv)
    values: dict[type, Any] = {
        EngineAuditConfig: cli_audit.engine_config(args),
        ShardOptions: cli_audit.shard_options(args),
    }
    if args.kind == "endpoint":
        values[EndpointOptions] = cli_audit.endpoint_options(args)
        values[EngineRequest] = cli_audit.engine_request(args)
    else:
        values[EngineRequest] = cli_audit.engine_request(args, args.target)
    return values


def example_words(flag: Any, tmp_path: Any) -> list[str]:
    words = flag.text()
    if "TOKEN_MAP_FILE" in words:
        path = tmp_path / "map.json"
        path.write_text(json.dumps(list(flag.example)))
        words = [str(path) if w == "TOKEN_MAP_FILE" else w for w in words]
    return words


def test_the_command_line_given_nothing_makes_every_default():
    values = cli_values(["audit", "engine", "reference.direct"])
    assert values[EngineRequest] == EngineRequest(target="reference.direct")
    assert values[EngineAuditConfig] == EngineAuditConfig()
    assert values[ShardOptions] == ShardOptions()
    endpoint = cli_values(["audit", "endpoint", "http://127.0.0.1:1"])
    assert endpoint[EndpointOptions] == EndpointOptions(urls=("http://127.0.0.1:1",))
    assert endpoint[EngineRequest] == EngineRequest()


@pytest.mark.parametrize(("cls", "name"), CASES, ids=IDS)
def test_the_command_line_reaches_the_field(cls, name, tmp_path):
    flag = flags(cls)[name]
    if not flag.reaches("cli"):
        pytest.skip(f"not on the command line: {flag.absent['cli']}")
    kind = "endpoint" if cls is EndpointOptions else "engine"
    if flag.positional:
        argv = ["audit", kind, *flag.text()[:1]]
    else:
        base = ["audit", kind, "http://127.0.0.1:9" if kind == "endpoint" else "reference.direct"]
        words = example_words(flag, tmp_path)
        argv = base + ([flag.cli] if flag.switch and flag.example else [])
        if flag.switch and not flag.example:
            argv = base + ["--no-" + flag.cli.lstrip("-")]
        for w in [] if flag.switch else words:
            argv += [flag.cli, w]
    assert getattr(cli_values(argv)[cls], name) == (
        flag.example if not (flag.positional and flag.repeat) else flag.example[:1]
    )


# --------------------------------------------------------------------------- pytest


class _Group:
    """Records the plugin's options on an argparse parser (pytest's own parser is argparse)."""

    def __init__(self) -> None:
        self.parser = argparse.ArgumentParser()

    def addoption(self, *names: str, **kw: Any) -> None:
        self.parser.add_argument(*names, **kw)

    def getgroup(self, *a: Any, **k: Any) -> _Group:
        return self


class _Config:
    def __init__(self, ns: argparse.Namespace) -> None:
        self.ns, self.stash = ns, {}

    def getoption(self, dest: str) -> Any:
        return getattr(self.ns, dest)


def pytest_values(argv: list[str]) -> dict[type, Any]:
    group = _Group()
    pytest_plugin.pytest_addoption(group)  # type: ignore[arg-type]
    return pytest_plugin.door_values(_Config(group.parser.parse_args(argv)))  # type: ignore[arg-type]


def test_pytest_given_nothing_makes_every_default_but_the_declared_ones():
    values = pytest_values([])
    for cls in DOOR_CLASSES:
        for name, _ in fields_of(cls):
            assert getattr(values[cls], name) == door_default(cls, name, "pytest"), f"{cls.__name__}.{name}"
    declared = {
        (cls.__name__, n)
        for cls in DOOR_CLASSES
        for n, f in flags(cls).items()
        if "pytest" in f.door_defaults
    }
    assert declared == {("EngineAuditConfig", "budget_seconds")}  # no guard in CI unless asked
    assert values[EngineAuditConfig].budget_seconds == float("inf")


@pytest.mark.parametrize(("cls", "name"), CASES, ids=IDS)
def test_pytest_reaches_the_field(cls, name, tmp_path):
    flag = flags(cls)[name]
    if not flag.reaches("pytest"):
        pytest.skip(f"not in pytest: {flag.absent['pytest']}")
    option = flag.pytest_flag(DOOR_CLASSES[cls])
    if flag.switch:
        argv = [option if flag.example else "--no-" + option.lstrip("-")]
    else:
        argv = [w for word in example_words(flag, tmp_path) for w in (option, word)]
    assert getattr(pytest_values(argv)[cls], name) == flag.example


# --------------------------------------------------------------------------- Python


@pytest.fixture
def captured(monkeypatch):
    """The run layer's values the facade builds (the audits themselves are not run)."""
    seen: dict[type, Any] = {}

    def run_engine(request, plan, shard, progress=None, announce=None, spec=None):
        seen.update({EngineRequest: request, EngineAuditConfig: plan, ShardOptions: shard})
        return "ran"

    def run_endpoint(options, request, plan, shard, progress=None, announce=None, transports=None):
        seen.update({EndpointOptions: options, EngineRequest: request, EngineAuditConfig: plan})
        seen[ShardOptions] = shard
        return "ran"

    import specproof.properties.run as run

    monkeypatch.setattr(run, "run_engine", run_engine)
    monkeypatch.setattr(run, "run_endpoint", run_endpoint)
    return seen


def test_python_given_nothing_makes_every_default(captured):
    assert specproof.audit_engine("reference.direct", progress="off") == "ran"
    assert captured[EngineRequest] == EngineRequest(target="reference.direct")
    assert captured[EngineAuditConfig] == EngineAuditConfig() and captured[ShardOptions] == ShardOptions()
    assert specproof.audit_endpoint("http://127.0.0.1:1", progress="off") == "ran"
    assert captured[EndpointOptions] == EndpointOptions(urls=("http://127.0.0.1:1",))
    assert captured[EngineRequest] == EngineRequest()


@pytest.mark.parametrize(("cls", "name"), CASES, ids=IDS)
def test_python_reaches_the_field(cls, name, captured):
    flag = flags(cls)[name]
    keyword = FACADE_NAME.get((cls, name), name)
    value = flag.example
    if cls is EndpointOptions:
        url = value[0] if name == "urls" else "http://127.0.0.1:9"
        kwargs = {} if keyword is None else {keyword: value}
        specproof.audit_endpoint(url, progress="off", **kwargs)
    else:
        target = value if name == "target" else "reference.direct"
        kwargs = {} if keyword is None else {keyword: value}
        specproof.audit_engine(target, progress="off", **kwargs)
    got = getattr(captured[cls], name)
    assert got == (value if name != "urls" else value[:1])


def test_the_twin_is_called_twin_at_every_door_and_the_old_names_still_work(captured):
    twin = "http://127.0.0.1:2"
    args = ["audit", "endpoint", "http://127.0.0.1:1"]
    assert cli_values([*args, "--twin", twin])[EndpointOptions].twin == twin
    assert cli_values([*args, "--target-endpoint", twin])[EndpointOptions].twin == twin
    assert pytest_values(["--specproof-endpoint-twin", twin])[EndpointOptions].twin == twin
    assert pytest_values(["--specproof-endpoint-target", twin])[EndpointOptions].twin == twin
    specproof.audit_endpoint("http://127.0.0.1:1", twin=twin, progress="off")
    assert captured[EndpointOptions].twin == twin
    specproof.audit_endpoint("http://127.0.0.1:1", target=twin, progress="off")
    assert captured[EndpointOptions].twin == twin


def test_a_bad_value_is_a_usage_error_naming_the_flag_at_each_door(tmp_path):
    from specproof.reference.errors import UsageError

    with pytest.raises(UsageError, match="--tokens"):
        cli_values(["audit", "engine", "reference.direct", "--tokens", "x"])
    with pytest.raises(UsageError, match="--concurrency"):
        cli_values(["audit", "endpoint", "http://127.0.0.1:1", "--concurrency", "0"])
    with pytest.raises(UsageError, match="--prompt"):
        pytest_values(["--specproof-engine-prompt", "a b"])
    with pytest.raises(UsageError, match="concurrency"):
        specproof.audit_endpoint("http://127.0.0.1:1", concurrency=0, progress="off")
    with pytest.raises(UsageError, match="not an option"):
        specproof.audit_engine("reference.direct", progress="off", alpah=0.1)


def test_param_adds_to_a_settings_own_parameters():
    """``--param`` adds a parameter to every setting of the engine: its own penalties stay."""
    from specproof.properties.engine.contract import Sampling

    own = (Sampling(1.0, repetition_penalty=1.4), Sampling(0.7, repetition_penalty=1.4))
    request = EngineRequest(params=(("presence_penalty", 0.5),))
    made = request.settings(own)
    assert made == (
        Sampling(1.0, repetition_penalty=1.4, presence_penalty=0.5),
        Sampling(0.7, repetition_penalty=1.4, presence_penalty=0.5),
    )
    assert EngineRequest(temperatures=(0.5,)).settings(own) == (Sampling(0.5, repetition_penalty=1.4),)


def test_the_tv_can_be_named_with_its_unit_from_python():
    """token_tv and joint_tv are the TV under names that say its unit, as --token-tv and
    --joint-tv: read as tv where the unit is the plan's, refused with the right name where not."""
    import pytest

    from specproof.properties.engine.config import EngineAuditConfig
    from specproof.properties.options import build
    from specproof.reference.errors import UsageError

    assert build(EngineAuditConfig, {"token_tv": 0.05}).tv == 0.05
    assert build(EngineAuditConfig, {"joint_tv": 0.2, "test": "cells"}).tv == 0.2
    with pytest.raises(UsageError, match="joint_tv: the joint TV plans the cells test alone"):
        build(EngineAuditConfig, {"joint_tv": 0.2})
    with pytest.raises(UsageError, match="token_tv: with test='cells'.*give joint_tv"):
        build(EngineAuditConfig, {"token_tv": 0.05, "test": "cells"})
    with pytest.raises(UsageError, match="give the TV once"):
        build(EngineAuditConfig, {"token_tv": 0.05, "tv": 0.05})


def test_the_tv_can_be_named_with_its_unit_in_pytest():
    """--specproof-token-tv and --specproof-joint-tv, as the command line's --token-tv and
    --joint-tv: read as the plan's TV where the unit is the plan's, refused where not."""
    from specproof.reference.errors import UsageError

    assert pytest_values(["--specproof-token-tv", "0.05"])[EngineAuditConfig].tv == 0.05
    joint = pytest_values(["--specproof-joint-tv", "0.2", "--specproof-engine-test", "cells"])
    assert joint[EngineAuditConfig].tv == 0.2
    with pytest.raises(UsageError, match="joint_tv: the joint TV plans the cells test alone"):
        pytest_values(["--specproof-joint-tv", "0.2"])
