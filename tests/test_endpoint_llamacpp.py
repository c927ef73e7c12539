"""The endpoint audit on real llama-server processes (the pinned build, the tiny GGUF models),
started on loopback by the tests and stopped at the end.

Fixed sample sizes and seeds, so every verdict here is deterministic (llama-server with one slot
gives the same tokens for the same seed: tests/test_llamacpp.py checks it); alpha is the engine
audit's default 1e-4 over the cases. What they show:

* draft-model speculation (``draft-simple``) keeps the law under temperature, top-k, top-p,
  min-p and greedy decoding; it speculated (drafted and accepted); it is token-for-token the
  server without speculation under the same seed (its verifier samples the target once per
  emitted token and compares); and the probabilities it reports for drafted tokens are wrong
  (1.0), so the verdict is ``misreported``; its ``/metrics`` speculation totals grow by exactly
  what its answers' counters say;
* an n-gram speculation type likewise;
* the command line and the JSON carry the recipe, the counters, the tolerance and the control;
* llama-cpp-python's server (profile ``llamacpp-python``, skipped unless installed: ``specproof
  llamacpp install-python``): the profile's law is the tiny target's exact law processed in the
  server's sampler order; with prompt lookup the law holds at the default plan and the
  probabilities it reports (the raw law) are the law at T = 1, but its answers say nothing of
  what it drafted (speculation not observable); ``min_new_tokens`` under prompt lookup is lossy
  (the server counts the drafts it evaluated as generated tokens, so it lets the end of sequence
  out early), while the same server without a draft model keeps that law; the settings whose
  law the recipe cannot give exactly are refused, naming the parameter.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the tiny GGUF models need the gguf package")

from specproof.properties.endpoint.client import Client  # noqa: E402
from specproof.properties.endpoint.families import make_profile  # noqa: E402
from specproof.properties.endpoint.families.llamacpp_python import NEUTRAL_LCP, LlamaCppPython  # noqa: E402
from specproof.properties.engine.audit import EngineAuditConfig  # noqa: E402
from specproof.properties.engine.contract import GREEDY, T1, Sampling  # noqa: E402
from specproof.properties.measure import llamacpp_suite as suite  # noqa: E402
from specproof.properties.servers import gguf_models as gm  # noqa: E402
from specproof.properties.servers import llamacpp, llamacpp_python  # noqa: E402
from specproof.properties.verdicts import Verdict  # noqa: E402
from specproof.reference.errors import UsageError  # noqa: E402
from specproof.reference.sampling import Grammar  # noqa: E402

pytestmark = pytest.mark.llamacpp
CONFIG = EngineAuditConfig(samples=300, report_samples=16, seed=0)


@pytest.fixture(scope="module")
def files(tmp_path_factory, llamacpp_bin):
    return suite.models(tmp_path_factory.mktemp("gguf"))


def test_draft_model_speculation_keeps_the_law_and_misreports_drafted_probabilities(files):
    settings = [Sampling(0.7, top_k=5), Sampling(1.0, top_p=0.8), Sampling(1.0, min_p=0.1), GREEDY]
    (r,) = suite.audit_config(suite.BY_NAME["llama-server.draft"], CONFIG, files, settings)
    assert r.verdict == Verdict.MISREPORTED, r.summary()
    assert not any(c.rejected for c in r.cases)  # the law held in every case
    assert all(c.speculation.status == "ran" for c in r.cases), r.summary()
    assert r.reports.status == "wrong" and r.reports.worst["reported"] == 1.0
    # the acceptance oracle (greedy_chain): the steps read from the tokens match the server's
    # counters in every sample, and it accepts as the target's law predicts
    acc = r.acceptance
    assert acc is not None and acc.rule == "greedy_chain" and acc.contradicted == 0, r.summary()
    assert acc.status == "as_predicted" and acc.indicators > 500, r.summary()
    assert r.control is not None and r.control.identical == r.control.coupled > 0
    assert r.control.tolerance is not None and r.control.tolerance < 1e-5
    assert r.description["profile"] == "llamacpp" and "n_probs" in r.description["recipe"]
    # its /metrics totals grew by exactly what its answers' counters said over the sample stage
    m = r.metrics
    assert m.status == "agree" and m.tally.drafted > 0 and m.tally.answers == r.samples, r.summary()
    assert m.grew == {"drafted": m.tally.drafted, "accepted": m.tally.accepted}
    # streamed, the same tokens and text, other probabilities (and none for some tokens), also wrong
    st = r.streaming
    assert (st.status, st.hard, st.samples) == ("reports_differ", 0, 16), r.summary()
    assert st.reports.status in ("wrong", "absent"), r.summary()


def test_eight_slots_keep_the_law_and_the_seeds_with_8_requests_in_flight(files):
    """The load axis on the real server: llama-server with 8 slots, each case alone and beside
    background requests of other prompts, lengths and settings, seeded and unseeded."""
    (r,) = suite.audit_config(suite.BY_NAME["llama-server.draft.parallel"], CONFIG, files, [T1])
    assert [c.case.load for c in r.cases] == [1, 8]
    assert not any(c.rejected or c.token_finding for c in r.cases), r.summary()
    assert r.verdict == Verdict.MISREPORTED, r.summary()  # its known misreport, nothing else
    load = r.load
    assert load is not None
    assert [(s.level, s.seeds, s.differing) for s in load.seeds] == [(1, 16, 0), (8, 16, 0)], r.summary()
    assert load.background is not None and load.background["records"] >= 300, r.summary()
    assert not load.background_lossy and all(c.speculation.status == "ran" for c in r.cases)
    # acceptance as its rule predicts alone and with 8 in flight, its counters read from the tokens
    acc = r.acceptance
    assert acc is not None and acc.status == "as_predicted" and acc.contradicted == 0, r.summary()
    assert len(acc.by_case) == 2 and all(n > 200 for n, _, _ in acc.by_case.values()), r.summary()


def test_a_lora_adapters_law_is_the_merged_weights_law_and_applies_to_requests_naming_none(
    files, llamacpp_bin
):
    """llama-server with the tiny target's LoRA adapter (``--lora``): a request's law at each scale
    is the exact law of the target with the adapter merged at that scale (to 1e-6), and a request
    that names no adapter runs it at scale 1, ``--lora-init-without-apply`` or not (the flag only
    keeps the adapter off the context at start-up; each slot takes the adapters' own scale:
    proofs_notes/thirdparty.md)."""
    w, lora = gm.target_weights(0), gm.lora_weights(0)
    body = {"prompt": [1, 2], "n_predict": 1, "n_probs": 16, "post_sampling_probs": True}
    body.update(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)

    def law(client: Client, extra: dict) -> np.ndarray:
        answer = client.post("/completion", {**body, **extra})
        out = np.zeros(len(gm.VOCAB))
        for e in answer["completion_probabilities"][0]["top_probs"]:
            out[e["id"]] = e["prob"]
        return out

    for flags in ((), ("--lora-init-without-apply",)):
        args = ("--lora", str(files["lora"]), *flags)
        with llamacpp.start_server(llamacpp_bin, files["target"], extra_args=args) as url, Client([url]) as c:
            for scale in (0.0, 0.5, 1.0):
                exact = gm.next_token_law(gm.with_lora(w, lora, scale), [1, 2])
                assert np.abs(law(c, {"lora": [{"id": 0, "scale": scale}]}) - exact).max() < 1e-6, scale
            named_none = law(c, {})
            assert np.abs(named_none - gm.next_token_law(gm.with_lora(w, lora, 1.0), [1, 2])).max() < 1e-6
            assert np.abs(named_none - gm.next_token_law(w, [1, 2])).max() > 0.1  # the adapter moves it
            assert c.get("/lora-adapters")[0]["scale"] == 1.0, flags


def test_mixed_lora_adapters_in_flight_keep_each_requests_law(files):
    """The load axis with a LoRA adapter held: the audit's requests run the adapter at the server's
    own scale (1), about half of the background requests ask it at 0, so slots with different
    adapters are in flight at once (llama-server batches only slots whose adapters agree); each
    request keeps its own law alone and with 8 in flight, and the background requests' tokens
    score against their own adapter's laws."""
    (r,) = suite.audit_config(suite.BY_NAME["llama-server.draft.lora"], CONFIG, files, [T1])
    assert [c.case.load for c in r.cases] == [1, 8]
    assert not any(c.rejected or c.token_finding for c in r.cases), r.summary()
    assert r.verdict == Verdict.MISREPORTED, r.summary()  # its known misreport, nothing else
    load = r.load
    assert load is not None and load.background is not None, r.summary()
    assert not load.background_lossy and load.background["with_adapters"] > 100, r.summary()
    assert r.acceptance is not None and r.acceptance.status == "as_predicted", r.summary()


