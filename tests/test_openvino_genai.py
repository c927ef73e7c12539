"""OpenVINO GenAI 2026.4.1 audited as a user runs it (properties/engine/adapters/openvino_genai.py):
its draft-model speculation is lossy, prompt lookup and the plain pipeline keep the law. Runs
where its environment is installed (`specproof openvino install`; .ci/run's OpenVINO step);
skipped elsewhere, saying why."""

from __future__ import annotations

from tier_helpers import closing_workers, tier_marks

from specproof.properties.engine.audit import audit_engine
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.registry import ENGINES, ensure_registered
from specproof.properties.servers import openvino_env
from specproof.properties.verdicts import Verdict

OK, WHY = openvino_env.installed()
pytestmark = tier_marks(__file__, OK, WHY)


_closed_workers = closing_workers("openvino_genai")


#: alpha 1e-4 (the default), seed 0, 300 samples a case, 32 seeds for the control
CONFIG = EngineAuditConfig(samples=300, seed=0, report_samples=32)


def _audit(name: str):
    ensure_registered()
    return audit_engine(ENGINES[name], CONFIG)


def test_the_plain_pipeline_samples_the_exact_law():
    r = _audit("openvino.plain")
    assert r.verdict == Verdict.PASS, r.summary()
    assert r.speculation.status == "unobservable"


def test_draft_model_speculation_is_lossy_at_the_first_look():
    r = _audit("openvino.draft")
    assert r.verdict == Verdict.LOSSY, r.summary()
    w = r.witness
    # rejected by half the plan at the latest (looks at 38, 75, 150, 300), p far below its level
    assert w is not None and w.n <= 150 and w.pvalue < 1e-10, r.summary()
    assert r.speculation.status == "ran" and r.speculation.accepted > 0
    assert "plug-in TV" in r.short_witness()


def test_prompt_lookup_keeps_the_law_and_equals_the_control_seed_for_seed():
    r = _audit("openvino.lookup")
    assert r.verdict == Verdict.PASS, r.summary()
    c = r.control
    assert c is not None and c.coupled == 64 and c.identical == c.coupled, r.summary()
