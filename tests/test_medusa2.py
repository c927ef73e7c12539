"""Medusa-2: the backbone fine-tuned with the heads, so the verifying model is a new target.

Exact, on the 4-token target (float64 laws: lossless means TV < 1e-12 over two steps):

* every rule declared exact for Medusa's processes is lossless with respect to the fine-tuned
  model that verifies;
* the same decoding audited against the *original* target is flagged, and the finding says the
  baseline moved (not that the rule is wrong); a lossy rule (typical acceptance) is still called
  lossy with respect to the model that verified;
* the fine-tuned model is a different model (exact TV of its 6-token law from the original's
  > 0), kept close by the self-distillation term (TV well below that of an unrelated model).

Also: the joint recipe's batched head logits equal the per-cut draft logits; the cache returns
the same weights and leaves the original target untouched; ``specproof e2e --proposer medusa2
--against original`` exits 1 with the moved-baseline message.
"""

from __future__ import annotations

import copy

import pytest
import torch

from specproof.properties.cli import main
from specproof.properties.e2e import mismatch
from specproof.properties.oracle.exact import reference_law
from specproof.reference.decode import e2e_models
from specproof.reference.laws import tv_distance
from specproof.reference.proposers import PROPOSERS, TREE_SMALL
from specproof.reference.proposers.distill import (
    JointRecipe,
    corpus,
    head_logits,
    one_thread,
    trained_jointly,
)
from specproof.reference.proposers.medusa import MedusaHeads
from specproof.reference.rules import RULES
from specproof.reference.transformer import KVCache, TinyTransformer, TransformerLM

SMALL, BIG = e2e_models()
PREFIX = (2, 0, 3, 2)
P = PROPOSERS["medusa2"]
FINE = P.verifying_target(SMALL)
FINE_LM, SMALL_LM = TransformerLM(FINE), TransformerLM(SMALL)  # shared: their laws are memoized
EXACT_RULES = [
    (i, r.name) for i, proc in enumerate(P.processes) for r in RULES.values() if proc.name in r.exact_for
]


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: torch's intra-op threads only slow these down on a shared machine."""
    with one_thread():
        yield


def _audit(rule: str, process_index: int = 0) -> mismatch.BaselineFinding:
    return mismatch.baseline_audit(
        rule,
        P.processes[process_index],
        FINE_LM,
        SMALL_LM,
        P.make_drafter(SMALL),
        TREE_SMALL,
        PREFIX,
        2,
    )


def test_the_verifying_model_is_the_fine_tuned_backbone():
    assert FINE is not SMALL and FINE.config == SMALL.config
    assert P.verifying_target(SMALL) is FINE  # memoized: the drafter reads this model's features
    assert P.make_drafter(SMALL)(PREFIX).target is FINE  # type: ignore[attr-defined]
    assert P.verifying_target(SMALL, False) is SMALL  # untrained: the original backbone
    assert PROPOSERS["medusa"].verifying_target(SMALL) is SMALL
    moved = [not torch.equal(a, b) for a, b in zip(FINE.parameters(), SMALL.parameters())]
    assert any(moved)


@pytest.mark.parametrize(("process_index", "rule"), EXACT_RULES)
def test_medusa2_is_lossless_with_respect_to_the_fine_tuned_target(process_index, rule):
    f = _audit(rule, process_index)
    assert f.tv_to_verifier < 1e-12, f
    if RULES[rule].preserves == "greedy":  # the baseline is greedy decoding: a point mass each
        assert f.tv_models in (0.0, 1.0)
    else:
        assert f.baseline_moved and f.tv_models > 1e-3