def test_requests_asking_the_adapter_at_another_scale_keep_the_adapted_law(files):
    """--adapter 0=0.5 on the real server: every audited request asks the adapter at scale 0.5
    (its lora field) and its law is read from the twin with the same request; llama-server's law
    there is the adapted model's (after [1 2], 0.122 in TV from its law at the default scale 1, so an
    adapter the server dropped or ran at 1 would be rejected), the acceptance is as its rule
    predicts under the adapted target."""
    config = suite.BY_NAME["llama-server.draft.lora.scaled"]
    assert config.adapter == ((0, 0.5),) and config.lora
    w, lora = gm.target_weights(0), gm.lora_weights(0)
    half = gm.next_token_law(gm.with_lora(w, lora, 0.5), [1, 2])
    one = gm.next_token_law(gm.with_lora(w, lora, 1.0), [1, 2])
    assert 0.5 * np.abs(half - one).sum() == pytest.approx(0.1219, abs=1e-4)  # the scale matters
    (r,) = suite.audit_config(config, CONFIG, files, [T1])
    assert not any(c.rejected or c.token_finding for c in r.cases), r.summary()
    assert r.verdict == Verdict.MISREPORTED, r.summary()  # its known misreport, nothing else
    assert all(c.speculation.status == "ran" for c in r.cases), r.summary()
    assert r.acceptance is not None and r.acceptance.status == "as_predicted", r.summary()


