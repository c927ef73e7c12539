"""The tiers' worker processes (properties/servers/venvs.py) and what the engine audit makes of
their failures, on a stand-in worker: a Python script of a few lines run with this interpreter,
which speaks the workers' JSON lines and fails on purpose by mode (it never starts; it exits in
the middle of a request, as mistral.rs's speculative runner panics; it answers an error, as the
mistral.rs worker did with a TypeError), or answers the same tokens whatever the seed (a real
contract violation, the control). Nothing of a tier is installed; every outcome is fixed.

* every worker's stderr is kept in a log file of its own, and a failure quotes its tail (once a
  crash read only "exited (code 1)");
* a worker's failure ends the engine audit ``error``, quoting the worker, and never agrees with a
  declared verdict, where the same engine declared ``contract_violation`` once read as agreeing;
  an engine group with such an engine exits 1;
* each engine's workers are closed when its audit ends, so the next engine of a group never runs
  beside them (an idle draft runner once stayed alive through the plain audit: 385 s in the
  group against 41 s alone).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import EngineSpec, Sampling
from specproof.properties.engine.signoff import YES, signoff
from specproof.properties.servers import venvs
from specproof.properties.verdicts import Verdict
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
V, M = 4, 4


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


# --------------------------------------------------------------------------- the engine audit


class StandInTier:
    """A tier adapter in small: one worker per mode in a pool, closed by :meth:`close`;
    ``alive_at_build`` records, each time an engine is built, its mode and which workers were
    still running."""

    def __init__(self, script: Path) -> None:
        self.script, self.pool = script, venvs.WorkerPool(self._start)
        self.started: list[venvs.JsonLinesWorker] = []
        self.alive_at_build: list[tuple[str, list[str]]] = []

    def _start(self, mode: str) -> venvs.JsonLinesWorker:
        self.started.append(_worker(self.script, mode))
        return self.started[-1]

    def worker(self, mode: str) -> venvs.JsonLinesWorker:
        w: venvs.JsonLinesWorker = self.pool.get(mode)
        return w

    def build(self, mode: str, sampling: Sampling) -> StandInEngine:
        self.alive_at_build.append((mode, [w.what for w in self.started if w.proc.poll() is None]))
        return StandInEngine(self, mode)

    def spec(self, mode: str, expect: str = "contract_violation") -> EngineSpec:
        return EngineSpec(
            f"stand-in.{mode}",
            "stand-in-tier",
            f"a worker of mode {mode}",
            lambda s: self.build(mode, s),
            V,
            ((1, 2),),
            (Sampling(1.0),),
            expect=expect,
            tokens=M,
            close=self.pool.close,
        )


class StandInEngine:
    capabilities: frozenset[str] = frozenset()
    vocab = V

    def __init__(self, tier: StandInTier, mode: str) -> None:
        self.tier, self.mode = tier, mode

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        return list(self.tier.worker(self.mode).request({"op": "generate", "seed": seed})["tokens"])

    def target_law(self, context: list[int]) -> list[float]:
        return [1 / V] * V


CONFIG = EngineAuditConfig(samples=16, seed=0)
#: the command line that audits the stand-in tier's group
GROUP = ["audit", "engine", "--engine-group", "stand-in-tier", "--samples", "16", "--progress", "off"]


def test_the_control_a_seed_ignored_is_the_declared_contract_violation(script):
    tier = StandInTier(script)
    r = audit_engine(tier.spec("same-tokens"), CONFIG)
    assert r.verdict == Verdict.CONTRACT_VIOLATION and (r.violation or {}).get("kind") == "ignores_seed"
    assert r.agrees is True and r.worker_fault is None


@pytest.mark.parametrize(
    ("mode", "quoted"),
    [
        ("raise", "TypeError: CompletionRequest() got an unexpected keyword 'seed'"),
        ("crash", "panicked at speculative.rs:42"),
    ],
)
def test_a_worker_fault_is_stated_and_never_agrees(script, mode, quoted):
    tier = StandInTier(script)
    r = audit_engine(tier.spec(mode, expect="contract_violation"), CONFIG)
    assert r.verdict == Verdict.ERROR and r.exit_code == 4
    assert r.agrees is False  # where it once read contract_violation, agreeing with the declaration
    assert r.worker_fault is not None and quoted in r.worker_fault and "StandInError" in r.worker_fault
    assert quoted in r.summary() and "never the declared one" in r.summary()
    assert r.to_json()["agrees"] is False and quoted in r.to_json()["worker_fault"]
    assert r.short_witness().startswith("[fault] ")
    assert not [item for item in signoff(r) if item.answer == YES]
    # and its workers were closed when the audit ended, fault or not
    assert tier.started and all(w.proc.poll() is not None for w in tier.started)


def test_an_engine_group_with_a_crashed_worker_exits_1(script, monkeypatch, capsys):
    from specproof.properties.cli import main
    from specproof.properties.engine.registry import ENGINES, ensure_registered

    ensure_registered()
    tier = StandInTier(script)
    for spec in (tier.spec("same-tokens"), tier.spec("raise")):
        monkeypatch.setitem(ENGINES, spec.name, spec)
    code = main(GROUP)
    out = capsys.readouterr().out
    assert "DISAGREES: stand-in.raise: error, declared contract_violation" in out, out
    assert "DISAGREES: stand-in.same-tokens" not in out
    assert code == 1


def test_each_engines_workers_are_closed_when_its_audit_ends(script, monkeypatch, capsys):
    """Two engines of one group on one pool, as mistral.rs's draft runner and its plain twin:
    when the second is built, none of the first's workers is running."""
    from specproof.properties.cli import main
    from specproof.properties.engine.registry import ENGINES, ensure_registered

    ensure_registered()
    tier = StandInTier(script)
    for spec in (tier.spec("first"), tier.spec("second")):
        monkeypatch.setitem(ENGINES, spec.name, spec)
    assert main(GROUP) == 0
    assert any(w.what == "stand-in (first)" for w in tier.started)  # the first engine ran its worker
    seconds = [alive for mode, alive in tier.alive_at_build if mode == "second"]
    assert seconds and all("stand-in (first)" not in alive for alive in seconds), tier.alive_at_build
    assert all(w.proc.poll() is not None for w in tier.started)  # and the second's, after its audit


