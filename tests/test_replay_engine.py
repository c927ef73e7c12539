"""specproof replay on an engine audit's JSON (properties/audit/replay.py, engine_replay_source): a
pytest module that runs the audit again as it ran, failing while the engine gives the witness and
passing once it is fixed; an endpoint audit, or a file that is no audit, refused naming the file."""

from __future__ import annotations

import json

import pytest

from specproof.properties.audit.replay import ReplayError, engine_replay_source
from specproof.properties.cli import main
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import T07
from specproof.properties.engine.registry import resolve_engine, with_options

CONFIG = EngineAuditConfig(tv=0.1, seed=3, report_samples=0, budget_seconds=300)


def _lossy_json() -> dict:
    spec = with_options(resolve_engine("mutant.temperature_target_only"), prompts=[(0, 6)], samplings=[T07])
    r = audit_engine(spec, CONFIG)
    assert r.verdict.value == "lossy", r.summary()
    return json.loads(json.dumps(r.to_json()))


def _run(source: str) -> None:
    namespace: dict = {"__name__": "replayed"}
    exec(compile(source, "replayed.py", "exec"), namespace)
    namespace["test_replay_the_engine_audit"]()


def test_a_replayed_engine_witness_fails_on_the_bug_and_passes_once_fixed():
    source = engine_replay_source(_lossy_json())
    assert "ENGINE = 'mutant.temperature_target_only'" in source and "'seed': 3" in source
    with pytest.raises(AssertionError, match="LOSSY"):
        _run(source)
    # the fix: the same loop with the temperature applied to the draft as well (the reference loop)
    _run(source.replace("mutant.temperature_target_only", "reference.draft.token"))


def test_the_command_writes_the_test_and_refusals_name_the_file(tmp_path, capsys):
    path = tmp_path / "engine.json"
    path.write_text(json.dumps(_lossy_json()))
    out = tmp_path / "test_replay.py"
    assert main(["replay", str(path), "-o", str(out)]) == 0
    assert "def test_replay_the_engine_audit" in out.read_text()
    served = {"engine": "endpoint http://127.0.0.1:9", "group": "endpoint", "seed": 0}
    (tmp_path / "served.json").write_text(json.dumps(served))
    assert main(["replay", str(tmp_path / "served.json")]) == 4
    err = capsys.readouterr().err
    assert f"{tmp_path / 'served.json'}:" in err and "replays against its server" in err
    with pytest.raises(ReplayError, match="without its plan"):
        engine_replay_source({"engine": "x", "group": "user", "tokens": 4})