def test_four_completions_a_request_keep_the_law_and_are_independent(files):
    """The completions axis on the real server: 4 slots, each case with one completion a request
    and with 4 (``n_cmpl``); the law holds in both and a request's completions are independent."""
    (r,) = suite.audit_config(suite.BY_NAME["llama-server.draft.completions"], CONFIG, files, [T1])
    assert [c.case.completions for c in r.cases] == [1, 4] and [c.n for c in r.cases] == [300, 300]
    assert not any(c.rejected or c.token_finding for c in r.cases), r.summary()
    assert r.verdict == Verdict.MISREPORTED, r.summary()  # its known misreport, nothing else
    assert all(c.speculation.status == "ran" for c in r.cases), r.summary()
    assert r.completions is not None
    (t,) = r.completions.tests
    assert not t.rejected and t.requests == 75 and t.pairs == 37, r.summary()
    assert r.metrics.status == "agree", r.summary()


def test_completion_j_of_a_request_is_the_one_completion_of_seed_plus_j(files, llamacpp_bin):
    """How llama-server seeds the completions of one request: completion j is what a request for
    one completion seeded seed + j answers. (So requests whose seeds are consecutive share
    completions: a client that numbers its seeds 0, 1, 2, ... and asks for n > 1 gets overlapping,
    dependent samples. The audit's seeds are hashed apart.)"""
    args = ("--spec-draft-n-max", "4", "-np", "3")
    with (
        llamacpp.start_server(llamacpp_bin, files["target"], files["draft"], extra_args=args) as url,
        Client([url]) as client,
    ):
        profile = make_profile("llamacpp")
        _, body = profile.generation([1, 2], 6, 5, T1, False)
        many = profile.read_completions(client.post("/completion", profile.completions_body(body, 3)), False)
        ones = []
        for j in range(3):
            _, one = profile.generation([1, 2], 6, 5 + j, T1, False)
            ones.append(profile.read_generation(client.post("/completion", one), False).tokens)
    assert [g.tokens for g in many] == ones and len(set(ones)) == 3