def test_the_workers_loop_answers_raises_and_errors_apart_and_stops_on_quit(capsys):
    """properties/servers/worker_loop.py, the loop the tiers' workers run: the handler's answer;
    an engine error (the library's own exception) as ``raised``; any other as ``error``; both
    tracebacks to stderr; blank lines skipped; nothing read after ``quit``."""
    import io
    import json

    from specproof.properties.servers import worker_loop

    def handle(req):
        if req["op"] == "engine":
            raise RuntimeError("Cast: same type")
        if req["op"] == "bug":
            raise KeyError("seeds")
        return {"echo": req["x"]}

    lines = io.StringIO(
        '{"op": "go", "x": 1}\n\n{"op": "engine"}\n{"op": "bug"}\nnot json\n'
        '{"op": "quit"}\n{"op": "go", "x": 2}\n'
    )
    out = io.StringIO()
    worker_loop.answer_requests({"mode": "toy"}, handle, (RuntimeError,), lines=lines, out=out)
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert answers == [
        {"ready": True, "mode": "toy"},
        {"echo": 1},
        {"raised": "RuntimeError: Cast: same type"},
        {"error": "KeyError: 'seeds'"},
        {"error": answers[4]["error"]},
    ]
    assert answers[4]["error"].startswith("JSONDecodeError")
    err = capsys.readouterr().err
    assert err.count("Traceback") == 3 and "Cast: same type" in err


def test_every_tier_worker_runs_the_shared_loop():
    """Each worker script loads worker_loop.py from beside it (its environment has no specproof)."""
    folder = Path(venvs.__file__).parent
    for name in ("mistralrs_worker", "openvino_worker", "ort_worker"):
        text = (folder / f"{name}.py").read_text()
        assert 'import_module("worker_loop")' in text and "answer_requests(" in text, name
        assert "for line in sys.stdin" not in text, name
