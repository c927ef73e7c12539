"""Draft calibration (EAGLE-2's premise that path confidence tracks acceptance).

Exact, on the 4-token target:

* under RRS with the one-hot drafts of the dynamic tree, a node's exact acceptance probability
  is the *target's* probability of its path, whatever the drafter (proofs_notes/draft_calibration.md);
* so a drafter whose laws are the target's is exactly calibrated (exact ECE 0), and the same
  drafter at draft temperature 0.5 is not (exact ECE > 0.1).

Statistical (seed 0, alpha 1e-6, Bonferroni over the bins):

* the recorded 0/1 acceptances agree with the exact probabilities (a check of the bookkeeping),
  and an off-by-one mutant of the records (one node too deep) is rejected;
* the calibration test does not reject the target-as-drafter and rejects the drafter at the wrong
  temperature (the mutant it must catch); EAGLE-2's distilled drafter is compared with its own
  tempered copy.

Also: ECE and bins on hand-made records, bad records, the Markdown and SVG reports, the CLI.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

from specproof.properties.cli import main
from specproof.properties.e2e import check as e2e
from specproof.properties.e2e import draft_calibration as dc
from specproof.properties.report_model import to_markdown
from specproof.reference.decode import e2e_models
from specproof.reference.errors import SpecproofInputError
from specproof.reference.processes import Proposal
from specproof.reference.proposers import PROPOSERS
from specproof.reference.proposers.distill import one_thread
from specproof.reference.transformer import TransformerLM

SMALL, _ = e2e_models()
EAGLE2 = PROPOSERS["eagle2"]
PROMPTS = dc.domains(SMALL, 6, 4, seed=0)  # 2 domains x 6 prompts
STEPS = 8


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: torch's intra-op threads only slow these down on a shared machine."""
    with one_thread():
        yield


def _records(drafter, temperature: float | None = None) -> list[dc.StepDrafts]:
    d = drafter if temperature is None else dc.tempered(drafter, temperature)
    return dc.collect(SMALL, d, EAGLE2.process, "rrs", EAGLE2.shape, PROMPTS, STEPS, seed=0)


@pytest.fixture(scope="module")
def self_records() -> list[dc.StepDrafts]:
    return _records(TransformerLM(SMALL))


@pytest.fixture(scope="module")
def hot_records() -> list[dc.StepDrafts]:
    return _records(TransformerLM(SMALL), 0.5)


@pytest.fixture(scope="module")
def eagle_records() -> list[dc.StepDrafts]:
    return _records(EAGLE2.make_drafter(SMALL))


def test_rrs_acceptance_of_a_node_is_the_targets_path_probability(eagle_records):
    """Exact, for the distilled EAGLE-2 drafter (whose confidences are not the target's): the
    enumerated P(node accepted) is the product of the target's probabilities along its path."""
    target = TransformerLM(SMALL)
    for r in eagle_records:
        contexts, want = [r.prefix], [1.0]
        for i in range(1, len(r.parents)):
            parent = r.parents[i]
            want.append(want[parent] * target.law(contexts[parent])[r.tokens[i]])
            contexts.append(contexts[parent] + (r.tokens[i],))
        p = r.p_accept()
        assert p is not None and max(abs(a - b) for a, b in zip(p, want)) < 1e-9, (p, want)
        assert any(abs(a - b) > 1e-3 for a, b in zip(r.confidence, want))  # q is not p here
    assert len(eagle_records) == 2 * 6 * STEPS


def test_the_target_as_its_own_drafter_is_exactly_calibrated(self_records, hot_records):
    exact = dc.calibrate(self_records, "target as drafter")
    assert exact.ece_exact is not None and exact.ece_exact < 1e-9
    for r in self_records:  # node by node, not only on average
        p = r.p_accept()
        assert p is not None and max(abs(a - b) for a, b in zip(p, r.confidence)) < 1e-9
    hot = dc.calibrate(hot_records, "at temperature 0.5")
    assert hot.ece_exact is not None and hot.ece_exact > 0.1
    assert hot.mean_confidence > hot.acceptance + 0.1  # over-confident


