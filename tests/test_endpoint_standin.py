"""The endpoint audit end to end through HTTP, on the project's own stand-in servers
(properties/endpoint/standin.py): the reference loop behind the llama.cpp, vLLM, SGLang and
OpenAI APIs, correct or with one planted bug, on loopback.

Every audit has a fixed seed, a stated alpha (1e-3) and a fixed number of samples, so each
verdict is a fixed outcome (a sample is a function of its seed alone, whichever thread serves it),
not a draw that could flake; the correct stand-in's p-values here are far above the level. The
stand-ins use ``loop="laws"`` (the reference loop's draws on memoized laws: the same tokens as
the KV-cache loop, checked below) except where ``loop="kv"`` is named.
"""

from __future__ import annotations

import functools
import json
import socket
import time

import httpx
import numpy as np
import pytest

from specproof.properties.endpoint import families
from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.families.base import SEED_RANGE
from specproof.properties.endpoint.families.wire import token_texts
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.standin import StandIn
from specproof.properties.endpoint.standin_bugs import BUGS, STOP_SETTING
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine, sample_seed
from specproof.properties.engine.contract import T1, Sampling
from specproof.properties.measure.endpoint_calibration import calibrate_http
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError

#: the families the stand-in answers (those whose module has a stand-in answer)
PROFILES = tuple(n for n in families.FAMILIES if getattr(families.module(n), "ROUTES", None))
PROMPT = (0, 6)
ALPHA = 1e-3
SAMPLES = 200


def endpoint(url: str, profile: str = "llamacpp", twin: str | None = None, **kw: object) -> Endpoint:
    """An Endpoint on a stand-in: vLLM and SGLang do not say their vocabulary, OpenAI-style
    answers carry texts (the token map)."""
    options = EndpointOptions(
        (url,),
        profile,
        twin=twin,
        vocab=8 if profile in ("vllm", "sglang") else None,
        **{"concurrency": 4, **kw},  # type: ignore[arg-type]
    )
    return Endpoint(options, token_map=token_texts(8) if profile == "openai" else None).open()


def audit(
    url: str,
    profile: str = "llamacpp",
    twin: str | None = None,
    samplings: tuple[Sampling, ...] = (T1,),
    samples: int = SAMPLES,
    seed: int = 1,
    endpoint_options: dict[str, object] | None = None,
    **kw: object,
):
    ep = endpoint(url, profile, twin, **(endpoint_options or {}))
    try:
        spec = endpoint_spec(ep, prompts=[PROMPT], samplings=list(samplings), tokens=4)
        return audit_engine(spec, EngineAuditConfig(alpha=ALPHA, samples=samples, seed=seed), **kw)  # type: ignore[arg-type]
    finally:
        ep.close()


@pytest.fixture(scope="module")
def correct():
    with StandIn(loop="laws") as si:
        yield si


@pytest.fixture(scope="module")
def twin():
    with StandIn(speculative=False, loop="laws") as si:
        yield si


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the stand-in itself


