"""Mismatched deployments of draft weights: refused before decoding, or caught by acceptance.

* Structural (exact): draft weights built for another vocabulary or hidden size, or of another
  dtype, and a draft model over another vocabulary, raise DeploymentMismatchError naming both
  sides, before any decoding (the same weights bound anyway crash deep inside a matrix product);
  ``specproof e2e --mismatch vocab|width`` exits 4 with that message.
* Silent, exact on the 4-token target: draft weights trained for another target of the same
  shape stay lossless (TV < 1e-12) and their expected accepted drafts per step fall below 70% of
  the rate with their own target: flagged, with both numbers. A mild revision (Medusa-2's heads
  with the original backbone) is not flagged.
* Silent, sampled on the 16-token target (seed 0, alpha 1e-3, one-sided Welch test on run
  means): the same collapse is flagged; the same weights measured twice (another seed) are not.
* A wrong feature-layer convention changes the draft laws (caught exactly by comparing them with
  the weights read as trained) but, on these 2-layer targets, not acceptance: reported, not
  flagged.
"""

from __future__ import annotations

import weakref

import pytest
import torch

from specproof.properties.cli import main
from specproof.properties.e2e import check as e2e
from specproof.properties.e2e import mismatch as mm
from specproof.properties.oracle.exact import multi_step_check
from specproof.reference.decode import e2e_models
from specproof.reference.errors import SpecproofInputError
from specproof.reference.proposers import PROPOSERS
from specproof.reference.proposers.distill import one_thread
from specproof.reference.proposers.draft_model import draft_model
from specproof.reference.proposers.eagle1 import Eagle1Net
from specproof.reference.proposers.medusa import MedusaHeads
from specproof.reference.proposers.ngram import NgramLM
from specproof.reference.transformer import Config, TinyTransformer, TransformerLM

SMALL, BIG = e2e_models()
PREFIX = (2, 0, 3, 2)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: torch's intra-op threads only slow these down on a shared machine."""
    with one_thread():
        yield


def _other(**change) -> TinyTransformer:
    cfg = SMALL.config
    return TinyTransformer(Config(**{**cfg.__dict__, **change}), seed=5)


# --- structural ----------------------------------------------------------------------------


def test_a_consistent_deployment_passes():
    assert mm.check_deployment(SMALL, Eagle1Net(SMALL)) == []
    assert mm.check_deployment(SMALL, draft_model(SMALL)) == []
    assert mm.check_deployment(SMALL, NgramLM(SMALL.vocab)) == []


@pytest.mark.parametrize(
    ("draft", "message"),
    [
        (
            lambda: Eagle1Net(_other(vocab=8)),
            "vocabulary mismatch: the Eagle1Net weights were built for a 8-token",
        ),
        (
            lambda: MedusaHeads(_other(width=32, mlp=64)),
            "hidden-size mismatch: the MedusaHeads weights read 32-wide",
        ),
        (lambda: Eagle1Net(SMALL).to(torch.float32), "dtype mismatch: the Eagle1Net weights are float32"),
        (
            lambda: draft_model(_other(vocab=6)),
            "vocabulary mismatch: the draft model's vocabulary has 6 tokens",
        ),
        (lambda: NgramLM(5), "the draft model's vocabulary has 5 tokens, the target's 4"),
    ],
)
def test_structural_mismatches_are_refused_with_both_sides(draft, message):
    with pytest.raises(mm.DeploymentMismatchError, match="^draft: ") as e:
        mm.check_deployment(SMALL, draft())
    assert message in str(e.value)
    assert isinstance(e.value, ValueError)


def test_without_the_check_a_wrong_width_crashes_deep_inside():
    net = MedusaHeads(_other(width=32, mlp=64))
    with pytest.raises(RuntimeError):  # what the check spares the user: a matrix-product error
        net.drafter(SMALL)(PREFIX).law(PREFIX)


def test_another_layer_count_is_a_note_not_an_error():
    notes = mm.check_deployment(SMALL, Eagle1Net(_other(layers=3)))
    assert len(notes) == 1 and "3-layer target" in notes[0]


@pytest.mark.parametrize(
    ("kind", "message"), [("vocab", "vocabulary mismatch"), ("width", "hidden-size mismatch")]
)
def test_e2e_refuses_a_structural_mismatch_before_decoding(kind, message, capsys):
    with pytest.raises(mm.DeploymentMismatchError, match=message):
        e2e.run(PROPOSERS["eagle2"], "rrs", steps=1, mismatch_kind=kind)
    assert main(["e2e", "--proposer", "medusa", "--runs", "0", "--mismatch", kind]) == 4
    assert message in capsys.readouterr().err


def test_e2e_refuses_a_feature_mismatch_for_a_proposer_without_features(capsys):
    with pytest.raises(SpecproofInputError, match="no layer mismatch"):
        mm.deployment(PROPOSERS["ngram"], SMALL, BIG, "layer")
    with pytest.raises(SpecproofInputError, match="not one of"):
        mm.deployment(PROPOSERS["eagle2"], SMALL, BIG, "dtype")
    assert main(["e2e", "--proposer", "draft", "--runs", "0", "--mismatch", "width"]) == 4
    assert "no width mismatch" in capsys.readouterr().err


# --- silent mismatches: exact on the 4-token target ---------------------------------------


_LMS: weakref.WeakKeyDictionary[TinyTransformer, TransformerLM] = weakref.WeakKeyDictionary()


def _exact_accepted(proposer, target, drafter) -> tuple[float, float]:
    p = PROPOSERS[proposer]
    lm = _LMS.setdefault(target, TransformerLM(target))  # shared: laws are memoized per context
    tv, mean = multi_step_check(p.default_rule, p.process, lm, drafter, p.exact_shape, PREFIX, 2)
    return float(tv), float(mean) - 1


