"""The endpoint audit on real llama-server processes (the pinned build, the tiny GGUF models),
started on loopback by the tests and stopped at the end.

Fixed sample sizes and seeds, so every verdict here is deterministic (llama-server with one slot
gives the same tokens for the same seed: /work/notes aside, tests/test_llamacpp.py checks it);
alpha is the engine audit's default 1e-4 over the cases. What they show:

* draft-model speculation (``draft-simple``) keeps the law under temperature, top-k, top-p,
  min-p and greedy decoding; it speculated (drafted and accepted); it is token-for-token the
  server without speculation under the same seed (its verifier samples the target once per
  emitted token and compares); and the probabilities it reports for drafted tokens are wrong
  (1.0), so the verdict is ``misreported``;
* an n-gram speculation type likewise;
* the command line and the JSON carry the recipe, the counters, the tolerance and the control.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("gguf", reason="the tiny GGUF models need the gguf package")

from specproof.properties.endpoint import llamacpp  # noqa: E402
from specproof.properties.endpoint import llamacpp_suite as suite  # noqa: E402
from specproof.properties.engine.audit import EngineAuditConfig  # noqa: E402
from specproof.properties.engine.contract import GREEDY, Sampling  # noqa: E402
from specproof.properties.verdicts import Verdict  # noqa: E402

pytestmark = pytest.mark.llamacpp
CONFIG = EngineAuditConfig(samples=300, report_samples=16, seed=0)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    llamacpp.ensure_built(progress=lambda m: print(m, file=sys.stderr))
    return suite.models(tmp_path_factory.mktemp("gguf"))


def test_draft_model_speculation_keeps_the_law_and_misreports_drafted_probabilities(files):
    settings = [Sampling(0.7, top_k=5), Sampling(1.0, top_p=0.8), Sampling(1.0, min_p=0.1), GREEDY]
    r = suite.audit_config(suite.BY_NAME["llama-server.draft"], CONFIG, files, settings)
    assert r.verdict == Verdict.MISREPORTED, r.summary()
    assert not any(c.rejected for c in r.cases)  # the law held in every case
    assert all(c.speculation.status == "ran" for c in r.cases), r.summary()
    assert r.reports.status == "wrong" and r.reports.worst["reported"] == 1.0
    assert r.control is not None and r.control.identical == r.control.coupled > 0
    assert r.control.tolerance is not None and r.control.tolerance < 1e-5
    assert r.description["profile"] == "llamacpp" and "n_probs" in r.description["recipe"]


def test_an_ngram_speculation_type_keeps_the_law(files):
    r = suite.audit_config(suite.BY_NAME["llama-server.ngram-cache"], CONFIG, files)
    assert not any(c.rejected for c in r.cases), r.summary()
    assert r.speculation.drafted > 0 and r.speculation.accepted > 0, r.summary()
    assert r.verdict in (Verdict.MISREPORTED, Verdict.NO_SPECULATION), r.summary()


def test_command_line_audit_of_a_served_engine(files, tmp_path):
    binary = llamacpp.ensure_built(progress=lambda m: None)
    out = tmp_path / "endpoint.json"
    with (
        llamacpp.start_server(binary, files["target"], draft=files["draft"]) as url,
        llamacpp.start_server(binary, files["target"]) as twin,
    ):
        argv = ["audit", "endpoint", url, "--target-endpoint", twin, "--prompt", "1 2", "--temperature", "1"]
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