def test_recorded_acceptances_agree_with_the_exact_probabilities(self_records, eagle_records):
    for records in (self_records, eagle_records):
        a = dc.agreement(records, alpha=1e-6)
        assert a.consistent, a.describe()


def test_an_off_by_one_record_is_rejected(eagle_records):
    """Mutant bookkeeping: the last accepted draft is dropped (the parent of the real deepest
    accepted node is recorded, as when the emitted count minus 2 is taken for the accepted
    drafts). Seed 0, alpha 1e-6."""

    def shallower(r: dc.StepDrafts) -> dc.StepDrafts:
        return replace(r, deepest=max(0, r.parents[r.deepest]))

    a = dc.agreement([shallower(r) for r in eagle_records], alpha=1e-6)
    assert not a.consistent and "INCONSISTENT" in a.describe()
    assert a.z[-1] < -5  # the total: fewer acceptances than the exact law allows


def test_the_calibration_test_rejects_the_wrong_temperature(self_records, hot_records):
    ok = dc.agreement(self_records, alpha=1e-6, against="confidence")
    assert ok.consistent, ok.describe()
    bad = dc.agreement(hot_records, alpha=1e-6, against="confidence")
    assert not bad.consistent and "miscalibrated" in bad.describe()


def test_eagle2_is_better_calibrated_than_its_tempered_copy(eagle_records):
    own = dc.calibrate(eagle_records, "eagle2")
    hot = dc.calibrate(_records(EAGLE2.make_drafter(SMALL), 0.5), "eagle2 at 0.5")
    assert own.ece_exact is not None and hot.ece_exact is not None
    assert own.ece_exact < 0.05 < 0.1 < hot.ece_exact, (own.describe(), hot.describe())
    assert own.ece < hot.ece
    assert set(dc.by_domain(eagle_records, "eagle2")) == {"own text", "uniform tokens"}


# --- hand-made records -------------------------------------------------------------------


def _rec(conf, deepest, law=None, parents=(-1, 0, 0, 1), domain="d"):
    return dc.StepDrafts(domain, parents, (1.0, *conf), deepest, law)


def test_bins_and_ece_on_hand_made_records():
    # node 1 (0.95) accepted, node 2 (0.05) not, node 3 (0.45, child of 1) accepted
    a = _rec((0.95, 0.05, 0.45), deepest=3)
    # node 1 (0.95) not accepted: nothing accepted
    b = _rec((0.95, 0.05, 0.45), deepest=0)
    cal = dc.calibrate([a, b], "hand")
    assert cal.nodes == 6 and cal.steps == 2
    by_label = {x.label: x for x in cal.bins if x.nodes}
    assert set(by_label) == {"[0.0, 0.1)", "[0.4, 0.5)", "[0.9, 1.0]"}
    assert by_label["[0.9, 1.0]"].acceptance == 0.5 and by_label["[0.4, 0.5)"].acceptance == 0.5
    # ECE: 2/6 |0.95 - 0.5| + 2/6 |0.05 - 0| + 2/6 |0.45 - 0.5|
    assert math.isclose(cal.ece, (0.45 + 0.05 + 0.05) / 3, rel_tol=1e-12)
    assert cal.ece_exact is None  # no exact laws in these records
    one = dc.calibrate([_rec((1.0, 0.0, 1.0), deepest=3)], "edges")
    assert one.bins[-1].nodes == 2 and one.bins[0].nodes == 1  # 1.0 in the last bin, 0.0 in the first


def test_exact_acceptance_from_the_law_of_the_deepest_node():
    r = _rec((0.5, 0.5, 0.25), deepest=1, law=(0.25, 0.25, 0.25, 0.25))
    assert r.p_accept() == [1.0, 0.5, 0.25, 0.25]
    assert r.accepted() == [True, True, False, False]


