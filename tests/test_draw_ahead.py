"""The sample stage asks for its next chunks before it scores the last (properties/engine/audit.py,
DrawAhead): the server stays busy while the audit reads laws and tests, and nothing else changes.
Samples are functions of their seeds, so the verdict, the witness and every statistic are those
of the stage that waits for each chunk; what was asked for and not used is waited for and counted
as the server's answers, so the metrics check still holds to the last token."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from specproof.properties.endpoint.client import Client
from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.standin import InProcess, StandIn
from specproof.properties.engine import drawing as engine_drawing
from specproof.properties.engine.audit import audit_engine
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.contract import T1, EngineSpec, EngineUnavailable, Generation
from specproof.properties.verdicts import Verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import same_outputs  # noqa: E402


def _audit(bug: str | None, config: EngineAuditConfig, ahead: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(engine_drawing, "AHEAD", ahead)
    with (
        StandIn(bug, loop="laws", listen=False) as si,
        StandIn(speculative=False, loop="laws", listen=False) as tw,
    ):
        ways = {si.url: InProcess(si), tw.url: InProcess(tw)}
        options = EndpointOptions((si.url,), "llamacpp", twin=tw.url, vocab=8, concurrency=4)
        ep = Endpoint(options, transports=ways)
        try:
            return audit_engine(endpoint_spec(ep, prompts=[(0, 6), (1,)], samplings=[T1], tokens=4), config)
        finally:
            ep.close()


def _text(result: Any, drop: tuple[str, ...] = ()) -> str:
    data = same_outputs.normalize(result.to_json())
    data.get("description", {}).pop("requests", None)  # requests sent differ: chunks asked ahead
    for key in drop:
        data.pop(key, None)
    return re.sub(r"standin-[0-9a-f]+", "standin", json.dumps(data, sort_keys=True, default=str))


def test_a_passing_audit_is_the_same_with_chunks_asked_ahead(monkeypatch):
    config = EngineAuditConfig(alpha=1e-3, samples=400, seed=3, report_samples=8)
    before = _audit(None, config, 0, monkeypatch)
    after = _audit(None, config, 2, monkeypatch)
    assert before.verdict == after.verdict == Verdict.PASS, after.summary()
    assert after.metrics.status == "agree", after.summary()
    assert _text(before) == _text(after)


def test_a_lossy_audit_stopped_early_counts_what_it_asked_for_ahead(monkeypatch):
    """greedy_verify is rejected at a look; the chunks asked beyond it are waited for and their
    counters added to the answers', so the server's totals still equal them (no false
    misreport), while the verdict, witness and statistics are those of the waiting stage."""
    config = EngineAuditConfig(alpha=1e-3, tv=0.2, seed=3, report_samples=0, stop_early=True, test="cells")
    before = _audit("greedy_verify", config, 0, monkeypatch)
    after = _audit("greedy_verify", config, 2, monkeypatch)
    assert before.verdict == after.verdict == Verdict.LOSSY, after.summary()
    assert after.metrics.status == before.metrics.status == "agree", after.summary()
    assert after.metrics.tally.answers > after.samples == before.samples == before.metrics.tally.answers
    # the metrics (and the sign-off item quoting them) count the answers asked for ahead too
    assert _text(before, drop=("metrics", "signoff")) == _text(after, drop=("metrics", "signoff"))


class Recorder:
    """An engine that takes requests without waiting (``submit_many``) and logs the order of its
    submissions and reads; its samples are a function of the seed."""

    capabilities = frozenset({"generate_many", "submit", "batch"})
    vocab = 4
    batch = 5

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []
        self.fail_at: int | None = None
        self.interrupt_at: int | None = None

    def target_law(self, context: list[int]) -> list[float]:
        return [0.25] * 4

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        return [(seed >> (2 * i)) % 4 for i in range(max_new_tokens)]

    def generate_many(
        self, prompt_ids: list[int], m: int, seeds: list[int], report: bool = False
    ) -> list[Generation]:
        return [Generation(tuple(self.generate(prompt_ids, m, s))) for s in seeds]

    def submit_many(self, prompt_ids: list[int], m: int, seeds: list[int]) -> Any:
        number = sum(1 for what, _ in self.log if what == "submit")
        self.log.append(("submit", number))
        engine = self

        class Handle:
            def result(self) -> list[Generation]:
                engine.log.append(("read", number))
                if engine.interrupt_at == number:
                    raise KeyboardInterrupt
                if engine.fail_at == number:
                    raise EngineUnavailable(
                        "the server went away", engine.generate_many(prompt_ids, m, seeds[:2])
                    )
                return engine.generate_many(prompt_ids, m, seeds)

        return Handle()


def _spec(engine: Recorder) -> EngineSpec:
    return EngineSpec("recorder", "test", "logs its calls", lambda s: engine, 4, ((0,),), (T1,), tokens=2)


def test_the_next_chunks_are_asked_for_before_a_chunk_is_read():
    engine = Recorder()
    r = audit_engine(_spec(engine), EngineAuditConfig(alpha=1e-3, samples=40, seed=0, report_samples=0))
    assert r.samples == 40
    reads = [n for what, n in engine.log if what == "read"]
    assert reads == sorted(reads) and len(reads) == 8  # 40 samples in chunks of 5, read in order
    for n in reads:
        seen = engine.log[: engine.log.index(("read", n))]
        submitted = [k for what, k in seen if what == "submit"]
        # the chunk being read and the two after it (where the plan has them) were asked for
        assert max(submitted) == min(n + engine_drawing.AHEAD, 7), (n, engine.log)


def test_a_fault_keeps_what_came_before_it_and_settles_the_rest():
    engine = Recorder()
    engine.fail_at = 3
    r = audit_engine(_spec(engine), EngineAuditConfig(alpha=1e-3, samples=40, seed=0, report_samples=0))
    assert r.verdict == Verdict.UNDERPOWERED and "the server went away" in r.fault, r.summary()
    assert r.samples == 3 * 5 + 2  # three whole chunks, then what the failed one completed
    asked = {n for what, n in engine.log if what == "submit"}
    read = {n for what, n in engine.log if what == "read"}
    assert asked == read  # every chunk asked for ahead was waited for


def test_ctrl_c_waits_for_nothing_asked_ahead():
    engine = Recorder()
    engine.interrupt_at = 2
    r = audit_engine(_spec(engine), EngineAuditConfig(alpha=1e-3, samples=40, seed=0, report_samples=0))
    assert r.verdict == Verdict.INTERRUPTED and r.samples == 10, r.summary()
    read = [n for what, n in engine.log if what == "read"]
    asked = [n for what, n in engine.log if what == "submit"]
    assert read == [0, 1, 2] and asked == [0, 1, 2, 3, 4]  # chunks 3 and 4 asked, never waited for


def test_submitted_batches_share_one_gate_first_come_first_served():
    lock = threading.Lock()
    state = {"now": 0, "most": 0, "order": []}

    async def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            state["order"].append(body["i"])
        await asyncio.sleep(0.002)
        with lock:
            state["now"] -= 1
        return httpx.Response(200, json={"i": body["i"]})

    client = Client(["http://server.invalid"], concurrency=3, transport=httpx.MockTransport(handler))
    try:
        futures = [client.submit_many("/x", [{"i": 10 * b + j} for j in range(10)]) for b in range(3)]
        answers = [f.result(timeout=30) for f in futures]
    finally:
        client.close()
    assert answers == [[{"i": 10 * b + j} for j in range(10)] for b in range(3)]
    assert state["most"] == 3  # never more in flight than the client's concurrency, across batches
    batches = [i // 10 for i in state["order"]]
    assert batches == sorted(batches)  # a batch asked for later waits behind the earlier ones


def test_chunks_drawn_by_workers_are_not_asked_ahead():
    """A drawer that draws in its own way (workers) gets lazy chunks: nothing is drawn before the
    stage reads it, as before."""

    class Counting(engine_drawing.Drawer):
        def __init__(self) -> None:
            self.calls = 0

        def draw(self, runner: Any, seeds: list[int]) -> list[Generation]:
            self.calls += 1
            return runner.draw(seeds)

    engine, drawer = Recorder(), Counting()
    config = EngineAuditConfig(alpha=1e-3, samples=40, seed=0, report_samples=0)
    r = audit_engine(_spec(engine), config, drawer=drawer)
    assert r.samples == 40 and drawer.calls == 8
    assert not any(what == "submit" for what, _ in engine.log)