def test_auditing_medusa2_against_the_original_target_says_the_baseline_moved():
    f = _audit("rrs")
    assert f.lossless_for_verifier and not f.lossless_for_reference
    assert f.tv_to_reference > 1e-2, f  # flagged against the original
    msg = f.message("original")
    assert "THE BASELINE MOVED" in msg and "not at fault" in msg and "LOSSY" not in msg
    assert f"TV {f.tv_models:.3g}" in msg  # how far the fine-tuned model moved
    # run against the verifying model, the report says the same without flagging it
    assert msg != f.message("verifier") and "lossless with respect to the model that verifies" in (
        f.message("verifier")
    )


def test_a_lossy_rule_is_still_called_lossy_not_a_moved_baseline():
    f = _audit("typical")
    assert not f.lossless_for_verifier
    assert f.message("original").startswith("LOSSY with respect to the model that verified")
    assert "BASELINE MOVED" not in f.message("original")


def test_the_fine_tuned_target_stays_close_to_the_original():
    """Exact TV of the 6-token law after the e2e prefix: the fine-tuned model moved (TV > 0.01)
    but much less than an unrelated model of the same shape does."""
    original = reference_law(SMALL_LM, PREFIX, 6)
    moved = float(tv_distance(original, reference_law(FINE_LM, PREFIX, 6)))
    other = TinyTransformer(SMALL.config, seed=mismatch.REVISION_SEED)
    unrelated = float(tv_distance(original, reference_law(TransformerLM(other), PREFIX, 6)))
    assert 0.01 < moved < unrelated / 3, (moved, unrelated)


def test_kl_per_position_on_the_larger_target():
    fine = P.verifying_target(BIG)
    d = mismatch.kl_per_position(BIG, fine, sequences=16, length=8, seed=3)
    assert 0 < d.kl_per_position < 0.1 and d.stderr < d.kl_per_position
    assert mismatch.kl_per_position(BIG, BIG, sequences=4, length=4).kl_per_position == 0


def test_batched_head_logits_equal_the_per_cut_draft_logits():
    heads = MedusaHeads(SMALL, heads=3, seed=5)  # random residual weights, not the zero init
    seq = corpus(SMALL, 1, 9, seed=4)[0]
    _, hidden = SMALL.forward(seq, KVCache())
    batched = head_logits(heads, SMALL, hidden[-1], len(seq), 3)
    for d, rows in enumerate(batched):
        for n in range(2, len(seq) - d):
            one = heads.draft_logits(SMALL, [h[: n - 1] for h in hidden], seq[: n + d], n)
            assert torch.allclose(rows[n - 2], one, atol=1e-12, rtol=0), (d, n)


def test_joint_weights_come_back_from_the_cache_and_leave_the_original_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECPROOF_CACHE", str(tmp_path))
    recipe = JointRecipe(sequences=4, length=6, steps=3, batch=2)
    before = copy.deepcopy(SMALL.state_dict())
    a_backbone, a_heads = trained_jointly(MedusaHeads(SMALL, heads=2, seed=5), SMALL, recipe)
    assert len(list(tmp_path.rglob("joint-*.pt"))) == 1
    b_backbone, b_heads = trained_jointly(MedusaHeads(SMALL, heads=2, seed=5), SMALL, recipe)
    for x, y in zip(a_backbone.state_dict().values(), b_backbone.state_dict().values()):
        assert torch.equal(x, y)
    for x, y in zip(a_heads.state_dict().values(), b_heads.state_dict().values()):
        assert torch.equal(x, y)
    assert all(torch.equal(before[k], v) for k, v in SMALL.state_dict().items())  # original untouched
    assert not all(torch.equal(before[k], v) for k, v in a_backbone.state_dict().items())  # moved
    assert not any(p.requires_grad for p in a_backbone.parameters())


def test_e2e_against_the_original_exits_1_with_the_moved_baseline_message(capsys):
    rc = main(["e2e", "--proposer", "medusa2", "--against", "original", "--runs", "0", "--steps", "2"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "LOSSY" in out.splitlines()[0] and "THE BASELINE MOVED" in out
    assert "KL(original || fine-tuned)" in out