def test_stop_strings_keep_the_law_and_the_stream_loses_a_held_back_partial_stop(files):
    """llama-server with stop strings (``c``, and ``hg`` over two tokens): each sample stops at
    the token completing one, never after it, and the law of the stopped samples holds. The
    finding (proofs_notes/thirdparty.md): a streamed answer that ends by length while its text
    ends in a prefix of a stop string (``h``) never sends that text: the tokens are the whole
    answer's, the text is short, so the audit says ``stream_differs``."""
    (r,) = suite.audit_config(suite.BY_NAME["llama-server.draft.samplers"], CONFIG, files, [suite.STOPS])
    assert not any(c.rejected or c.token_finding for c in r.cases), r.summary()
    (case,) = r.cases
    assert case.n == 300 and case.observed_tokens < 0.95 * 300 * case.case.tokens, r.summary()
    assert case.speculation.accepted > 0, r.summary()
    assert r.verdict == Verdict.CONTRACT_VIOLATION and r.violation["kind"] == "stream_differs", r.summary()
    first = r.streaming.first
    assert first["whole"] == first["streamed"] and first["what"].startswith("text"), r.summary()
    assert "h' whole" in first["what"], r.summary()  # the whole text ends in the held-back 'h'
    assert r.streaming.hard < r.streaming.samples, r.summary()  # only answers ending that way


def test_the_plain_server_streams_the_same_short_text(files, llamacpp_bin):
    """The stream's lost tail without speculation: for the seeds whose streamed text differs, the
    tokens are equal and the whole text is the streamed one plus the held-back prefix of a stop
    string, and the answer ended by length (proofs_notes/thirdparty.md)."""
    body = {"prompt": [1, 2, 1], "n_predict": 4, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
            "min_p": 0.0, "ignore_eos": True, "cache_prompt": False, "return_tokens": True,
            "stop": ["c", "hg"]}  # fmt: skip
    lost = 0
    with llamacpp.start_server(llamacpp_bin, files["target"]) as url:
        client = Client([url])
        try:
            for seed in range(40):
                whole = client.post("/completion", {**body, "seed": seed})
                (events,) = client.post_stream_many("/completion", [{**body, "seed": seed, "stream": True}])
                parts = [e for e in events if not e.get("stop")]
                tokens = [x for e in parts for x in e.get("tokens") or ()]
                text = "".join(e.get("content") or "" for e in parts)
                assert tokens == whole["tokens"], seed
                if text != whole["content"]:
                    lost += 1
                    tail = whole["content"][len(text) :]
                    assert whole["content"].startswith(text) and tail == "h", (seed, whole, text)
                    assert whole["stop_type"] == "limit" and len(tokens) == 4
        finally:
            client.close()
    assert lost > 0


def test_a_prefix_cache_hit_keeps_the_law(files, llamacpp_bin):
    """llama-server with cache_prompt: each request after a case's first reuses the prompt's KV
    (``timings.cache_n``); the law holds cold and after the hit, with drafts accepted in both."""
    (r,) = suite.audit_config(suite.BY_NAME["llama-server.draft.cache"], CONFIG, files, [T1])
    assert [c.case.cache for c in r.cases] == ["cold", "warm"], r.summary()
    assert not any(c.rejected or c.token_finding for c in r.cases) and r.factor == "", r.summary()
    assert all(c.speculation.accepted > 0 for c in r.cases), r.summary()
    assert r.verdict == Verdict.MISREPORTED, r.summary()  # its known misreport, nothing else
    hits = r.to_json()["plugins"]["cache"]  # every warm answer says its cache_n; hits counted
    assert hits["counted"] == hits["warm"] > 0 and hits["hits"] > 0, hits
    body = {"prompt": [1, 2], "n_predict": 4, "temperature": 1.0, "seed": 3, "return_tokens": True}
    with llamacpp.start_server(llamacpp_bin, files["target"], draft=files["draft"]) as url:
        client = Client([url])
        try:
            cold = client.post("/completion", {**body, "cache_prompt": False})
            warm = [client.post("/completion", {**body, "cache_prompt": True}) for _ in range(2)]
        finally:
            client.close()
    assert warm[1]["timings"]["cache_n"] > 0 and warm[1]["tokens"] == cold["tokens"]


