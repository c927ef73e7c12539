"""llama.cpp's llama-server on specproof's tiny GGUF models: build, loopback server, exact law, speculation.

The model tests need only numpy and the ``gguf`` package. The tests marked ``llamacpp`` need the
pinned llama.cpp build: the session fixture ``llamacpp_bin`` (tests/conftest.py) uses the cached
build that ``specproof llamacpp build`` made (README's test command runs it), and skips them, with
the command in its reason, where there is none (``SPECPROOF_BUILD_LLAMACPP=1`` builds it).
"""

from __future__ import annotations

import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the tiny GGUF models need the gguf package (pip install gguf==0.19.0)")

from specproof.properties.servers import gguf_models as gm  # noqa: E402
from specproof.properties.servers import llamacpp  # noqa: E402

V = len(gm.VOCAB)
CONTEXTS = [[1], [2, 3], [5, 1, 9, 14], [15, 15, 15], [3, 8, 2, 11, 7, 6, 13, 4, 10, 12, 1, 9]]
# The server (start_server's defaults: f32 KV cache, flash attention off) computes the same law in
# float32; the numpy law is float64. Measured max |difference| on CONTEXTS: 8e-8. With flash
# attention on, the CPU kernel rounds through float16 and the difference grows to about 1.5e-4.
LAW_TOL = 1e-6
NEUTRAL = {  # the sampled law is exactly softmax(logits / temperature): every other sampler off
    "samplers": ["temperature"],
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "repeat_penalty": 1.0,
    "repeat_last_n": 0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "dry_multiplier": 0.0,
    "xtc_probability": 0.0,
    "top_n_sigma": -1.0,
    "mirostat": 0,
    "cache_prompt": False,
}


def test_models_are_deterministic(tmp_path: Path) -> None:
    """Same seed, same bytes; another seed, other bytes; the files hold exactly the numpy weights."""
    a = gm.write_models(tmp_path / "a", seed=0)
    b = gm.write_models(tmp_path / "b", seed=0)
    c = gm.write_models(tmp_path / "c", seed=1)
    assert a["sha256"] == b["sha256"]
    assert a["target"].read_bytes() == b["target"].read_bytes()
    assert a["sha256"]["target"] != c["sha256"]["target"]
    assert a["vocab"] == list(gm.VOCAB) and a["eos_id"] == gm.EOS_ID == 0
    tw = gm.target_weights(0)
    back = gm.read_weights(a["target"])
    assert sorted(back) == sorted(tw)
    assert all(np.array_equal(back[k], tw[k]) for k in tw)


def test_numpy_law_is_causal_spread_and_draft_overlaps() -> None:
    """Prefix logits do not depend on later tokens; laws are spread; the draft shares much of the mass."""
    tw = gm.target_weights(0)
    dw = gm.draft_weights(tw, 0)
    seq = CONTEXTS[-1]
    full = gm.logits(tw, seq)
    for n in (1, 4, 8):
        np.testing.assert_allclose(gm.logits(tw, seq[:n]), full[:n], rtol=0, atol=1e-10)
    for ctx in CONTEXTS:
        p, q = gm.next_token_law(tw, ctx), gm.next_token_law(dw, ctx)
        assert p.shape == (V,) and abs(p.sum() - 1) < 1e-12
        assert p.max() < 0.8 and (p > 0.01).sum() >= 4  # spread, not one-hot
        assert 0.0 < 0.5 * np.abs(p - q).sum() < 0.6  # the draft differs, but overlaps


def test_text_round_trip() -> None:
    """Token pieces are a prefix-free code: ids -> text -> ids."""
    ids = [1, 2, 0, 15, 0, 7]
    assert gm.detokenize(gm.to_text(ids)) == ids
    with pytest.raises(ValueError, match="not a piece"):
        gm.detokenize("abz")


