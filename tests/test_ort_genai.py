"""ONNX Runtime GenAI 0.18.0 audited as a user runs it (properties/engine/adapters/onnxruntime_genai.py),
on the project's tiny pair written as ONNX graphs by the project.

The tier (skipped unless ``specproof env install ort`` made its environment; run apart by .ci/run's own
step, its workers closed when the module ends):

* the graphs compute the project's numpy law (the plain target's logits at 40 contexts);
* plain decoding keeps the law (both main models: float32 logits, and float16);
* draft-model speculation, n-gram lookup and MTP (float16 logits) keep it, with drafts accepted;
  n-gram lookup returns the plain generator's tokens seed for seed;
* MTP on the float32 main model raises on every call (``contract_violation [exception]``);
* MTP at top-k 1 samples the whole softmax where the Generator decodes greedily (``lossy``);
* one seed and one ``max_length`` give one output, and a speculative run capped shorter is not
  always a prefix of a longer one (why every sample asks for exactly the audit's horizon);
* EAGLE is not in the wheel.

Without the environment (the default run): a failed install exits 4 with pip's log, the
end-of-sequence rule of the adapter, the knobs, and the engines listed unavailable with the install
line.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tier_helpers import closing_workers, tier_marks

from specproof.properties.cli import main
from specproof.properties.engine.adapters import onnxruntime_genai as adapter
from specproof.properties.engine.audit import audit_engine
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.contract import Sampling
from specproof.properties.engine.knobs import KNOBS
from specproof.properties.engine.registry import ENGINES, ensure_registered, list_engines
from specproof.properties.servers import gguf_models as gm
from specproof.properties.servers import ort_env
from specproof.properties.verdicts import USAGE_ERROR, Verdict
from specproof.reference.errors import BadParameterError, SpecproofInputError

OK, WHY = ort_env.installed()
TIER = tier_marks(__file__, OK, WHY)


def tier(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A test of the tier: skipped without its environment and under xdist (tier_helpers)."""
    for mark in TIER:
        fn = mark(fn)
    return fn


_closed_workers = closing_workers("onnxruntime_genai")

#: alpha 1e-4 (the default), seed 0, 300 samples a case, 32 seeds for the control
CONFIG = EngineAuditConfig(samples=300, seed=0, report_samples=32)
T1 = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}


def _audit(name: str):
    ensure_registered()
    return audit_engine(ENGINES[name], CONFIG)


def _generate(mode: str, prompt: list[int], tokens: int, seeds: list[int]) -> list[list[int]]:
    answer = adapter._worker(mode).request(
        {"op": "generate", "prompt": prompt, "tokens": tokens, "seeds": seeds, "sampling": T1}
    )
    return [s["tokens"] for s in answer["samples"]]


# --------------------------------------------------------------------------- the tier


@tier
def test_the_graphs_compute_the_numpy_law():
    """The plain target's next-token law after 40 contexts (lengths 1 to 40, random ids, the end of
    sequence anywhere but last: a generator fed one as its last token is done and runs no forward
    for it, and no sample continues past one) against the float64 numpy forward of the same
    weights: float32 rounding apart, one law."""
    rng = np.random.default_rng(0)
    contexts = [
        [int(x) for x in rng.integers(0, gm.SPEC.n_vocab, n - 1)] + [int(rng.integers(1, gm.SPEC.n_vocab))]
        for n in range(1, 41)
    ]
    got = adapter._worker("plain").request({"op": "logits", "contexts": contexts})["logits"]
    w = gm.target_weights(0)
    worst = 0.0
    for ctx, z in zip(contexts, got):
        z = np.asarray(z, dtype=np.float64)
        p = np.exp(z - z.max())
        worst = max(worst, float(np.abs(p / p.sum() - gm.next_token_law(w, ctx)).max()))
    assert worst < 1e-5, worst


@tier
@pytest.mark.parametrize("name", ["ort.plain", "ort.plain.fp16"])
def test_plain_decoding_keeps_the_law(name):
    r = _audit(name)
    assert r.verdict == Verdict.PASS, r.summary()
    assert r.speculation.status == "unobservable"


@tier
@pytest.mark.parametrize("name", ["ort.draft", "ort.ngram", "ort.mtp.fp16"])
def test_speculation_keeps_the_law_with_drafts_accepted(name):
    r = _audit(name)
    assert r.verdict == Verdict.PASS, r.summary()
    assert r.speculation.status == "ran" and r.speculation.accepted > 0, r.summary()
    c = r.control
    assert c is not None and c.coupled == CONFIG.report_samples * len(r.cases), r.summary()