def test_a_prompt_longer_than_a_batch_keeps_the_law_and_the_acceptance(files):
    """A 40-token prompt read in chunks of 8 (-b 8 -ub 8), the twin reading it whole: the law
    holds and the draft model accepts as its rule predicts."""
    (r,) = suite.audit_config(suite.BY_NAME["llama-server.draft.chunked"], CONFIG, files, [T1])
    assert len(r.cases[0].case.prompt) == 40 and not any(c.rejected for c in r.cases), r.summary()
    assert r.verdict == Verdict.MISREPORTED, r.summary()  # its known misreport, nothing else
    acc = r.acceptance
    assert acc is not None and acc.status == "as_predicted" and acc.contradicted == 0, r.summary()


def test_the_laws_along_a_sample_are_read_in_one_request_and_equal_the_one_token_recipe(files, llamacpp_bin):
    """The twin's laws along a path: the sample's tokens forced by a grammar of token ids, one
    more free, n_probs = V before the sampler; the banned end-of-generation ids learned (the tiny
    model's end of sequence, id 0). They equal the one-token recipe's law at every position within
    float32 rounding, at T = 1 and 0.7; from the speculative server alone they are not read."""
    from specproof.properties.endpoint.engine import Endpoint
    from specproof.properties.endpoint.options import EndpointOptions
    from specproof.properties.engine.contract import T07

    with (
        llamacpp.start_server(llamacpp_bin, files["target"]) as twin,
        llamacpp.start_server(
            llamacpp_bin, files["target"], draft=files["draft"], extra_args=("--spec-draft-n-max", "4")
        ) as url,
    ):
        with Endpoint(EndpointOptions((url,), "llamacpp", twin=twin), token_map=gm.VOCAB) as ep:
            ep.check((1, 2), [T1, T07])
            assert ep.along == {T1: "", T07: ""} and ep.profile.banned == (0,), ep.along
            for s in (T1, T07):
                e = ep.engine(s)
                path = (1, 2, 5, 9, 3, 3, 7)
                contexts = [list(path[: 2 + d]) for d in range(5)]
                along = np.asarray(e.target_laws(contexts, prompt_len=2))
                one = np.asarray([e.target_law(c) for c in contexts])
                assert e.along_requests == 1
                assert np.abs(along - one).max() < 1e-5 and np.all(along[:, 0] == 0)
        with Endpoint(EndpointOptions((url,), "llamacpp"), token_map=gm.VOCAB) as alone:
            alone.check((1, 2), [T1])
            assert "speculative server" in alone.along[T1]


def test_an_ngram_speculation_type_keeps_the_law(files):
    (r,) = suite.audit_config(suite.BY_NAME["llama-server.ngram-cache"], CONFIG, files)
    assert not any(c.rejected for c in r.cases), r.summary()
    assert r.speculation.drafted > 0 and r.speculation.accepted > 0, r.summary()
    assert r.verdict in (Verdict.MISREPORTED, Verdict.NO_SPECULATION), r.summary()


def test_command_line_audit_of_a_served_engine(files, tmp_path, llamacpp_bin):
    binary = llamacpp_bin
    out = tmp_path / "endpoint.json"
    with (
        llamacpp.start_server(binary, files["target"], draft=files["draft"]) as url,
        llamacpp.start_server(binary, files["target"]) as twin,
    ):
        argv = ["audit", "endpoint", url, "--twin", twin, "--prompt", "1 2", "--temperature", "1"]
        argv += ["--samples", "200", "--report-samples", "8", "--json", str(out), "--progress", "off"]
        run = subprocess.run(
            [sys.executable, "-m", "specproof.properties.cli", *argv], capture_output=True, text=True
        )
    assert run.returncode == Verdict.MISREPORTED.exit_code, run.stdout + run.stderr
    assert "speculation ran" in run.stdout and "reported probabilities: WRONG" in run.stdout
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "misreported" and doc["speculation"]["drafted"] > 0
    assert doc["control"]["seed_coupled"]["identical"] == 8


def test_an_unreachable_endpoint_is_a_usage_error(tmp_path):
    port = llamacpp.free_port()
    argv = ["audit", "endpoint", f"http://127.0.0.1:{port}", "--retries", "0", "--timeout", "2"]
    run = subprocess.run(
        [sys.executable, "-m", "specproof.properties.cli", *argv], capture_output=True, text=True
    )
    assert run.returncode == 4 and "cannot reach" in run.stderr, run.stderr