def test_cache_folder_and_flags_hash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The cache lives under SPECPROOF_CACHE (outside the repository) and names version and flags."""
    monkeypatch.setenv("SPECPROOF_CACHE", str(tmp_path))
    folder = llamacpp.build_dir()
    assert folder.parent == tmp_path / "llama.cpp"
    assert folder.name == f"{llamacpp.VERSION}-{llamacpp.flags_hash()}"
    assert not llamacpp.is_built(folder)
    assert llamacpp.info()["cached"] is False


def test_build_errors_name_the_problem(tmp_path: Path) -> None:
    """A failing step raises LlamaCppBuildError with the log's tail; a moved patch anchor is caught."""
    log = tmp_path / "build.log"
    with pytest.raises(llamacpp.LlamaCppBuildError, match=r"exited with 3(.|\n)*boom"):
        llamacpp._run_logged(["sh", "-c", "echo boom; exit 3"], log)
    (tmp_path / "examples" / "speculative").mkdir(parents=True)
    (tmp_path / "examples" / "speculative" / "speculative.cpp").write_text("int main() {}\n")
    with pytest.raises(llamacpp.LlamaCppBuildError, match="expected one"):
        llamacpp.apply_patches(tmp_path)


def test_a_long_build_step_says_how_far_it_is(tmp_path: Path) -> None:
    """A build step's ninja-style ``[done/total]`` lines are said as progress (here every line,
    ``every=0``), the last one always, everything kept in the log; a failing step names its log."""
    import sys

    script = "for i in range(1, 5):\n    print(f'[{i}/4] Building CXX object x{i}.o')\nprint('done')"
    log = tmp_path / "build.log"
    said: list[str] = []
    llamacpp._run_logged([sys.executable, "-c", script], log, progress=said.append, every=0)
    assert [line.split("(")[0].strip() for line in said] == [f"{i} of 4 steps" for i in range(1, 5)]
    assert "[3/4] Building CXX object x3.o" in log.read_text() and "done" in log.read_text()
    said.clear()
    llamacpp._run_logged([sys.executable, "-c", script], log, progress=said.append, every=3600)
    assert len(said) == 1 and said[0].strip().startswith("4 of 4 steps (100%)")  # only the last one
    with pytest.raises(llamacpp.LlamaCppBuildError, match="exited with 3"):
        llamacpp._run_logged([sys.executable, "-c", "raise SystemExit(3)"], log)


def test_concurrent_callers_build_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two callers at once: the lock lets one build; the other waits and finds the finished folder."""
    monkeypatch.setenv("SPECPROOF_CACHE", str(tmp_path))
    calls = []

    def fake_build(final: Path, progress: Any) -> None:
        calls.append(final)
        time.sleep(0.3)
        out = final.parent / "out.tmp"
        out.mkdir()
        for name in (*llamacpp.TARGETS, llamacpp.MARKER):
            (out / name).write_text("{}")
        out.rename(final)

    monkeypatch.setattr(llamacpp, "_build_into", fake_build)
    with ThreadPoolExecutor(2) as pool:
        folders = list(pool.map(lambda _: llamacpp.ensure_built(progress=lambda m: None), range(2)))
    assert len(calls) == 1 and folders[0] == folders[1] == llamacpp.build_dir()
    assert llamacpp.is_built(folders[0])


# --------------------------------------------------------------------------- needs the build


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tiny target and draft, seed 0."""
    return gm.write_models(tmp_path_factory.mktemp("gguf"), seed=0)


@pytest.fixture(scope="module")
def target_server(llamacpp_bin: Path, models: dict[str, Any]) -> Any:
    """One llama-server on the target alone, shared by this module's tests."""
    with llamacpp.start_server(llamacpp_bin, models["target"]) as url:
        yield url


def _complete(url: str, prompt: list[int], **body: Any) -> dict[str, Any]:
    """POST /completion with a token-id prompt and the neutral sampler settings."""
    return llamacpp.post_json(f"{url}/completion", {**NEUTRAL, "prompt": prompt, **body})