def test_bad_records_are_refused():
    with pytest.raises(SpecproofInputError, match="deepest"):
        _rec((0.5, 0.5, 0.5), deepest=4)
    with pytest.raises(SpecproofInputError, match="confidence"):
        dc.StepDrafts("d", (-1, 0), (1.0, 0.5, 0.5), 0)
    with pytest.raises(SpecproofInputError, match="confidence"):
        _rec((1.5, 0.5, 0.5), deepest=0)
    with pytest.raises(SpecproofInputError, match="records"):
        dc.calibrate([dc.StepDrafts("d", (-1,), (1.0,), 0)], "empty")
    with pytest.raises(SpecproofInputError, match="edges"):
        dc.calibrate([_rec((0.5, 0.5, 0.5), 0)], "x", edges=(0.0, 0.6, 0.5, 1.0))
    with pytest.raises(SpecproofInputError, match="deepest_law"):
        dc.agreement([_rec((0.5, 0.5, 0.5), 0)])
    with pytest.raises(SpecproofInputError, match="temperature"):
        dc.tempered(TransformerLM(SMALL), 0)


def test_deepest_accepted_reads_the_emitted_tokens_down_the_tree():
    prop = Proposal((-1, 0, 0, 1), (2, 1, 3, 0), (0, 1, 2, 3))
    assert dc.deepest_accepted(prop, (3,)) == 0  # no draft accepted, correction token 3
    assert dc.deepest_accepted(prop, (3, 2)) == 2
    assert dc.deepest_accepted(prop, (1, 0, 2)) == 3
    with pytest.raises(RuntimeError, match="do not follow"):
        dc.deepest_accepted(prop, (2, 2))


def test_reports_have_text_bars_and_a_reliability_diagram(tmp_path):
    cal = dc.calibrate([_rec((0.95, 0.05, 0.45), 3), _rec((0.95, 0.05, 0.45), 0)], "hand")
    md = to_markdown(dc.report_blocks([cal, cal], "a note"))
    assert "a note" in md and "acceptance (obs)" in md and "```" in md and "| [0.9, 1.0] |" in md
    svg = dc.reliability_svg(cal)
    root = ET.fromstring(svg.split("</figcaption>", 1)[1].removesuffix("</figure>"))
    rects = [e for e in root.iter() if e.tag.endswith("rect")]
    assert len(rects) == 1 + 3  # the frame, one bar per non-empty bin
    report = e2e.E2EResult(
        proposer="x",
        process="p",
        rule="rrs",
        declared_exact=True,
        exact_check=e2e.ExactCheck(vocab=4, steps=2, depth=2, drafts=2, tv=0.0, mean_emitted_per_step=2.0),
        sampled=e2e.SampledCheck(
            vocab=16,
            drafts_per_step=3,
            steps=1,
            emitted=1,
            mean_emitted_per_target_forward=1.0,
            alpha=0.5,
            closed_form_iid=None,
        ),
        calibration={
            "settings": {
                "process": "p",
                "rule": "rrs",
                "seed": 0,
                "prompts_per_domain": 1,
                "prompt_length": 4,
                "steps_per_prompt": 1,
            },
            "drafters": [],
        },
    )
    e2e.write_report(str(tmp_path / "r.html"), report, [cal, cal])
    page = (tmp_path / "r.html").read_text()
    assert page.count("<svg") == 2 and "Reliability diagrams" in page
    e2e.write_report(str(tmp_path / "r.md"), report, [cal])
    assert "<svg" not in (tmp_path / "r.md").read_text()


def test_e2e_calibration_option(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(e2e, "CALIBRATION_PROMPTS", 2)
    monkeypatch.setattr(e2e, "CALIBRATION_STEPS", 2)
    path = tmp_path / "cal.html"
    rc = main(
        ["e2e", "--proposer", "eagle2", "--runs", "0", "--steps", "2", "--calibration", "--report", str(path)]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "eagle2 at draft temperature 0.5: ECE" in out and "calibration test" in out
    assert path.read_text().count("<svg") == 2
    assert main(["e2e", "--proposer", "eagle2", "--calibration-temperature", "0"]) == 4