# --------------------------------------------------------------------------- llama-cpp-python

LOOKUP = suite.BY_NAME["llama-cpp-python.lookup-4"]
PLAIN_LCP = suite.BY_NAME["llama-cpp-python.plain"]


@pytest.fixture(scope="module")
def lcp_files(tmp_path_factory):
    """The tiny models, where llama-cpp-python's server can run (skipped otherwise, saying why)."""
    why = LOOKUP.unavailable()
    if why is not None:
        pytest.skip(why)
    return suite.models(tmp_path_factory.mktemp("gguf-lcp"))


@pytest.fixture(scope="module")
def lcp_plain(lcp_files):
    """llama-cpp-python's server on the tiny target without a draft model."""
    with llamacpp_python.start_server(lcp_files["target"], draft=None) as url:
        yield url


def _expected(s: Sampling, z: np.ndarray, out: tuple[int, ...]) -> np.ndarray:
    """llama-cpp-python's sampler written out for one case, from the exact float64 logits: bias
    and bans, penalties over ``out``, then top-k, top-p and min-p on the temperature-1 law, the
    temperature last (greedy at 0)."""
    z = z.astype(np.float64).copy()
    for t, b in s.logit_bias:
        z[t] = -np.inf if math.isinf(b) else z[t] + b
    if s.eos is None or len(out) < s.min_new_tokens:
        z[gm.EOS_ID] = -np.inf
    for x in set(out):
        z[x] -= s.presence_penalty + s.frequency_penalty * out.count(x)
    if s.greedy:
        return np.eye(len(z))[int(np.argmax(z))]
    ids = [int(i) for i in np.argsort(-z, kind="stable") if np.isfinite(z[i])][: s.top_k or None]
    p1 = np.exp(z[ids] - z[ids].max())
    p1 /= p1.sum()
    if s.top_p is not None:
        n = int(np.searchsorted(np.cumsum(p1), s.top_p) + 1)  # the first prefix reaching top_p
        ids, p1 = ids[:n], p1[:n]
    if s.min_p:
        ids = [i for i, q in zip(ids, p1) if q >= s.min_p * p1.max()]
    law = np.zeros(len(z))
    w = np.exp((z[ids] - z[ids].max()) / s.temperature)
    law[ids] = w / w.sum()
    return law


def test_llamacpp_python_profile_reads_the_exact_law(lcp_plain):
    """The profile's law after a context with three generated tokens, read from the server
    without a draft model, against the tiny target's exact logits processed as written out above
    (the cut-offs at T = 0.7, where cutting before or after the temperature differs)."""
    prompt, out = suite.REPEATING[0], (3, 3, 7)
    context = list(prompt + out)
    z = gm.logits(gm.target_weights(0), context)[-1]
    settings = [
        Sampling(1.0, eos=gm.EOS_ID),
        T1,
        Sampling(0.7, top_k=5),
        Sampling(0.7, top_p=0.8),
        Sampling(0.7, min_p=0.1),
        GREEDY,
        Sampling(1.0, presence_penalty=0.7, frequency_penalty=0.4),
        Sampling(1.0, logit_bias=((3, 2.0), (5, -math.inf))),
        Sampling(1.0, eos=gm.EOS_ID, min_new_tokens=3),
        Sampling(1.0, eos=gm.EOS_ID, min_new_tokens=4),
    ]
    profile = make_profile("llamacpp-python", list(gm.VOCAB))
    client = Client([lcp_plain], 4, 60.0, 1)
    try:
        identity = profile.identity(client)
        assert identity["vocab"] == len(gm.VOCAB) and profile.eos_id is None  # read, not changed
        profile = profile.learned(identity)
        assert isinstance(profile, LlamaCppPython) and profile.eos_id == gm.EOS_ID  # found, not told
        for s in settings:
            path, body = profile.law_request(context, s, len(gm.VOCAB), len(prompt))
            law = profile.read_law_after(client.post(path, body), s, len(gm.VOCAB), context, len(prompt))
            want = _expected(s, z, out)
            assert np.abs(np.asarray(law) - want).max() < 1e-6, s.label
            if s.top_p or s.min_p:  # the other order (HF's: temperature, then the cut): another law
                other = s.law(list(np.where(np.arange(len(z)) == gm.EOS_ID, -np.inf, z)))
                assert np.abs(np.asarray(other) - want).max() > 0.01, s.label
    finally:
        client.close()