@tier
@pytest.mark.parametrize("name", ["ort.draft", "ort.ngram", "ort.mtp.fp16", "ort.plain"])
def test_top_p_keeps_the_law_at_a_fixed_size(name):
    """Top-p 0.9 with top-k 8 at T 0.7, 300 samples (a whole plan's contexts would meet a law whose
    cumulative mass sits within float32's reach of 0.9, which the audit refuses to pin down)."""
    ensure_registered()
    spec = dataclasses.replace(ENGINES[name], samplings=(adapter.TOP_P,))
    r = audit_engine(spec, CONFIG)
    assert r.verdict == Verdict.PASS, r.summary()


@tier
def test_ngram_lookup_returns_the_plain_tokens_seed_for_seed():
    """Sample and match draws one number per verified position, as plain decoding draws one per
    token: with the same seed, the same tokens (every one of the audit's control seeds, 32 a case)."""
    r = _audit("ort.ngram")
    c = r.control
    assert c is not None and c.identical == c.coupled == CONFIG.report_samples * len(r.cases), r.summary()


@tier
def test_mtp_on_the_float32_main_model_raises_on_every_call():
    r = _audit("ort.mtp")
    assert r.verdict == Verdict.CONTRACT_VIOLATION, r.summary()
    v = r.violation or {}
    assert v.get("kind") == "exception", v
    assert "Cast - input and output types are the same" in v["detail"], v


@tier
def test_mtp_at_top_k_1_samples_where_the_generator_decodes_greedily():
    """top_k 1 with do_sample: the Generator decodes greedily (a point mass at the argmax), the MTP
    generator samples the whole softmax: a sample the law cannot emit at the first look."""
    r = _audit("ort.mtp.fp16.top_k1")
    assert r.verdict == Verdict.LOSSY, r.summary()
    (case,) = r.cases
    assert case.hard_failure, r.summary()
    assert "probability 0" in r.short_witness(), r.short_witness()
    seeds = list(range(16))
    prompt = list(adapter.PROMPTS[0])
    top1 = {"do_sample": True, "temperature": 1.0, "top_k": 1, "top_p": 1.0}
    outs = {
        mode: {
            tuple(s["tokens"])
            for s in adapter._worker(mode).request(
                {"op": "generate", "prompt": prompt, "tokens": 6, "seeds": seeds, "sampling": top1}
            )["samples"]
        }
        for mode in ("plain16", "mtp16")
    }
    assert len(outs["plain16"]) == 1 and len(outs["mtp16"]) > 1, outs