def _listening_on(port: int) -> set[str]:
    """Local addresses (hex, as in /proc/net/tcp*) in LISTEN state on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(addr)
    return found


@pytest.mark.llamacpp
def test_build_has_the_binaries(llamacpp_bin: Path) -> None:
    """The cached folder holds every target and a marker naming the pinned version and commit."""
    assert llamacpp.is_built(llamacpp_bin)
    info = llamacpp.marker(llamacpp_bin)
    assert info is not None and info["llama_cpp_python"] == llamacpp.VERSION
    out = subprocess.run([str(llamacpp_bin / "llama-server"), "--version"], capture_output=True, text=True)
    assert llamacpp.LLAMA_CPP_COMMIT[:7] in out.stdout + out.stderr


@pytest.mark.llamacpp
def test_server_listens_on_loopback_only_and_stops(llamacpp_bin: Path, models: dict[str, Any]) -> None:
    """The server binds 127.0.0.1 and nothing else, answers /health, and is gone after the block."""
    port = llamacpp.free_port()
    with llamacpp.start_server(llamacpp_bin, models["target"], port=port) as url:
        assert url == f"http://127.0.0.1:{port}"
        if Path("/proc/net/tcp").exists():
            assert _listening_on(port) == {"0100007F"}
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass


@pytest.mark.llamacpp
def test_server_error_shows_stderr(llamacpp_bin: Path, tmp_path: Path) -> None:
    """A model the server cannot load raises LlamaServerError with the server's own words."""
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(llamacpp.LlamaServerError, match="invalid magic"):
        with llamacpp.start_server(llamacpp_bin, bad):
            pass


@pytest.mark.llamacpp
@pytest.mark.parametrize("ctx", CONTEXTS)
def test_numpy_law_matches_server(target_server: str, models: dict[str, Any], ctx: list[int]) -> None:
    """At T=1 with every other sampler neutral, the post-sampling law is the numpy law, to LAW_TOL."""
    tw = gm.read_weights(models["target"])
    r = _complete(target_server, ctx, n_predict=1, n_probs=V, post_sampling_probs=True, seed=1)
    top = r["completion_probabilities"][0]["top_probs"]
    served = np.zeros(V)
    for entry in top:
        served[entry["id"]] = entry["prob"]
    assert len(top) == V  # every id of the vocabulary: none has probability 0 at T=1
    assert np.max(np.abs(served - gm.next_token_law(tw, ctx))) < LAW_TOL
    # the pre-sampling view (raw softmax of the logits, as log-probabilities) agrees too
    r = _complete(target_server, ctx, n_predict=1, n_probs=V, post_sampling_probs=False, seed=1)
    raw = np.zeros(V)
    for entry in r["completion_probabilities"][0]["top_logprobs"]:
        raw[entry["id"]] = np.exp(entry["logprob"])
    assert np.max(np.abs(raw - gm.next_token_law(tw, ctx))) < LAW_TOL


@pytest.mark.llamacpp
def test_generate_returns_ids_in_range_and_is_seeded(target_server: str) -> None:
    """``return_tokens`` gives the generated ids; the same seed gives the same ids."""
    r = _complete(target_server, [1, 2, 3], n_predict=16, seed=7, return_tokens=True, ignore_eos=True)
    ids = r["tokens"]
    assert len(ids) == 16 == r["tokens_predicted"]
    assert all(1 <= i < V for i in ids)  # ignore_eos bans EOS (id 0)
    assert gm.to_text(ids) == r["content"]
    again = _complete(target_server, [1, 2, 3], n_predict=16, seed=7, return_tokens=True, ignore_eos=True)
    assert again["tokens"] == ids