def test_llama_cpp_python_drops_logit_bias_and_min_tokens_together(lcp_plain):
    """Why the profile refuses min_new_tokens with logit_bias: the server then applies neither
    (a banned token comes out, and the end of sequence before min_tokens)."""
    body = {**NEUTRAL_LCP, "prompt": gm.to_text(list(suite.REPEATING[0])), "max_tokens": 4, "logprobs": 0}
    body.update(min_tokens=4, logit_bias={"5": -1e30})
    outs = [
        llamacpp.post_json(f"{lcp_plain}/v1/completions", {**body, "seed": seed})["choices"][0]
        for seed in range(200)
    ]
    assert any(5 in gm.detokenize(c["text"]) for c in outs)  # the bias was dropped
    assert any(c["finish_reason"] == "stop" for c in outs)  # and min_tokens too


@pytest.mark.parametrize(
    "setting, name",
    [
        (Sampling(1.0, repetition_penalty=1.3), "repetition_penalty"),
        (Sampling(1.0, bad_words=((3,),)), "bad_words"),
        (Sampling(1.0, no_repeat_ngram_size=2), "no_repeat_ngram_size"),
        (Sampling(1.0, eos=gm.EOS_ID, grammar=Grammar.from_regex("[a-c]+", gm.VOCAB)), "grammar"),
        (Sampling(1.0, presence_penalty=0.5, presence_scope="all"), "presence_scope"),
        (Sampling(1.0, eos=gm.EOS_ID, min_new_tokens=2, logit_bias=((3, 1.0),)), "min_new_tokens"),
        (Sampling(1.0, logit_bias=((3, math.inf),)), "logit_bias"),
        (Sampling(1.0, eos=5), "eos"),
    ],
)
def test_llamacpp_python_refuses_a_law_it_cannot_read_exactly(setting, name):
    profile = LlamaCppPython(token_map=list(gm.VOCAB), eos_id=gm.EOS_ID)
    with pytest.raises(UsageError, match=f"^(profile llamacpp-python: )?{name}|offers no {name} "):
        profile.generation([1, 2], 4, 0, setting, report=False)
    with pytest.raises(UsageError, match=name):
        profile.law_request([1, 2], setting, len(gm.VOCAB))


def test_llamacpp_python_needs_the_token_map():
    with pytest.raises(UsageError, match="--token-map"):
        make_profile("llamacpp-python").generation([1, 2], 4, 0, T1, report=False)


def test_prompt_lookup_drafts_on_the_repeating_prompt(lcp_files, tmp_path):
    """Evidence outside the audit (which cannot observe it) that the configuration speculates:
    the server's per-request perf counters (--verbose) count the tokens evaluated in batches of
    more than one; without a draft model only the prompt is, with prompt lookup the drafts too."""
    prompt = list(suite.REPEATING[0])
    body = {**NEUTRAL_LCP, "prompt": gm.to_text(prompt), "max_tokens": 8, "seed": 0, "temperature": 0.0}
    body["logit_bias"] = {str(gm.EOS_ID): -1e30}
    batched, texts = {}, {}
    for draft in (llamacpp_python.DRAFT, None):
        log = tmp_path / f"server-{draft}.log"
        with llamacpp_python.start_server(
            lcp_files["target"], draft, 4, extra_args=["--verbose", "true"], log=log
        ) as url:
            texts[draft] = llamacpp.post_json(f"{url}/v1/completions", body)["choices"][0]["text"]
        (count,) = re.findall(r"prompt eval time =.*/\s*(\d+) tokens", log.read_text())
        batched[draft] = int(count)
    assert texts[None] == texts[llamacpp_python.DRAFT]  # greedy: the same 8 tokens
    assert batched[None] == len(prompt) < batched[llamacpp_python.DRAFT], batched


