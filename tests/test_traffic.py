"""Recorded traffic audited against a twin: what a server served, scored token by token, no seeds.

The served requests come from the project's stand-in server (the reference loop behind
llama.cpp's API, in process), correct or with its greedy-verification bug; the twin is the same
model without speculation. Fixed seeds and plans: each verdict is a fixed outcome (alpha 1e-4,
per-token TV 0.1 unless said).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest

import specproof
from specproof.properties.endpoint.families.llamacpp import LlamaCpp
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.standin import InProcess, StandIn
from specproof.properties.endpoint.traffic import Record, audit_traffic, engine_laws, read_traffic
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.contract import Sampling
from specproof.properties.engine.loops import direct_engine
from specproof.properties.run import run_traffic
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError

PROMPTS = ((0, 6), (5, 2, 5, 2))


def _serve(
    si: StandIn, n: int, tokens: int = 12, seed0: int = 0, adapter: tuple[tuple[int, float], ...] = ()
) -> list[dict]:
    """``n`` requests served by ``si`` (prompts and settings alternating), as a deployer logs them;
    ``adapter``: the LoRA adapter scales every request asks (its ``lora`` field)."""
    profile, out = LlamaCpp(), []
    settings = (Sampling(1.0), Sampling(0.7))
    for k in range(n):
        prompt, s = PROMPTS[k % 2], settings[(k // 2) % 2]
        path, body = profile.generation(prompt, tokens, seed0 + k, s, report=False)
        if adapter:
            body = profile.adapter_body(body, adapter)
        status, answer = si.respond("POST", path, json.dumps(body).encode())
        assert status == 200, answer
        out.append(
            {"prompt": list(prompt), "tokens": answer["tokens"], "sampling": {"temperature": s.temperature}}
        )
    return out


def _write(tmp_path, rows: list[dict]) -> str:
    path = tmp_path / "traffic.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def twin():
    with StandIn(speculative=False, loop="laws", listen=False) as si:
        yield si


def _audit(path: str, twin: StandIn, tv: float = 0.1, adapter: tuple[tuple[int, float], ...] = ()):
    options = EndpointOptions(twin=twin.url, concurrency=4, adapter=adapter)
    return run_traffic(path, options, EngineAuditConfig(tv=tv), transports={twin.url: InProcess(twin)})


def test_correct_traffic_passes_against_its_twin(tmp_path, twin):
    with StandIn(loop="laws", listen=False) as served:
        rows = _serve(served, 1200)
    r = _audit(_write(tmp_path, rows), twin)
    assert r.verdict == Verdict.PASS, r.summary()
    assert r.records == 1200 and r.tokens == 1200 * 12 and len(r.settings) == 2
    assert all(s["tokens"] >= s["planned"] for s in r.settings)
    js = json.loads(json.dumps(r.to_json()))
    assert js["verdict"] == "pass" and js["finding"] is None


def test_traffic_from_a_greedy_verifier_is_lossy_with_its_witness(tmp_path, twin):
    with StandIn("greedy_verify", loop="laws", listen=False) as served:
        rows = _serve(served, 1200)
    r = _audit(_write(tmp_path, rows), twin)
    assert r.verdict == Verdict.LOSSY, r.summary()
    assert r.records < 1200 and r.finding is not None  # stopped at the crossing
    assert "statistic" in r.finding["text"] and r.exit_code == 1


def test_too_little_traffic_is_underpowered_and_says_what_it_vouches_for(tmp_path, twin):
    with StandIn(loop="laws", listen=False) as served:
        rows = _serve(served, 40)
    r = _audit(_write(tmp_path, rows), twin, tv=0.05)
    assert r.verdict == Verdict.UNDERPOWERED, r.summary()
    assert all(s["detects"]["mean"] > 0.05 for s in r.settings)


def test_a_served_token_of_probability_zero_is_named(tmp_path, twin):
    rows = [{"prompt": [0, 6], "tokens": [1, 2, 3], "sampling": {"temperature": 1.0, "top_k": 1}}]
    r = _audit(_write(tmp_path, rows), twin)
    assert (
        r.verdict == Verdict.LOSSY and "probability 0" in r.finding["text"] and "line 1" in r.finding["text"]
    )


def test_bad_lines_are_usage_errors_naming_the_line(tmp_path):
    for text, what in (
        ('{"prompt": [0], "tokens": [1]}\nnot json\n', "line 2: not JSON"),
        ('{"prompt": [0], "tokens": [99]}\n', "line 1: id 99 outside"),
        ('{"prompt": [0], "tokens": [1], "sampling": {"temp": 1}}\n', "line 1: 'temp' is not a sampling"),
        ('{"tokens": [1]}\n', "line 1: prompt and tokens"),
        ("\n", "holds no record"),
    ):
        path = tmp_path / "bad.jsonl"
        path.write_text(text)
        with pytest.raises(UsageError, match=what):
            read_traffic(str(path), vocab=8)


def test_records_naming_adapter_scales_are_scored_under_them(tmp_path):
    """A server holding a LoRA adapter served every request at scale 0 (the request's lora
    field). Logged with the field, each record is scored under the scales it names and the
    traffic passes; logged without it, the records are scored at the twin's own scale (1) and are
    lossy, unless --adapter 0=0 says what they asked."""
    with StandIn(loop="laws", listen=False, adapters=1) as served:
        rows = _serve(served, 400, adapter=((0, 0.0),))
    with StandIn(speculative=False, loop="laws", listen=False, adapters=1) as held:
        named = [{**r, "lora": [{"id": 0, "scale": 0.0}]} for r in rows]
        r = _audit(_write(tmp_path, named), held, tv=0.2)
        assert r.verdict == Verdict.PASS, r.summary()
        # the first 300 records: bare, lossy at the twin's own scale; with --adapter 0=0, the very
        # token test the same records get when they name the scale themselves
        bare = _write(tmp_path, rows[:300])
        assert _audit(bare, held).verdict == Verdict.LOSSY
        given = _audit(bare, held, adapter=((0, 0.0),)).to_json()
        own = _audit(_write(tmp_path, named[:300]), held).to_json()
        assert given["verdict"] == "underpowered" and given["token_test"] == own["token_test"]
    recs = read_traffic(_write(tmp_path, named[:2]), vocab=8)
    assert recs[0].adapter == ((0, 0.0),)
    with pytest.raises(UsageError, match="line 1: lora: these laws are read without LoRA adapters"):
        audit_traffic(recs, engine_laws(direct_engine(Sampling(1.0))), 8)


@pytest.mark.parametrize(
    ("lora", "what"),
    [
        ('{"id": 0, "scale": 1}', "line 1: lora: expected a list"),
        ('[{"id": 0}]', "line 1: lora: expected a list of {id, scale} objects"),
        ('[{"id": -1, "scale": 1}]', "line 1: lora: adapter: an adapter id is an integer >= 0"),
        ('[{"id": 0, "scale": "x"}]', "line 1: lora: adapter: adapter 0's scale must be a finite number"),
    ],
)
def test_a_bad_lora_field_is_a_usage_error_naming_the_line(tmp_path, lora, what):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": [0], "tokens": [1], "lora": ' + lora + "}\n")
    with pytest.raises(UsageError, match=re.escape(what)):
        read_traffic(str(path), vocab=8)


def test_from_python_against_an_engine_here():
    """An engine object as the law source: its own target_law (no server)."""
    rng = np.random.default_rng(0)
    e = direct_engine(Sampling(1.0))
    recs = [
        Record(k, (0, 6), tuple(e.generate([0, 6], 8, int(rng.integers(1 << 30)))), Sampling(1.0))
        for k in range(600)
    ]
    r = audit_traffic(recs, engine_laws(e), 8, EngineAuditConfig(tv=0.1))
    assert r.verdict == Verdict.PASS, r.summary()
    r2 = specproof.audit_traffic(recs, engine=e, tv=0.1, progress="off")
    assert r2.to_json()["token_test"] == r.to_json()["token_test"]


def test_the_command_line_audits_a_traffic_file(tmp_path, capsys):
    from specproof.properties.cli import main

    assert main(["audit", "traffic", str(tmp_path / "none.jsonl"), "--twin", "http://127.0.0.1:9"]) == 4
    assert "no file" in capsys.readouterr().err  # checked before any server is reached
    assert main(["audit", "traffic", "--progress", "off"]) == 4
    assert "TRAFFIC: missing" in capsys.readouterr().err


def test_the_command_line_writes_a_traffic_report_in_the_format_its_ending_names(tmp_path, capsys):
    from specproof.properties.cli import main

    with StandIn(loop="laws", listen=False) as served:
        path = _write(tmp_path, _serve(served, 40))
    with StandIn(speculative=False, loop="laws") as twin:
        for name in ("r.html", "r.md"):
            out = tmp_path / name
            args = ["audit", "traffic", path, "--twin", twin.url, "--tv", "0.05", "--progress", "off"]
            assert main([*args, "--report", str(out)]) == Verdict.UNDERPOWERED.exit_code
            text = out.read_text()
            if name.endswith(".html"):
                assert text.lstrip().lower().startswith("<!doctype html") and "```" not in text
            else:
                assert text.startswith("# specproof traffic audit") and "```" in text
    capsys.readouterr()


def test_a_twin_whose_reads_along_a_path_disagree_deep_is_named_not_scored(tmp_path):
    """The vLLM family reads a record's laws from the twin in one request (prompt_logprobs). A
    twin whose prefill reads past the 8th token from a window its decode path lacks
    (``prefill_window``) agrees with the one-token recipe right after the prompt (the check before
    scoring); one record in eight, at a depth drawn from the seed, is checked against the one-token
    recipe: contract_violation naming the line and position, the traffic never scored against
    the wrong laws. The correct twin: pass, every checked read equal to the last bits."""
    with StandIn(loop="laws", listen=False) as served:
        path = _write(tmp_path, _serve(served, 400))

    def audit(twin: StandIn):
        options = EndpointOptions(profile="vllm", vocab=8, twin=twin.url, concurrency=4)
        return run_traffic(path, options, EngineAuditConfig(tv=0.1), transports={twin.url: InProcess(twin)})

    with StandIn("prefill_window", speculative=False, loop="laws", listen=False) as bad:
        r = audit(bad)
    assert r.verdict == Verdict.CONTRACT_VIOLATION and r.exit_code == Verdict.CONTRACT_VIOLATION.exit_code
    assert r.finding is not None and r.finding["kind"] == "teacher_forcing_differs", r.finding
    assert r.finding["position"] > 8 - len(PROMPTS[0]) and re.match(r"line \d+: ", r.finding["text"])
    assert r.finding["text"] in r.summary()
    with StandIn(speculative=False, loop="laws", listen=False) as good:
        ok = audit(good)
    assert ok.verdict == Verdict.PASS, ok.summary()
    forced = ok.token_test["teacher_forcing_checked"]
    assert forced["checked"] >= 20 and forced["largest_tv"] < 1e-6, forced


def _ended_records(drops_eos_draft: bool, n: int, say: bool = True, keep_eos: bool = False) -> tuple:
    """``n`` requests served by the narrow engine with an end of sequence (id 0, a few percent of
    the mass), logged as servers return them: the end of sequence left out of the tokens (unless
    ``keep_eos``) and, where ``say``, ``finish_reason`` "stop" or "length"."""
    from specproof.properties.engine.narrow import ending_spec

    spec = ending_spec(256, 64, drops_eos_draft=drops_eos_draft)
    engine, s = spec.build(Sampling(1.0)), Sampling(1.0, eos=0)
    out = []
    for k in range(n):
        tokens = tuple(engine.generate([3, 1, 4], 64, 1000 + k))
        stopped = tokens[-1:] == (0,)
        kept = tokens if keep_eos or not stopped else tokens[:-1]
        finish = ("stop" if stopped else "length") if say else None
        out.append(Record(k + 1, (3, 1, 4), kept, s, finish=finish))
    return out, engine


def test_stopping_events_in_traffic_are_scored_where_records_say_how_they_ended():
    """Records that say how they ended (``finish_reason``; the end of sequence left out, as servers
    return tokens) feed the eos statistic: a draft loop that drops an end-of-sequence draft while
    the verifier keeps its law is lossy by it (alpha 1e-4, seed 4); the exact engine's records are
    not. Where records do not say, the event is not scored (an end left out would read as going
    on) and the setting says which records did not."""
    plan = EngineAuditConfig(tv=0.03, seed=4)
    bad, engine = _ended_records(True, 600)
    lossy = audit_traffic(bad, engine_laws(engine), 256, plan)
    assert lossy.verdict == Verdict.LOSSY, lossy.summary()
    assert lossy.finding["family"] == "eos" and "ended less often" in lossy.finding["text"], lossy.finding
    good, engine = _ended_records(False, 600)
    kept = audit_traffic(good, engine_laws(engine), 256, plan)
    assert kept.verdict == Verdict.UNDERPOWERED, kept.summary()  # 600 records hold fewer tokens than planned
    assert kept.settings[0]["stopping"] == "scored" and "stopping event: scored" in kept.summary()
    bets = kept.token_test["trace"]["statistics"]
    assert any(name.startswith("eos") for name in bets), bets
    # the same records without finish_reason: the event unscored, the setting says why
    silent, engine = _ended_records(True, 600, say=False)
    unsaid = audit_traffic(silent, engine_laws(engine), 256, plan)
    assert unsaid.settings[0]["stopping"].startswith("not scored: 600 of 600 records"), unsaid.settings
    assert not any(name.startswith("eos") for name in unsaid.token_test["trace"]["statistics"])
    # tokens that keep their end of sequence: the same scores as with it put back; without the
    # field the event is not scored even where every record happens to end on it (whether it is
    # scored is read from the fields, never from the outcomes)
    told, engine = _ended_records(True, 600, say=False, keep_eos=True)
    ended = [r for r in told if r.tokens[-1:] == (0,)]
    unsaid_ends = audit_traffic(ended, engine_laws(engine), 256, plan)
    assert unsaid_ends.settings[0]["stopping"].startswith("not scored"), unsaid_ends.settings
    said = [replace(r, finish="stop" if r.tokens[-1:] == (0,) else "length") for r in told]
    same = audit_traffic(said, engine_laws(engine), 256, plan)
    assert same.to_json()["token_test"] == lossy.to_json()["token_test"]


@pytest.mark.parametrize(
    ("row", "what"),
    [
        ({"finish_reason": "eos"}, "line 1: finish_reason 'eos': expected one of ['stop', 'length']"),
        (
            {"tokens": [1, 0], "finish_reason": "length", "sampling": {"eos": 0}},
            "line 1: finish_reason: 'length', yet token 2 ends the output",
        ),
        (
            {"tokens": [0, 1], "finish_reason": "stop", "sampling": {"eos": 0}},
            "line 1: finish_reason: 'stop', yet the output ends at token 1 of 2",
        ),
        (
            {
                "tokens": [1, 2],
                "finish_reason": "stop",
                "sampling": {"stop": ["ab"], "texts": list("abcdefgh")},
            },
            "line 1: finish_reason: 'stop', yet no token completes a stop string of ['ab']",
        ),
    ],
)
def test_a_finish_reason_its_tokens_contradict_is_a_usage_error_naming_the_line(tmp_path, row, what):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": [3], "tokens": [1, 2], **row}) + "\n")
    with pytest.raises(UsageError, match=re.escape(what)):
        records = read_traffic(str(path), vocab=8)
        audit_traffic(records, lambda p, t, s: np.full((len(t), 8), 1 / 8), 8)