@pytest.mark.llamacpp
def test_speculation_counters_and_identity(
    llamacpp_bin: Path, models: dict[str, Any], target_server: str
) -> None:
    """With the draft, draft_n > 0 and 0 < accepted < drafted; tokens equal the target-alone run's."""
    body = {"n_predict": 32, "seed": 11, "return_tokens": True, "ignore_eos": True}
    plain = _complete(target_server, [4, 5], **body)
    spec_args = ["--spec-draft-n-max", "4"]
    with llamacpp.start_server(llamacpp_bin, models["target"], models["draft"], extra_args=spec_args) as url:
        spec = _complete(url, [4, 5], **body)
        # facts the endpoint audit relies on (docs/endpoint-audit.md, "Server families")
        off = _complete(url, [4, 5], **body, speculative={"n_max": 0}, **{"speculative.n_max": 0})
        probs = _complete(url, [4, 5], **body, n_probs=V, post_sampling_probs=True)
    assert off["timings"]["draft_n"] > 0  # speculation cannot be turned off per request
    assert any(not e["top_probs"] for e in probs["completion_probabilities"])  # no law for drafted tokens
    t = spec["timings"]
    assert t["draft_n"] > 0 and 0 < t["draft_n_accepted"] < t["draft_n"]
    assert "draft_n" not in plain["timings"]
    assert all(0 <= i < V for i in spec["tokens"])
    assert spec["tokens"] == plain["tokens"]  # sample-and-compare with a greedy draft: same tokens


@pytest.mark.llamacpp
@pytest.mark.parametrize("program", ["llama-speculative", "llama-speculative-simple"])
def test_llama_speculative_runs(llamacpp_bin: Path, models: dict[str, Any], program: str) -> None:
    """The examples run on the tiny models (multi-draft: -np 2); the text decodes to vocabulary ids."""
    args = "-n 24 --seed 3 --spec-draft-n-max 4 --temp 1 --top-k 0 --top-p 1 --min-p 0 --samplers temperature"
    if program == "llama-speculative":
        args += " -np 2"
    run = llamacpp.run_speculative(
        llamacpp_bin, models["target"], models["draft"], "abc", args.split(), program
    )
    ids = gm.detokenize(run.text)
    assert ids[:3] == [1, 2, 3] and all(0 <= i < V for i in ids)
    assert run.stats["n_draft"] == 4 and 0 <= run.stats["n_accept"] <= run.stats["n_predict"]
    again = llamacpp.run_speculative(
        llamacpp_bin, models["target"], models["draft"], "abc", args.split(), program
    )
    assert again.text == run.text  # seeded


def test_a_run_that_hangs_is_run_again_and_an_always_hanging_one_named(tmp_path: Path, monkeypatch) -> None:
    """About one llama-speculative run in a thousand never exits (its logger's ring full when the
    drain pauses it: proofs_notes/thirdparty.md); the real program cannot be made to hang on
    demand, so a stand-in does: it hangs on its first call and answers on its second (a 5 s
    timeout: far above a stand-in call, even beside busy cores). A run past
    the timeout is run again; one that hangs every time is a LlamaRunError that says so."""
    marker = tmp_path / "called"
    fake = tmp_path / "llama-speculative"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'if [ ! -e "{marker}" ] || [ -n "$ALWAYS_HANG" ]; then touch "{marker}"; exec sleep 30; fi\n'
        "printf '\\n\\nabc\\n\\n\\n\\n'\n"
        "echo 'n_draft = 4' >&2\n"
    )
    fake.chmod(0o755)
    run = llamacpp.run_speculative(tmp_path, tmp_path / "t", tmp_path / "d", "abc", attempts=3, timeout=5.0)
    assert run.text == "abc"
    monkeypatch.setenv("ALWAYS_HANG", "1")
    with pytest.raises(llamacpp.LlamaRunError, match=r"output incomplete in 2 runs \(2 hung past 5 s\)"):
        llamacpp.run_speculative(tmp_path, tmp_path / "t", tmp_path / "d", "abc", attempts=2, timeout=5.0)