@pytest.mark.slow
def test_prompt_lookup_keeps_the_law_and_reports_the_raw_law(lcp_files):
    """The table's plan (the cells test of the joint law of M = 4 at joint TV 0.1): the law holds
    at T = 1 (end of sequence banned, and allowed), the
    probabilities it reports at T = 1 with end of sequence allowed are the law, its output is the
    output without speculation seed for seed; and the audit says speculation is not observable."""
    settings = [T1, Sampling(1.0, eos=gm.EOS_ID)]
    (r,) = suite.audit_config(LOOKUP, EngineAuditConfig(seed=0, test="cells", tv=0.1), lcp_files, settings)
    assert r.verdict == Verdict.PASS, r.summary()
    assert r.speculation.status == "unobservable" and "speculation: not observable" in r.summary()
    assert r.reports.status == "consistent" and r.reports.checked > 0, r.summary()
    assert r.control is not None and r.control.identical == r.control.coupled > 0, r.summary()
    assert r.description["profile"] == "llamacpp-python"


def test_min_new_tokens_under_prompt_lookup_is_lossy(lcp_files):
    """min_tokens bans the end of sequence while ``len(input_ids) - prompt`` is below it, and
    under prompt lookup ``input_ids`` holds the drafts evaluated ahead: the end of sequence comes
    out early. The same server without a draft model keeps the law."""
    s = Sampling(1.0, eos=gm.EOS_ID, min_new_tokens=3)
    plan = EngineAuditConfig(samples=300, report_samples=8, seed=0)
    (plain,) = suite.audit_config(PLAIN_LCP, plan, lcp_files, [s])
    assert plain.verdict == Verdict.PASS, plain.summary()
    (r,) = suite.audit_config(LOOKUP, plan, lcp_files, [s])
    assert r.verdict == Verdict.LOSSY, r.summary()
    assert r.witness is not None and r.witness.hard_failure is not None, r.summary()
    w = r.witness.hard_failure
    assert w["sequence"][w["position"] - 1] == gm.EOS_ID and w["position"] <= 3, w


def test_the_table_lists_llama_cpp_python_as_skipped_where_it_is_not_installed(monkeypatch):
    monkeypatch.setattr(llamacpp_python, "is_installed", lambda: False)
    plan = EngineAuditConfig(samples=10)
    results = suite.table(plan, [LOOKUP.name])
    assert list(results) == [] and [n for n, _ in results.skipped] == [LOOKUP.name]
    text = suite.markdown(results, plan)
    assert (
        f"| `{LOOKUP.name}` | | skipped: llama-cpp-python {llamacpp_python.VERSION} is not installed" in text
    )


@pytest.mark.slow
def test_the_draft_model_server_keeps_the_law_token_by_token_over_128_tokens_and_in_its_traffic(
    tmp_path, llamacpp_bin
):
    """llama-server with its draft model, 128 tokens a request, through the token test (seed 0,
    alpha 1e-4, 17 samples a setting: 2,176 tokens, past the plan for a per-token TV of 0.1); then
    17 requests a setting it served, recorded as a deployer logs them (no seeds) and audited as
    traffic against the twin: the law held in both, and both say what they vouch for."""
    traffic = tmp_path / "traffic.jsonl"
    found = suite.long_audit(EngineAuditConfig(samples=17, report_samples=8, tv=0.1, seed=0), 17, traffic)
    r = found.endpoint
    assert r.verdict == Verdict.MISREPORTED, r.summary()  # the law held; its drafts' probabilities are wrong
    assert not r.token_rejected and all(c.observed_tokens == 17 * 128 for c in r.cases), r.summary()
    assert r.token_test is not None and r.token_test["pooled"]["detects_per_token_tv"]["mean"] <= 0.1
    # the twin read each sample's laws in one request (a grammar of token ids, n_probs before the sampler)
    assert r.description["teacher_forced_law_requests"] > 0, r.description
    assert r.speculation.drafted > 0 and r.speculation.accepted > 0
    rows = [json.loads(line) for line in traffic.read_text().splitlines()]
    assert len(rows) == 34 and all(len(row["tokens"]) == 128 for row in rows)
    t = found.traffic
    assert t.verdict == Verdict.PASS, t.summary()
    assert t.records == 34 and t.tokens == 34 * 128
    assert all(s["detects"]["mean"] <= 0.1 for s in t.settings), t.summary()
    assert "llama-server.draft@128" in suite.long_markdown(found, EngineAuditConfig(tv=0.1))