def test_standin_answers_each_api_deterministically(correct):
    """Equal seeds give equal tokens on every API; a one-token request drafts nothing; a longer
    one drafts; bad input is refused with HTTP 4xx."""
    u = correct.url
    llama = {"prompt": [0, 6], "n_predict": 4, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    with httpx.Client(timeout=30) as c:
        a, b = (c.post(u + "/completion", json={**llama, "seed": 7}).json() for _ in range(2))
        assert a["tokens"] == b["tokens"] and len(a["tokens"]) == 4
        drafted = [
            c.post(u + "/completion", json={**llama, "seed": s}).json()["timings"]["draft_n"]
            for s in range(8)
        ]
        assert sum(drafted) > 0
        law = c.post(
            u + "/completion",
            json={**llama, "n_predict": 1, "seed": 0, "n_probs": 8, "post_sampling_probs": True},
        ).json()
        assert law["timings"]["draft_n"] == 0
        assert abs(sum(e["prob"] for e in law["completion_probabilities"][0]["top_probs"]) - 1) < 1e-12
        vllm = {
            "prompt": [0, 6],
            "max_tokens": 4,
            "seed": 7,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        v1, v2 = (c.post(u + "/v1/completions", json=vllm).json() for _ in range(2))
        assert v1["choices"][0]["token_ids"] == v2["choices"][0]["token_ids"]
        assert "speculative_decoding" in v1["metrics"]
        sg = {"input_ids": [0, 6], "sampling_params": {"max_new_tokens": 4, "sampling_seed": 7}}
        s1, s2 = (c.post(u + "/generate", json=sg).json() for _ in range(2))
        assert s1["output_ids"] == s2["output_ids"] and "spec_num_proposed_drafts" in s1["meta_info"]
        assert c.get(u + "/v1/models").json()["data"][0]["meta"]["n_vocab"] == 8
        assert c.get(u + "/health").json() == {"status": "ok"}
        assert c.post(u + "/completion", json={**llama, "prompt": [0, 8]}).status_code == 400
        assert c.post(u + "/v1/completions", json={**vllm, "model": "other"}).status_code == 404
        assert c.post(u + "/nowhere", json={}).status_code == 404


def test_kv_loop_and_laws_loop_draw_the_same_tokens():
    """The stand-in's two loops (reference/decode.py with its KV cache, and the same process and
    rule on memoized laws) consume the generator alike: the same tokens and counters per seed."""
    body = {
        "prompt": [5, 2, 5, 2],
        "n_predict": 6,
        "temperature": 0.7,
        "top_k": 0,
        "top_p": 1.0,
        "min_p": 0.0,
    }
    with StandIn(loop="kv") as kv, StandIn(loop="laws") as laws, httpx.Client(timeout=30) as c:
        for seed in range(12):
            a = c.post(kv.url + "/completion", json={**body, "seed": seed}).json()
            b = c.post(laws.url + "/completion", json={**body, "seed": seed}).json()
            assert (a["tokens"], a["timings"]) == (b["tokens"], b["timings"])


def test_laws_along_a_path_and_kv_decoding_agree_with_one_forward_per_context():
    """The stand-in reads the laws along an output in one forward, and decodes without
    speculation on a KV cache: each row equals the forward of its own prefix up to rounding
    (1e-12), the path alone decides it (the same numbers asked twice, in any order), and KV
    decoding draws the same tokens as drawing from each prefix's own forward."""
    from specproof.properties.endpoint.served_model import ServedModel

    m = ServedModel()
    rng = np.random.default_rng(5)
    for _ in range(6):
        prompt = tuple(int(x) for x in rng.integers(0, 8, int(rng.integers(1, 6))))
        tokens = tuple(int(x) for x in rng.integers(0, 8, int(rng.integers(1, 40))))
        rows = m.logits_along(prompt, tokens)
        assert rows.shape == (len(tokens), 8)
        for d, z in enumerate(rows):
            assert np.max(np.abs(z - m.logits(prompt + tokens[:d]))) < 1e-12
        assert np.array_equal(m.logits_along(prompt, tokens[:3])[:3], m.logits_along(prompt, tokens[:3]))
        assert np.array_equal(rows, ServedModel().logits_along(prompt, tokens))
    s = Sampling(0.7)
    for seed in range(20):
        gen = np.random.default_rng(seed)
        kv = m.decode((1, 2), [3], 24, lambda z: m.law_of(z, s), functools.partial(_pick, rng=gen))
        draw, out = np.random.default_rng(seed), [3]
        while len(out) < 24:
            out.append(_pick(m.law((1, 2, *out), s), draw))
        assert kv == out


def _pick(p: np.ndarray, rng: np.random.Generator) -> int:
    return int(np.searchsorted(np.cumsum(p), rng.random() * float(np.sum(p)), side="right"))


def test_the_standin_command_serves_until_terminated():
    """``specproof standin`` prints its URL, answers there, refuses an unknown bug by name, and
    exits 0 on SIGTERM."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "specproof.properties.cli", "standin", "--no-speculation"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        with httpx.Client(timeout=30) as c:
            assert c.get(url + "/health").json() == {"status": "ok"}
            one = {"prompt": [0, 6], "n_predict": 3, "seed": 1, "temperature": 1.0}
            answer = c.post(url + "/completion", json=one).json()
            assert len(answer["tokens"]) == 3 and "draft_n" not in answer["timings"]  # no speculation
    finally:
        proc.terminate()
    assert proc.wait(60) == 0
    bad = subprocess.run([*cmd[:-1], "--bug", "nonesuch"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 4 and "--bug: 'nonesuch' is not a planted bug" in bad.stderr


# --------------------------------------------------------------------------- the correct stand-in


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("with_twin", [False, True], ids=["alone", "twin"])
def test_correct_standin_passes(correct, twin, profile, with_twin):
    r = audit(correct.url, profile, twin.url if with_twin else None)
    assert r.verdict == Verdict.PASS, r.summary()
    js = json.loads(json.dumps(r.to_json()))
    assert {"speculation", "reports", "control", "description"} <= set(js)
    assert js["samples"] == SAMPLES
    assert js["speculation"]["status"] == ("unobservable" if profile == "openai" else "ran")
    assert js["reports"]["status"] == "consistent" and js["reports"]["max_error"] < 1e-9
    assert js["description"]["profile"] == profile
    if with_twin:
        assert js["description"]["twin"] == [twin.url]
        assert js["control"]["seed_coupled"]["seeds"] > 0
        assert js["control"]["tolerance"] is not None and js["control"]["tolerance"] < 1e-9
    else:
        assert js["control"] is None


def test_correct_standin_passes_with_the_kv_loop(twin):
    """The reference loop itself (ReferenceEngine: KV cache, tree forward) behind the API."""
    with StandIn(loop="kv") as si:
        r = audit(si.url, "llamacpp", twin.url, samples=100, seed=3)
    assert r.verdict == Verdict.PASS, r.summary()
    assert r.speculation.drafted > 0 and r.speculation.accepted > 0


def test_stop_strings_end_samples_and_the_correct_standin_passes(correct, twin):
    """Stop strings over the token texts (one a whole token's text, one spanning two): the samples
    that stop are shorter, padded and scored up to the stop only, and the law holds."""
    r = audit(correct.url, "llamacpp", twin.url, samplings=(STOP_SETTING,))
    assert r.verdict == Verdict.PASS, r.summary()
    (case,) = r.cases
    assert case.n == SAMPLES and case.observed_tokens < SAMPLES * 4  # some ended early
    body = {"prompt": list(PROMPT), "n_predict": 12, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
            "min_p": 0.0, "stop": list(STOP_SETTING.stop)}  # fmt: skip
    stopped = 0
    for seed in range(20):
        answer = httpx.post(f"{correct.url}/completion", json={**body, "seed": seed}).json()
        k = STOP_SETTING.end(answer["tokens"])
        assert k in (None, len(answer["tokens"]))  # nothing after the stop
        if k is not None:
            stopped += 1
            assert answer["stop_type"] == "word" and answer["stopping_word"] in STOP_SETTING.stop
    assert stopped > 0
    with pytest.raises(httpx.HTTPStatusError):
        httpx.post(f"{correct.url}/completion", json={**body, "seed": 1, "stop": [""]}).raise_for_status()


def test_the_prefix_cache_axis_audits_each_case_cold_and_warm(correct, twin):
    """--prefix-cache: every case twice, cold and with cache_prompt (each request after the first
    finds its prompt in the cache); the correct stand-in passes both, and the sign-off says so."""
    from specproof.properties.engine.signoff import signoff

    r = audit(correct.url, "llamacpp", twin.url, endpoint_options={"prefix_cache": True})
    assert r.verdict == Verdict.PASS, r.summary()
    assert [c.case.cache for c in r.cases] == ["cold", "warm"] and r.factor == ""
    assert r.cases[1].case.name.endswith("after a prefix-cache hit")
    (item,) = [i for i in signoff(r) if i.question == "a prefix-cache hit behaves as a cold request"]
    assert item.answer == "yes", item
    hits = r.to_json()["plugins"]["cache"]  # counted from the answers' timings.cache_n
    assert hits["warm"] == r.cases[1].n and hits["counted"] == hits["warm"] and hits["hits"] > 0, hits
    assert f"{hits['hits']} of {hits['counted']} warm requests counted as hits" in item.detail


def test_a_server_that_never_hits_its_cache_is_not_signed_off_for_it(twin):
    """ignores_cache: cache_prompt never honoured (cache_n 0): the law holds cold and "warm" alike,
    and the sign-off's prefix-cache item reads not tested, never yes."""
    from specproof.properties.engine.signoff import signoff

    with StandIn("ignores_cache", loop="laws") as si:
        r = audit(si.url, "llamacpp", twin.url, endpoint_options={"prefix_cache": True})
    assert r.verdict == Verdict.PASS, r.summary()
    assert r.to_json()["plugins"]["cache"]["hits"] == 0 and "prefix cache: 0 of" in r.summary()
    (item,) = [i for i in signoff(r) if i.question == "a prefix-cache hit behaves as a cold request"]
    assert item.answer == "not tested" and "cache_n" in item.detail, item


def test_vllm_requests_are_salted_cold_and_unsalted_warm_and_hits_are_read_from_usage(correct, twin):
    """vLLM caches prompts by itself: every generation the audit sends carries a cache_salt of its
    own (no other request's cache), the prefix-cache axis's warm ones none; the hits are read from
    usage.prompt_tokens_details.cached_tokens. The correct stand-in in vLLM's shape passes cold and
    warm, and the sign-off says yes with the hits it counted."""
    from specproof.properties.engine.signoff import signoff

    vllm = families.make_profile("vllm")
    _, a = vllm.generation(PROMPT, 4, 1, T1, False)
    _, b = vllm.generation(PROMPT, 4, 1, T1, False)
    assert a["cache_salt"] != b["cache_salt"] and "cache_salt" not in vllm.warm_body(a)
    assert (
        vllm.read_generation(
            {"choices": [{"token_ids": [1]}], "usage": {"prompt_tokens_details": {"cached_tokens": 3}}}, False
        ).cached
        == 3
    )
    assert vllm.read_generation({"choices": [{"token_ids": [1]}], "usage": {}}, False).cached is None
    r = audit(correct.url, "vllm", twin.url, endpoint_options={"prefix_cache": True})
    assert r.verdict == Verdict.PASS, r.summary()
    assert [c.case.cache for c in r.cases] == ["cold", "warm"]
    hits = r.to_json()["plugins"]["cache"]
    assert hits["counted"] == hits["warm"] == r.cases[1].n and hits["hits"] > 0, hits
    (item,) = [i for i in signoff(r) if i.question == "a prefix-cache hit behaves as a cold request"]
    assert item.answer == "yes", item


def test_a_vllm_shaped_server_poisoned_after_a_hit_is_lossy_only_warm(twin):
    """prefix_poison in vLLM's shape: the cold (salted) requests keep the law, the warm ones do not."""
    with StandIn("prefix_poison", loop="laws") as si:
        r = audit(si.url, "vllm", twin.url, endpoint_options={"prefix_cache": True}, samples=200)
    assert r.verdict == Verdict.LOSSY, r.summary()
    assert "lossy only after a prefix-cache hit (the same prompt and setting held cold)" in r.summary()
    # the look the audit stops at depends on which request filled the one slot before each warm one
    # (4 in flight): every warm request it drew hit, however many that was
    warm = r.cases[1].n
    assert (
        "after a prefix-cache hit" in r.short_witness()
        and f"{warm} of {warm} warm requests hit" in r.summary()
    )


def test_the_prefix_cache_axis_needs_a_family_that_caches_and_no_load_axis(correct):
    with pytest.raises(UsageError, match="prefix_cache"):
        EndpointOptions((correct.url,), prefix_cache=True, loads=(1, 8))
    with pytest.raises(UsageError, match="at_cache"):
        audit(correct.url, "sglang", endpoint_options={"prefix_cache": True})


def test_openai_profile_reads_llamacpp_style_logprobs_without_a_token_map():
    """llama-server's OpenAI-compatible answers carry ids (``logprobs.content``): no token map."""
    with StandIn(loop="laws", openai_style="llamacpp") as si:
        ep = Endpoint(EndpointOptions((si.url,), "openai", concurrency=4))
        try:
            spec = endpoint_spec(ep, prompts=[PROMPT], samplings=[T1], tokens=4)
            r = audit_engine(spec, EngineAuditConfig(alpha=ALPHA, samples=100, seed=5))
        finally:
            ep.close()
    assert r.verdict == Verdict.PASS, r.summary()
    assert r.reports.status == "consistent"


@pytest.mark.parametrize("profile", ["llamacpp", "sglang"])
def test_cutoffs_are_speculated_on_their_law(correct, profile):
    """A setting with top-k and top-p is speculated on memoized laws against its law (SGLang's
    joint order of the cut-offs on /generate): the law holds and drafts are proposed and accepted."""
    cut = Sampling(0.7, top_k=4, top_p=0.9)
    r = audit(correct.url, profile, samplings=(T1, cut), samples=150, seed=2)
    assert r.verdict == Verdict.PASS, r.summary()
    for case in r.cases:
        assert case.speculation.drafted > 0 and case.speculation.accepted > 0


# --------------------------------------------------------------------------- planted bugs


def test_an_unknown_bug_is_refused():
    with pytest.raises(UsageError, match="unknown"):
        StandIn("segfaults")


@pytest.mark.parametrize("profile", PROFILES)
def test_greedy_verify_is_lossy(profile):
    with StandIn("greedy_verify", loop="laws") as si:
        r = audit(si.url, profile)
    assert r.verdict == Verdict.LOSSY, r.summary()
    assert r.witness is not None and r.samples < SAMPLES  # stopped at a look


def test_greedy_verify_is_lossy_with_the_kv_loop():
    with StandIn("greedy_verify", loop="kv") as si:
        r = audit(si.url, "llamacpp", samples=100)
    assert r.verdict == Verdict.LOSSY, r.summary()


def test_no_speculation():
    with StandIn("no_speculation", loop="laws") as si:
        r = audit(si.url)
    assert r.verdict == Verdict.NO_SPECULATION, r.summary()
    assert r.to_json()["speculation"]["status"] == "none"


def test_off_with_logprobs_passes_but_says_so():
    with StandIn("off_with_logprobs", loop="laws") as si:
        r = audit(si.url)
    assert r.verdict == Verdict.PASS, r.summary()
    spec = r.to_json()["speculation"]
    assert spec["off_when_probabilities_requested"] is True
    assert spec["with_probabilities_requested"]["drafted"] == 0 and spec["drafted"] > 0
    assert "switched OFF when probabilities are requested" in r.summary()


@pytest.mark.parametrize(
    "bug", [n for n, b in BUGS.items() if b.expect == Verdict.MISREPORTED and n != "averaged_metric"]
)
def test_misreported_probabilities(bug):
    with StandIn(bug, loop="laws") as si:
        r = audit(si.url)
    assert r.verdict == Verdict.MISREPORTED, r.summary()
    rep = r.to_json()["reports"]
    assert rep["status"] == "wrong" and rep["worst"] is not None
    if bug == "zero_logprobs":
        assert rep["worst"]["reported"] == 1.0
    else:
        assert rep["worst"]["prefix"] != []  # the first token's report is right


def test_ignores_seed_is_a_contract_violation():
    with StandIn("ignores_seed", loop="laws") as si:
        r = audit(si.url)
    assert r.verdict == Verdict.CONTRACT_VIOLATION
    assert r.violation is not None and r.violation["kind"] == "ignores_seed"
    assert r.samples == 0


def test_ignores_top_k_is_refused_before_sampling(correct):
    cut = (Sampling(1.0, top_k=3),)
    ep = endpoint(correct.url)
    try:
        assert endpoint_spec(ep, prompts=[PROMPT], samplings=cut).vocab == 8  # the correct one is fine
    finally:
        ep.close()
    with StandIn("ignores_top_k", loop="laws") as si:
        with pytest.raises(UsageError, match="ignores a sampling parameter"):
            audit(si.url, samplings=cut)
        assert all(tokens == 1 for _, _, tokens, _ in si.answered)  # law reads only


def test_ignores_top_k_under_sglang_is_lossy():
    """SGLang's recipe reads the law before the cut-offs and applies them itself, so a server
    that ignores top_k cannot be refused up front: its samples leave the law (a hard failure)."""
    with StandIn("ignores_top_k", loop="laws") as si:
        r = audit(si.url, "sglang", samplings=(Sampling(1.0, top_k=3),), samples=100)
    assert r.verdict == Verdict.LOSSY and r.witness is not None and r.witness.hard_failure


def test_flaky_is_absorbed_by_retries():
    with StandIn("flaky", loop="laws") as si:
        r = audit(si.url, samples=100)
        assert si.failed > 0
    assert r.verdict == Verdict.PASS, r.summary()
    assert r.to_json()["description"]["retried"] > 0


def law_test_seeds(answered: list[tuple[str, int, int, bool]]) -> set[int]:
    return {seed for _, seed, tokens, report in answered if tokens == 4 and not report}


def test_dies_refusing_keeps_every_sample_drawn(twin):
    """The server refuses connections 6 requests into sampling (one request at a time, the laws
    read from the twin, which stays up): underpowered with a fault, never pass; exactly the 6
    samples it answered are kept, each once."""
    seed = 4
    with StandIn("dies", loop="laws", die="refuse", dies_after=10**9) as si:
        before: set[int] = set()

        def die_soon(plan: str) -> None:  # called after the contract stage, before any sample
            before.update(law_test_seeds(si.answered))
            si.dies_after = si.requests + 7  # the metrics read before sampling, then 6 samples

        r = audit(
            si.url,
            twin=twin.url,
            seed=seed,
            endpoint_options={"concurrency": 1, "retries": 1},
            announce=die_soon,
        )
        answered = law_test_seeds(si.answered) - before
    assert r.verdict == Verdict.UNDERPOWERED, r.summary()
    assert r.fault and "ConnectError" in r.fault and r.to_json()["fault"] == r.fault
    assert r.samples == r.cases[0].n == 6
    kept = {sample_seed(seed, 0, k) % SEED_RANGE for k in range(6)}
    assert kept == answered  # every sample answered is kept, none twice, none invented


def test_dies_hanging_is_underpowered_and_keeps_what_was_checked():
    """The server hangs past the client's timeout some way into sampling (its own laws then
    unreadable too): underpowered with a fault; the samples counted before are kept, each once,
    each really drawn."""
    seed = 4
    with StandIn("dies", loop="laws", die="hang", dies_after=10**9) as si:

        def die_soon(plan: str) -> None:
            si.dies_after = si.requests + 61  # the metrics read, the first chunk (16 samples), its laws

        r = audit(si.url, seed=seed, endpoint_options={"timeout": 1.0, "retries": 1}, announce=die_soon)
        answered = law_test_seeds(si.answered)
    assert r.verdict == Verdict.UNDERPOWERED, r.summary()
    assert r.fault and "Timeout" in r.fault
    n = r.cases[0].n
    assert 16 <= n < SAMPLES and r.samples == n
    kept = {sample_seed(seed, 0, k) % SEED_RANGE for k in range(n)}
    assert len(kept) == n and kept <= answered


# --------------------------------------------------------------------------- bad input


def test_unreachable_url_is_a_usage_error_naming_it():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(UsageError, match=url.replace(".", r"\.")):
        Endpoint(EndpointOptions((url,), "llamacpp", retries=0)).open()


def test_unknown_profile(correct):
    with pytest.raises(UsageError, match="unknown.*llamacpp"):
        Endpoint(EndpointOptions((correct.url,), "tgi"))


def test_prompt_outside_the_vocabulary(correct):
    ep = endpoint(correct.url)
    try:
        with pytest.raises(UsageError, match="outside the served vocabulary"):
            endpoint_spec(ep, prompts=[(0, 8)])
    finally:
        ep.close()


def test_twin_with_another_vocabulary():
    with StandIn(loop="laws") as si, StandIn(speculative=False, vocab=9, loop="laws") as other:
        with pytest.raises(UsageError, match="vocabulary of 8.*9"):
            endpoint(si.url, twin=other.url)


@pytest.mark.parametrize("profile", ["llamacpp", "vllm"])
def test_twin_serving_another_model(profile):
    """Another model of the same shape: llama-server's metadata cannot tell them apart, so the
    laws do (before sampling); vLLM's model root does at once."""
    with StandIn(loop="laws") as si, StandIn(speculative=False, model_seed=1, loop="laws") as other:
        with pytest.raises(UsageError, match="--twin"):
            audit(si.url, profile, other.url)
        assert all(tokens == 1 for _, _, tokens, _ in si.answered + other.answered)  # nothing sampled


# --------------------------------------------------------------------------- calibration


@pytest.mark.slow
def test_http_false_alarms_are_calibrated():
    """40 seeded audits (seeds 1000 on, 200 samples, alpha 0.01) of the correct stand-in through
    HTTP: at most 4 false alarms. Under a calibrated test the count is at most Binomial(40, 0.01),
    which exceeds 4 with probability 4.9e-5 (< 1e-4); the seeds are fixed, so this is one fixed
    outcome, not a draw. And greedy_verify is rejected in each of 5 audits at alpha 1e-3."""
    doc = calibrate_http(runs=40, samples=200, alpha=0.01, progress=None, power_runs=5)
    assert doc["exact"]["false_alarms"] <= 4, doc["markdown"]
    assert doc["exact"]["other_than_pass_or_alarm"] == 0, doc["exact"]["verdicts"]
    assert doc["power"]["rejected"] == 5, doc["power"]["verdicts"]
    assert "| correct (false alarms) | 40 |" in doc["markdown"]


@pytest.mark.slow
@pytest.mark.parametrize("axis", ["load", "prefix_cache"])
def test_an_axis_calibration_counts_its_checks_apart(axis):
    """Four seeded audits (seeds 1000 on, 200 samples, alpha 0.01) of the correct stand-in on the
    load axis (1 and 8 in flight) or the prefix-cache axis, against a twin: at most 2 false alarms
    (lossy or acceptance_low; a calibrated run gives one with probability at most its family-wise
    0.01, proofs_notes/load.md Claim 4, so 3 of 4 has probability below 4e-6), and the checks each axis adds
    are counted: every level's seeds drawn twice with none giving two outputs (an exact check), the
    background token test and the acceptance comparison run in every audit. And the axis's planted
    bug is rejected at alpha 1e-3 (prefix_poison; batch_rows needs more samples than a unit test
    spends, so its row is only run)."""
    kw = {"loads": (1, 8)} if axis == "load" else {"prefix_cache": True}
    doc = calibrate_http(runs=4, samples=200, alpha=0.01, progress=None, power_runs=1, **kw)
    e, checks = doc["exact"], doc["exact"]["checks"]
    assert e["false_alarms"] <= 2 and e["other_than_pass_or_alarm"] == 0, e["verdicts"]
    assert checks["axis_acceptance_tests"] == 4 and checks["axis_acceptance_alpha"] == pytest.approx(0.0025)
    if axis == "load":
        assert checks["seeds_drawn_twice"] >= 4 * 2 * 16 and checks["seeds_with_two_outputs"] == 0
        assert checks["background_tests"] == 4 and checks["background_records"] > 0
        assert doc["power"]["stand_in"] == "batch_rows" and doc["power"]["runs"] == 1
        assert "with 1 and 8 requests in flight" in doc["case"]
        assert "Seed use per level" in doc["markdown"]
        assert "background requests' token test" in doc["markdown"]
    else:
        assert "seeds_drawn_twice" not in checks and "background_tests" not in checks
        assert doc["power"]["stand_in"] == "prefix_poison" and doc["power"]["rejected"] == 1
        assert "after a prefix-cache hit" in doc["case"]
    assert "Acceptance compared across the axis (alpha 0.0025 each): low in" in doc["markdown"]


def test_calibrate_refuses_axis_flags_without_endpoint_and_two_axes_at_once(capsys):
    """The axes go with --endpoint, and one axis a calibration, as in an audit."""
    from specproof.properties.cli import USAGE_ERROR, main

    assert main(["calibrate", "--load", "8"]) == USAGE_ERROR
    assert "--load goes with --endpoint, not the verifiers' calibration" in capsys.readouterr().err
    assert main(["calibrate", "--tokens", "--completions", "4"]) == USAGE_ERROR
    assert "--completions goes with --endpoint, not --tokens" in capsys.readouterr().err
    assert main(["calibrate", "--endpoint", "--load", "0"]) == USAGE_ERROR
    assert "loads: each level is a number of requests in flight" in capsys.readouterr().err
    with pytest.raises(UsageError, match="prefix_cache: audit the prefix-cache axis and the load axis"):
        calibrate_http(runs=1, loads=(8,), prefix_cache=True, progress=None)
    with pytest.raises(UsageError, match="completions: audit the completions axis"):
        calibrate_http(runs=1, loads=(8,), completions=4, progress=None)


def test_a_crash_is_named_not_only_the_refusals_after_it(twin):
    """The server answers one request HTTP 500 and exits (vLLM's CPU build on top_k under
    speculation): the requests in flight and after it meet refused connections, and the fault
    the audit states names the HTTP 500 that caused them."""
    with StandIn("crashes", loop="laws", dies_after=10**9) as si:

        def crash_soon(plan: str) -> None:
            si.dies_after = si.requests + 10

        r = audit(si.url, twin=twin.url, endpoint_options={"retries": 1}, announce=crash_soon)
    assert r.verdict == Verdict.UNDERPOWERED, r.summary()
    assert r.fault and "HTTP 500" in r.fault and "EngineCore died" in r.fault, r.fault
    assert 0 < r.samples < SAMPLES


def test_a_deviation_found_first_is_not_overridden_by_a_later_refusal(twin):
    """Verification is lossy and, after the law test rejected it, the reports stage's requests
    are refused HTTP 400: the verdict stays lossy, the refusal is stated after it, and the report
    check says it stopped (not that it was not offered)."""
    with StandIn("nan_reports", loop="laws") as si:
        r = audit(si.url, twin=twin.url)
    assert r.verdict == Verdict.LOSSY, r.summary()
    assert r.violation is not None and r.violation["stage"] == "checks"
    assert "JSON compliant" in r.violation["detail"]
    assert r.reports.status == "stopped" and "JSON compliant" in (r.reports.stopped or "")
    text = r.summary()
    assert "the rejection stands" in text and "NOT CHECKED" in text
    assert r.witness is not None and "JSON" not in r.short_witness()
    assert text.index("witness:") < text.index("the rejection stands")
    assert r.per_sample_seconds is not None and r.per_sample_seconds > 0


def test_no_time_per_sample_is_claimed_when_none_was_drawn():
    with StandIn("ignores_seed", loop="laws") as si:
        r = audit(si.url)
    assert r.verdict == Verdict.CONTRACT_VIOLATION
    assert r.per_sample_seconds is None and r.to_json()["per_sample_seconds"] is None
    assert r.per_sample_text() == "no law-test sample drawn, so no time per sample"


def test_vllm_reads_the_laws_along_a_sample_in_one_request(correct):
    """Under temperature and cut-offs alone the vLLM profile reads the laws after every prefix
    of a sample from one request (the sample as a prompt, prompt_logprobs: -1, rebuilt by the
    setting's law): the same laws as one request per prefix, from one request per longest
    context; a setting with a penalty keeps the per-prefix recipe."""
    from specproof.properties.endpoint.families import vllm as vllm_family

    ep = endpoint(correct.url, "vllm")
    try:
        for s in (T1, Sampling(0.7, top_k=3)):
            engine = ep.engine(s)
            prompt = list(PROMPT)
            samples = [(1, 5, 2, 7), (1, 5, 3), (4, 4, 4, 4), (1, 5, 2, 7)]
            contexts = sorted({tuple(prompt) + x[:d] for x in samples for d in range(len(x) + 1)})
            before = engine._laws.requests
            along = engine.target_laws([list(c) for c in contexts], prompt_len=len(prompt))
            assert engine._laws.requests - before == 3 and engine.along_requests == 3  # the longest ones
            for c, law in zip(contexts, along):
                alone = engine.target_law(list(c), len(prompt))  # one context: the per-prefix recipe
                assert np.abs(np.asarray(law) - np.asarray(alone)).max() < 1e-12, c
        penalty = Sampling(1.0, frequency_penalty=0.5)
        assert not vllm_family.rebuilt_from_raw(penalty)
        assert ep.profile.laws_along_request(list(PROMPT) + [1], penalty, 8, len(PROMPT)) is None
    finally:
        ep.close()


def test_laws_along_a_sample_are_read_in_one_request_where_they_agree(correct, twin, monkeypatch):
    """The llamacpp profile reads a sample's laws from the twin in one request (a grammar of
    token ids) once they agree with the one-token recipe's after the first prompt; an audit at
    M = 16 then sends one law request a sample (or fewer: samples sharing a path share it).
    From the speculative server alone, and where the two reads disagree, the laws are read one
    position at a time, and the endpoint says why."""
    from specproof.properties.endpoint.families.llamacpp import LlamaCpp

    ep = endpoint(correct.url, twin=twin.url)
    try:
        spec = endpoint_spec(ep, prompts=[PROMPT], samplings=[T1], tokens=16)
        assert ep.along == {T1: ""}
        r = audit_engine(spec, EngineAuditConfig(alpha=ALPHA, samples=40, seed=1, report_samples=0))
        assert r.verdict == Verdict.PASS, r.summary()
        # the 40 samples and the plan's probe (a chunk of 16, concurrency 4 x 4), one request each at most
        assert 0 < r.description["teacher_forced_law_requests"] <= 40 + 16
    finally:
        ep.close()
    ep = endpoint(correct.url)
    try:
        endpoint_spec(ep, prompts=[PROMPT], samplings=[T1], tokens=16)
        assert "speculative server" in ep.along[T1]
    finally:
        ep.close()
    read = LlamaCpp.read_laws_along

    def off(self, answer, s, vocab, context, prompt_len):  # a read that disagrees after the prompt
        rows = read(self, answer, s, vocab, context, prompt_len)
        rows[1] = list(np.roll(rows[1], 1))
        return rows

    monkeypatch.setattr(LlamaCpp, "read_laws_along", off)
    ep = endpoint(correct.url, twin=twin.url)
    try:
        endpoint_spec(ep, prompts=[PROMPT], samplings=[T1], tokens=16)
        assert "differ from the one-token recipe's" in ep.along[T1]
        assert not ep.engine(T1).reads_along()
    finally:
        ep.close()


def test_a_server_that_never_drafts_stops_before_sampling_with_the_likely_cause(twin):
    """A speculative server whose answers all say nothing was drafted: the audit stops after the
    probe (none of its samples drafted), `no_speculation`, with llama-server's likely cause; no
    sample of the plan is drawn. A twin that speculates is refused before anything is sampled."""
    with StandIn(bug="no_speculation", loop="laws") as idle:
        ep = endpoint(idle.url, twin=twin.url)
        try:
            spec = endpoint_spec(ep, prompts=[PROMPT], samplings=[T1], tokens=16)
            r = audit_engine(spec, EngineAuditConfig(alpha=ALPHA, seed=1))
        finally:
            ep.close()
    assert r.verdict == Verdict.NO_SPECULATION and r.samples == 0, r.summary()
    assert "stopped before sampling: none of the 16 samples" in r.summary()
    assert "--spec-type draft-simple" in r.summary()
    with StandIn(loop="laws") as a, StandIn(loop="laws") as b:
        with pytest.raises(UsageError, match="--twin: .* it speculates"):
            ep = endpoint(a.url, twin=b.url)
            try:
                endpoint_spec(ep, prompts=[PROMPT], samplings=[T1], tokens=16)
            finally:
                ep.close()


def test_a_server_of_another_family_is_named_at_once_with_the_fix(tmp_path):
    """A server that does not answer in the profile's shape (here a plain file server on loopback:
    every route a 404) is refused before any sampling, in seconds, naming the URL, the profile it
    was read as, and the flag that names another family."""
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        t0 = time.perf_counter()
        with pytest.raises(UsageError) as e:
            endpoint(url, "vllm").open()
        assert time.perf_counter() - t0 < 30
    finally:
        server.shutdown()
        server.server_close()
    text = str(e.value)
    assert f"URL: {url} does not answer as profile vllm" in text
    assert "--profile names its family" in text and "llamacpp" in text


def _prefill_audit(si: StandIn, samples: int = 64, **kw: object):
    ep = endpoint(si.url, "vllm")
    try:
        spec = endpoint_spec(ep, prompts=[PROMPT], samplings=[T1], tokens=32)
        assert ep.along == {T1: ""}  # the check before sampling found the two reads equal
        config = EngineAuditConfig(alpha=ALPHA, samples=samples, seed=1, report_samples=0, test="tokens")
        return audit_engine(spec, config, **kw)  # type: ignore[arg-type]
    finally:
        ep.close()


def test_laws_read_along_a_path_are_checked_at_random_depths_while_sampling(correct, monkeypatch):
    """The vLLM family reads a sample's laws in one prefill request (prompt_logprobs). A server
    whose prefill reads past the 8th token from a window its decode path lacks (prefill_window)
    agrees with the one-token recipe right after the prompt, where the check before sampling
    looks; while sampling, one sample in eight is checked at a depth drawn from the seed against
    the one-token recipe: a contract violation naming the position, which nothing else names
    (the check switched off, the token test compares a correct generation with wrong laws). The
    correct server passes with every checked read equal to the last bits."""
    from specproof.properties.engine import token_stage

    with StandIn("prefill_window", loop="laws") as si:
        r = _prefill_audit(si)
        assert r.verdict == Verdict.CONTRACT_VIOLATION, r.summary()
        assert r.violation["kind"] == "teacher_forcing_differs"
        assert "in one request after [0, 6, " in r.violation["detail"], r.violation
        assert "differs from the one-token recipe's law there" in r.violation["detail"]
        monkeypatch.setattr(token_stage, "FORCING_SHARE", 0.0)
        blind = _prefill_audit(si)  # the token test alone compares the generation with wrong laws
        assert (
            blind.verdict != Verdict.CONTRACT_VIOLATION and "teacher_forcing_checked" not in blind.token_test
        )
    monkeypatch.undo()
    ok = _prefill_audit(correct)
    assert ok.verdict == Verdict.PASS, ok.summary()
    forced = ok.token_test["teacher_forcing_checked"]
    assert forced["checked"] >= 1 and forced["largest_tv"] < 1e-6, forced