@pytest.mark.parametrize("proposer", ["eagle2", "eagle3", "mtp", "medusa2"])
def test_weights_trained_for_another_target_stay_lossless_and_collapse_acceptance(proposer):
    p = PROPOSERS[proposer]
    _, own = _exact_accepted(proposer, p.verifying_target(SMALL), p.make_drafter(SMALL))
    dep = mm.deployment(p, SMALL, BIG, "revision")
    tv, deployed = _exact_accepted(proposer, dep.small, dep.small_drafter)
    assert tv < 1e-12  # the rule stays exact
    f = mm.acceptance_finding(mm.Acceptance("own", own), mm.Acceptance("deployed", deployed))
    assert f.collapsed and f.pvalue is None, f.message()
    msg = f.message()
    assert f"{deployed:.3f}" in msg and f"{own:.3f}" in msg and "ACCEPTANCE COLLAPSED" in msg


def test_a_mild_revision_is_not_flagged():
    """Medusa-2's heads used with the original backbone instead of the fine-tuned one."""
    p = PROPOSERS["medusa2"]
    _, own = _exact_accepted("medusa2", p.verifying_target(SMALL), p.make_drafter(SMALL))
    heads = mm.draft_of(p.make_drafter(SMALL), PREFIX)
    assert isinstance(heads, MedusaHeads)
    tv, deployed = _exact_accepted("medusa2", SMALL, heads.drafter(SMALL))
    assert tv < 1e-12
    f = mm.acceptance_finding(mm.Acceptance("own", own), mm.Acceptance("original backbone", deployed))
    assert not f.collapsed and f.message().startswith("acceptance as expected")


def test_a_wrong_layer_convention_changes_the_draft_laws_not_acceptance_here():
    p = PROPOSERS["eagle2"]
    dep = mm.deployment(p, SMALL, BIG, "layer")
    contexts = [PREFIX[:n] for n in range(2, 5)] + [(1, 3, 3, 0, 2)]
    laws = mm.compare_draft_laws(p.make_drafter(SMALL), dep.small_drafter, contexts)
    assert not laws.agree and laws.max_diff > 1e-3 and "DRAFT LAWS DIFFER" in laws.message()
    same = mm.compare_draft_laws(p.make_drafter(SMALL), p.make_drafter(SMALL), contexts)
    assert same.agree and same.max_diff == 0
    tv, deployed = _exact_accepted("eagle2", dep.small, dep.small_drafter)
    _, own = _exact_accepted("eagle2", SMALL, p.make_drafter(SMALL))
    assert tv < 1e-12
    assert not mm.acceptance_finding(mm.Acceptance("own", own), mm.Acceptance("layer", deployed)).collapsed


# --- the finding itself --------------------------------------------------------------------


def test_acceptance_finding_on_exact_values_and_bad_input():
    own = mm.Acceptance("own", 1.0)
    assert mm.acceptance_finding(own, mm.Acceptance("d", 0.69)).collapsed
    assert not mm.acceptance_finding(own, mm.Acceptance("d", 0.71)).collapsed
    assert mm.acceptance_finding(own, mm.Acceptance("d", 0.49), ratio=0.5).collapsed
    with pytest.raises(SpecproofInputError, match="ratio"):
        mm.acceptance_finding(own, own, ratio=0)
    sampled = mm.Acceptance.from_runs("s", [[1, 0], [0, 1]])
    with pytest.raises(SpecproofInputError, match="deployed"):
        mm.acceptance_finding(own, sampled)
    with pytest.raises(SpecproofInputError, match="runs"):
        mm.Acceptance.from_runs("s", [[1, 2, 3]])
    assert sampled.mean == 0.5 and sampled.steps == 4 and sampled.run_means == (0.5, 0.5)


def test_sampled_collapse_is_flagged_and_a_remeasurement_is_not():
    """Seed 0 (and 1 for the re-measurement), 8 prompts of the target's own text, 12 steps each,
    eagle3 on the 16-token target; alpha 1e-3."""
    p = PROPOSERS["eagle3"]
    prompts = mm.prompts_from(BIG, 8, 4, seed=0)

    def measure(label, target, drafter, seed):
        return mm.measure_acceptance(label, target, drafter, p.process, "rrs", p.shape, prompts, 12, seed)

    own = measure("own", BIG, p.make_drafter(BIG), 0)
    dep = mm.deployment(p, SMALL, BIG, "revision")
    deployed = measure("revision", dep.big, dep.big_drafter, 0)
    f = mm.acceptance_finding(own, deployed)
    assert f.collapsed and f.pvalue is not None and f.pvalue < 1e-3, f.message()
    again = measure("own, seed 1", BIG, p.make_drafter(BIG), 1)
    g = mm.acceptance_finding(own, again)
    assert not g.collapsed and g.pvalue is not None and g.pvalue > 0.01, g.message()


def test_e2e_reports_a_revision_mismatch_with_both_numbers(monkeypatch, capsys):
    monkeypatch.setattr(e2e, "MISMATCH_RUNS", 4)
    monkeypatch.setattr(e2e, "MISMATCH_STEPS", 6)
    rc = main(["e2e", "--proposer", "eagle3", "--runs", "0", "--steps", "2", "--mismatch", "revision"])
    out = capsys.readouterr().out
    assert rc == 0, out  # still lossless: the finding is about acceptance
    assert "LOSSLESS" in out.splitlines()[0]
    assert "deployment (revision mismatch)" in out and "ACCEPTANCE COLLAPSED" in out
    assert "with its own target" in out
