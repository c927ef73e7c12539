"""The token test at a real vocabulary: V = 151,936 (a Qwen tokenizer's), on the narrow engine of
properties/engine/narrow.py (a width-32 model whose every forward costs a d x V product and a
softmax over V). CI-sized: per-token TV 0.2 and M = 16 (the default plan's 0.01 runs in `specproof bench
--section tokens`, with its time and memory). The exact engine passes with two cases pooled; the
same engine verifying at its temperature applied twice (T = 0.7 read as 0.49) is lossy; laws are
scored block by block, so a sample's laws are never copied whole."""

from __future__ import annotations

import numpy as np

from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.narrow import NarrowSpeculative, narrow_spec
from specproof.properties.verdicts import Verdict

V = 151_936


def test_an_exact_engine_passes_at_a_real_vocabulary_with_its_cases_pooled():
    spec = narrow_spec(V, 16)
    res = audit_engine(spec, EngineAuditConfig(tv=0.2, report_samples=0))
    assert res.verdict == Verdict.PASS, res.summary()
    assert len(res.cases) == 2 and res.token_test is not None and "pooled" in res.token_test
    # the plan is one pooled family's tokens shared by the two cases, not two cases' plans
    assert sum(r.observed_tokens for r in res.cases) < 1.1 * res.token_test["pooled"]["tokens"] + 64
    assert "every case together (pooled)" in res.summary()


class TemperatureTwice(NarrowSpeculative):
    """The verify forward's logits divided by the temperature twice."""

    def verify_laws(self, context: list[int], drafts: int) -> np.ndarray:
        z = self.target.logits(context, drafts + 1) / self.temperature**2
        z = np.exp(z - z.max(axis=-1, keepdims=True))
        return z / z.sum(axis=-1, keepdims=True)


def test_temperature_applied_twice_is_lossy_at_a_real_vocabulary():
    from dataclasses import replace

    spec = narrow_spec(V, 16, temperatures=(0.7,))
    bug = replace(
        spec,
        name="narrow.temperature_twice",
        build=lambda s: TemperatureTwice(*_pair(spec), temperature=s.temperature),
    )
    res = audit_engine(bug, EngineAuditConfig(tv=0.2, report_samples=0))
    assert res.verdict == Verdict.LOSSY, res.summary()


def _pair(spec):
    exact = spec.build(spec.samplings[0])
    return exact.target, exact.draft
