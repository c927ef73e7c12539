"""The tiers' worker processes (properties/servers/venvs.py), on a stand-in worker: a Python
script of a few lines run with this interpreter, which speaks the workers' JSON lines and fails on
purpose by mode (it never starts; it exits in the middle of a request, as mistral.rs's speculative
runner panics; it answers an error, as the mistral.rs worker did with a TypeError). Nothing of a
tier is installed; every outcome is fixed. Every worker's stderr is kept in a log file of its own,
and a failure quotes its tail (once a crash read only "exited (code 1)").
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from specproof.properties.servers import venvs
from specproof.reference.errors import ArgumentTypeError

#: the stand-in worker: ``SCRIPT MODE``; modes no-start, crash, raise, else the same tokens always
WORKER = r"""
import json, sys
mode = sys.argv[1]
err = sys.stderr
panic = "thread 'main' panicked at speculative.rs:42: unwrap on a None value"
raised = "TypeError: CompletionRequest() got an unexpected keyword 'seed'"
print("a native library's banner on stdout", flush=True)
print(f"starting in mode {mode}", file=sys.stderr, flush=True)
if mode == "no-start":
    print("Traceback (most recent call last):\nImportError: libfoo.so: cannot open", file=err, flush=True)
    sys.exit(3)
print(json.dumps({"ready": True, "mode": mode}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req.get("op") == "quit":
        break
    if mode == "crash":
        print(panic, file=err, flush=True)
        sys.exit(101)
    if mode == "raise":
        print("Traceback (most recent call last):", file=err)
        print(raised, file=err, flush=True)
        print(json.dumps({"error": raised}), flush=True)
        continue
    print(json.dumps({"tokens": [1, 2, 3, 1]}), flush=True)
"""


class StandInError(venvs.WorkerFault):
    """The stand-in tier's error class (each tier's derives from WorkerFault)."""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return path


def _worker(script: Path, mode: str) -> venvs.JsonLinesWorker:
    log = venvs.worker_log(script.parent / "logs", mode)
    cmd = [sys.executable, str(script), mode]
    return venvs.JsonLinesWorker(cmd, StandInError, f"stand-in ({mode})", log=log)


# --------------------------------------------------------------------------- the workers


def test_a_crash_quotes_the_workers_stderr_kept_in_its_log(script):
    w = _worker(script, "crash")
    with pytest.raises(StandInError) as caught:
        w.request({"op": "generate"})
    text = str(caught.value)
    assert "the stand-in (crash) worker exited (code 101)" in text
    assert "panicked at speculative.rs:42" in text  # its stderr's tail, not only the exit code
    assert "a native library's banner on stdout" in text  # what it printed that was not JSON
    assert str(w.log) in text
    kept = w.log.read_text()
    assert "starting in mode crash" in kept and "panicked at speculative.rs:42" in kept


def test_a_worker_that_does_not_start_says_why(script):
    with pytest.raises(StandInError, match=r"did not start(.|\n)*ImportError: libfoo.so"):
        _worker(script, "no-start")


def test_an_error_answer_is_quoted_with_the_traceback_from_the_log(script):
    with _worker(script, "raise") as w:
        with pytest.raises(StandInError) as caught:
            w.request({"op": "generate"})
        assert w.proc.poll() is None  # it answered and goes on
    text = str(caught.value)
    assert "stand-in (raise) answered an error: TypeError: CompletionRequest()" in text
    assert "Traceback (most recent call last)" in text
    assert w.proc.poll() is not None  # closed on leaving the block


def test_the_error_class_must_be_a_worker_fault(script):
    with pytest.raises(ArgumentTypeError, match="^error: "):
        cmd = [sys.executable, str(script), "x"]
        venvs.JsonLinesWorker(cmd, RuntimeError, "x", log=script.parent / "x.log")  # type: ignore[arg-type]


def test_every_tier_error_is_a_worker_fault():
    from specproof.properties.servers import mistralrs_env, openvino_env, vllm_cpu

    for cls in (mistralrs_env.MistralRSError, openvino_env.OpenVINOError, vllm_cpu.VLLMError):
        assert issubclass(cls, venvs.WorkerFault), cls


def test_worker_logs_keep_the_newest(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    for i in range(venvs.KEEP_LOGS + 5):
        old = folder / f"old-{i}.log"
        old.write_text("x")
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    new = venvs.worker_log(folder, "draft")
    new.write_text("y")
    kept = sorted(p.name for p in folder.glob("*.log"))
    assert len(kept) == venvs.KEEP_LOGS and new.name in kept
    assert "old-0.log" not in kept and f"old-{venvs.KEEP_LOGS + 4}.log" in kept  # the oldest went first