@tier
def test_the_findings_standalone_reproduction_shows_both_defects(tmp_path):
    """docs/findings/repro/ort_genai_mtp.py, run as a maintainer would (the environment's Python,
    no specproof on its path, from another folder): it writes its own random tiny model, both
    defects hold on the pinned release, and it exits 1."""
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "docs" / "findings" / "repro" / "ort_genai_mtp.py"
    done = subprocess.run(
        [str(ort_env.python()), str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr[-2000:]
    assert out.count("Cast - input and output types are the same  <- the defect holds") == 2, out
    assert "seeds gave other tokens" in out and out.count("the defect holds") == 3, out


@tier
def test_one_seed_and_one_max_length_give_one_output_and_a_shorter_cap_is_not_a_prefix():
    """200 seeds with the draft model: M = 6 twice gives the same tokens; M = 6 against M = 20,
    the 6 tokens are not always the first 6 of the longer run (the draft length is cut at the cap,
    and the draws with it). Plain decoding's shorter run is always a prefix."""
    seeds = list(range(200))
    prompt = list(adapter.PROMPTS[0])
    short = _generate("draft", prompt, 6, seeds)
    assert _generate("draft", prompt, 6, seeds) == short
    long = _generate("draft", prompt, 20, seeds)
    assert sum(a != b[: len(a)] for a, b in zip(short, long)) > 0
    plain_short, plain_long = _generate("plain", prompt, 6, seeds), _generate("plain", prompt, 20, seeds)
    assert all(a == b[: len(a)] for a, b in zip(plain_short, plain_long))


@tier
def test_eagle_is_not_in_the_wheel(tmp_path):
    """A config naming an EAGLE drafter is refused by the config parser."""
    src = ort_env.build() / "target"
    shutil.copytree(src, tmp_path / "eagle")
    config = json.loads((tmp_path / "eagle" / "genai_config.json").read_text())
    config["model"]["eagle"] = {"filename": "model.onnx"}
    (tmp_path / "eagle" / "genai_config.json").write_text(json.dumps(config))
    probe = f"import onnxruntime_genai as og; og.Model({str(tmp_path / 'eagle')!r})"
    done = subprocess.run([str(ort_env.python()), "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and 'Unknown value "eagle"' in done.stderr, done.stderr[-500:]


@tier
def test_dflash2_needs_an_engine_the_tiny_models_cannot_give(tmp_path):
    """DFlash 2 is hosted by the wheel's Engine only: a config naming a DFlash 2 drafter loads as a
    Model, and the Engine refuses it without dynamic batching, which the wheel's own messages say
    needs paged-KV decoder layers (the project's graphs have a plain KV cache) and a main model
    that exports auxiliary hidden states; a plain Engine proposes no draft tokens at all."""
    src = ort_env.build() / "target"
    shutil.copytree(src, tmp_path / "dflash2")
    config = json.loads((tmp_path / "dflash2" / "genai_config.json").read_text())
    config["model"]["dflash2"] = {"filename": "model.onnx"}
    (tmp_path / "dflash2" / "genai_config.json").write_text(json.dumps(config))
    probe = (
        "import sys, onnxruntime_genai as og\n"
        f"print('plain', og.Engine(og.Model({str(src)!r})).max_draft_tokens_per_proposal())\n"
        f"m = og.Model({str(tmp_path / 'dflash2')!r})\n"
        "print('model loads')\n"
        "og.Engine(m)\n"
    )
    done = subprocess.run([str(ort_env.python()), "-c", probe], capture_output=True, text=True, timeout=120)
    assert "plain 0" in done.stdout and "model loads" in done.stdout, (done.stdout, done.stderr[-500:])
    assert done.returncode != 0, done.stdout
    assert "An Engine-hosted DFlash 2 drafter requires dynamic batching" in done.stderr, done.stderr[-500:]
    lib = next(
        (ort_env.venv_dir() / "lib").glob("python3*/site-packages/onnxruntime_genai/libonnxruntime-genai.so")
    )
    text = lib.read_bytes()
    for said in (b"Dynamic batching requires at least one paged_kv decoder layer", b"main_aux_hidden_states"):
        assert said in text, said


# --------------------------------------------------------------------------- without the environment


def test_a_failed_install_exits_4_with_pips_log(tmp_path, monkeypatch, capsys):
    """pip finds nothing (no index, an empty folder of links): the command says so and exits 4,
    quoting pip's log; no environment is left for the tier's tests to take."""
    (tmp_path / "links").mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    monkeypatch.setenv("SPECPROOF_ORT_VENV", str(tmp_path / "venv"))
    assert main(["env", "install", "ort"]) == USAGE_ERROR
    err = capsys.readouterr().err
    assert "specproof env install ort: pip install -q onnxruntime-genai==0.18.0" in err, err
    assert "failed" in err and "install.log" in err, err
    assert not ort_env.installed(tmp_path / "venv")[0]


def test_a_sample_that_stopped_short_ends_on_the_end_of_sequence():
    assert adapter.ended([3, 5], 6) == (3, 5, gm.EOS_ID)  # Generator: the sampled EOS not appended
    assert adapter.ended([3, gm.EOS_ID], 6) == (3, gm.EOS_ID)  # MtpGenerator appends it
    assert adapter.ended([], 6) == (gm.EOS_ID,)  # the first token was the end
    assert adapter.ended([1, 2, 3, 4, 5, 6], 6) == (1, 2, 3, 4, 5, 6)


def test_the_search_options_say_top_k_off_as_0_pass_the_penalty_and_refuse_min_p():
    knobs = KNOBS["onnxruntime_genai"]
    off = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": None, "do_sample": True}
    assert knobs.of(Sampling(1.0)) == off
    assert knobs.of(Sampling(0.7, top_k=8, top_p=0.9))["top_k"] == 8
    assert knobs.of(Sampling(0.0))["do_sample"] is False
    with pytest.raises(BadParameterError, match="min_p"):
        knobs.of(Sampling(1.0, min_p=0.1))
    engine = adapter.ORTGenAIEngine("draft", adapter.PENALTY)
    assert engine._sampling() == {**{k: v for k, v in off.items() if k != "min_p"}, "repetition_penalty": 1.5}
    with pytest.raises(BadParameterError, match="repetition_scope"):
        adapter.ORTGenAIEngine("draft", Sampling(1.0, repetition_penalty=1.5, repetition_scope="output"))
    with pytest.raises(BadParameterError, match="mode: 'eagle' is not one of"):
        adapter.ORTGenAIEngine("eagle", adapter.PENALTY)
    with pytest.raises(SpecproofInputError, match="mode: 'eagle' is not one of"):
        ort_env.Worker("eagle")
    with pytest.raises(SpecproofInputError, match="seed: must be >= 0"):
        ort_env.build(seed=-1)


@pytest.mark.skipif(OK, reason="the environment is installed: the engines are available")
def test_without_the_environment_the_engines_are_listed_unavailable_with_the_install_line():
    rows = [e for e in list_engines() if e["group"] == "ort"]
    assert {e["name"] for e in rows} == set(adapter.DOCS)
    assert all(not e["available"] and "specproof env install ort" in e["reason"] for e in rows), rows
