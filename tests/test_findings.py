"""Findings on third-party verifiers reproduced in the reference (properties/oracle/findings.py).

EAGLE-1's posterior divides by the original q(x) instead of q renormalized without the siblings
already tried: as a reference rule, the exact oracle finds it lossy under drafting without
replacement (TV = 3/8 exactly on a 3-token, two-sibling instance), while RRS is exact on the same
instance. Medusa-1's posterior (typical acceptance, then the argmax as the next token) is lossy
even with one draft and q = p (TV = 21/26). That the packages' own functions behave as the
reproductions: tests/test_thirdparty.py.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

from specproof.properties.oracle.exact import check
from specproof.properties.oracle.findings import (
    EAGLE_RATIO,
    EAGLE_WITNESS,
    MEDUSA_WITNESS,
    eagle_ratio_witness,
    medusa_typical_witness,
)
from specproof.properties.verdicts import Verdict


def test_eagle_ratio_reproduction_is_lossy_where_rrs_is_exact():
    res = eagle_ratio_witness()
    assert res.tv == Fraction(3, 8), res.explain()
    assert check("rrs", "wor_siblings", EAGLE_WITNESS).tv == 0
    # with one child per node the two rules coincide (no sibling was tried before): exact
    chain = dataclasses.replace(EAGLE_WITNESS, shape=(-1, 0, 1))
    assert check(EAGLE_RATIO, "wor_siblings", chain).tv == 0


def test_medusa_typical_reproduction_is_lossy_even_with_one_draft_and_q_equal_p():
    res = medusa_typical_witness()
    assert res.tv == Fraction(21, 26), res.explain()
    assert check("typical", "onehot_siblings", MEDUSA_WITNESS).tv > 0  # sampling the final token: lossy too


def test_llama_speculative_reproductions_are_lossy_where_sampled_drafts_are_exact():
    """llama.cpp's llama-speculative (0c1e57098): argmax drafts verified as if drawn from q.

    -np 1: ``token`` under the argmax chain told q is lossy (TV 50/91 on two drafts, 3 tokens),
    exact (TV 0) when the same chain is sampled from q. -np > 1, one level of branches: ``mss``
    on q's top candidates in random order is lossy (TV 3/8), exact on i.i.d. siblings. Branches
    sharing a rejected token subtract q once each: lossy even for sampled drafts (TV 3/80)."""
    from specproof.properties.oracle.findings import (
        LLAMA_BRANCHES_WITNESS,
        LLAMA_SHARED_WITNESS,
        LLAMA_SPECULATIVE_WITNESS,
        llama_shared_residual_witness,
        llama_speculative_branches_witness,
        llama_speculative_witness,
    )

    res = llama_speculative_witness()
    assert res.tv == Fraction(50, 91), res.explain()
    assert check("token", "iid_chain", LLAMA_SPECULATIVE_WITNESS).tv == 0
    branches = llama_speculative_branches_witness()
    assert branches.tv == Fraction(3, 8), branches.explain()
    assert check("mss", "iid_siblings", LLAMA_BRANCHES_WITNESS).tv == 0
    shared = llama_shared_residual_witness()
    assert shared.tv == Fraction(3, 80), shared.explain()
    assert check("mss", "iid_siblings", LLAMA_SHARED_WITNESS).tv == 0


# --------------------------------------------------------------------------- generation options
# One step of the reference loop (two drafts on 4 tokens, drafts from the draft model's processed
# law, ``token`` verification) enumerated exactly with the node laws of each defect; the numbers
# are float64 sums, pinned to 1e-3.


def test_hf_option_defects_change_the_law_of_one_step_by_the_quoted_tv():
    """SynthID's history (the option dropped at the drafted positions, kept at the bonus token)
    under a logit bias: TV 0.524; guidance's unconditional branch holding the step's drafts (the
    penalty counting them at every node) under a frequency penalty: TV 0.108; the correct node
    law: 0 up to rounding (proofs_notes/thirdparty.md, "HF transformers' generation options")."""
    from specproof.properties.oracle.findings import NODE_LAW_DEFECTS, NODE_LAW_SAMPLINGS, node_law_tv

    assert set(NODE_LAW_SAMPLINGS) < set(NODE_LAW_DEFECTS)
    assert node_law_tv("none") < 1e-15
    assert node_law_tv("none", NODE_LAW_SAMPLINGS["dropped_at_drafted_positions"]) < 1e-15
    assert abs(node_law_tv("dropped_at_drafted_positions") - 0.524) < 1e-3
    assert abs(node_law_tv("drafts_counted_ahead") - 0.108) < 1e-3
    # the stateful defect is the correct law within one step (its state starts fresh)
    assert node_law_tv("state_not_rolled_back") < 1e-15


def test_llama_cpp_python_min_tokens_reproduction_is_lossy():
    """llama-cpp-python 0.3.36's ``min_tokens`` under prompt lookup: every node reads the whole
    evaluated chain (its context and all the step's drafts) as the output, so EOS is allowed
    from the first node on with two drafts and ``min_new_tokens=2``: TV 0.384, where the correct
    node law is exact; the penalty-only defect of guidance leaves this request's law alone."""
    from specproof.properties.oracle.findings import NODE_LAW_SAMPLINGS, node_law_tv

    s = NODE_LAW_SAMPLINGS["length_counts_drafts_ahead"]
    assert s.eos is not None and s.min_new_tokens == 2
    assert node_law_tv("none", s) < 1e-15
    assert abs(node_law_tv("length_counts_drafts_ahead") - 0.384) < 1e-3
    assert node_law_tv("drafts_counted_ahead", s) < 1e-15
    # min_new_tokens beyond the chain (3 > two drafts): EOS is banned at every node either way
    longer = dataclasses.replace(s, min_new_tokens=3)
    assert node_law_tv("length_counts_drafts_ahead", longer) < 1e-15


@pytest.mark.parametrize(
    ("defect", "verdict"), [("none", Verdict.PASS), ("state_not_rolled_back", Verdict.LOSSY)]
)
def test_a_processor_state_not_rolled_back_is_lossy_in_the_reference_loop(defect, verdict):
    """The part of the HF findings that spans steps: a processor whose state advances once per
    call and is never rolled back counts the rejected drafts of earlier steps (guidance's
    unconditional cache on the Gemma 4 path, where the assistant does not share the target's
    processors). The reference loop with that stateful node law, under a frequency penalty of 4,
    is lossy by the engine audit (1200 samples, seed 0, alpha 1e-3; it rejects at the third
    look); the same loop with the correct node law passes."""

    from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
    from specproof.properties.engine.contract import EngineSpec
    from specproof.properties.engine.loops import CHAIN3, ReferenceEngine, engine_target
    from specproof.properties.oracle.findings import hf_option_node_law
    from specproof.reference.proposers.draft_model import draft_model
    from specproof.reference.sampling import Sampling

    class Loop(ReferenceEngine):
        def __init__(self, sampling: Sampling) -> None:
            target = engine_target()
            super().__init__(target, draft_model(target), "iid_chain", "token", CHAIN3, sampling)

        def node_law(self, prompt):
            return hf_option_node_law(defect, self.sampling, len(prompt))

    s = Sampling(1.0, frequency_penalty=4.0)
    spec = EngineSpec(f"reference[{defect}]", "user", defect, Loop, 8, ((0, 6),), (s,))
    res = audit_engine(spec, EngineAuditConfig(alpha=1e-3, samples=1200, seed=0))
    assert res.verdict == verdict, res.summary()


def test_vllm_cpu_expand_reproduction_is_lossy_at_either_end_of_the_garbage():
    """vLLM's CPU build (vllm-cpu 0.32.0): ``_expand_kernel_impl`` writes the per-request
    temperature for the drafted positions into a copy it then drops, so the verifier's law at
    every position with a draft to verify is tempered by whatever the buffer held; the bonus
    token keeps the request's law. Either end of that range breaks one step of token-level
    verification on the witness instance: uniform there, TV 0.329 at T = 1 and 0.429 at T = 0.7;
    the argmax there, TV 0.500 and 0.481 (proofs_notes/thirdparty.md, "vLLM's CPU build")."""
    from specproof.properties.oracle.findings import VLLM_CPU_DEFECTS, node_law_tv
    from specproof.reference.sampling import Sampling

    expected = {
        "uniform_at_drafted_positions": (0.3291, 0.4287),
        "argmax_at_drafted_positions": (0.5000, 0.4813),
    }
    assert set(expected) == set(VLLM_CPU_DEFECTS)
    for defect, tvs in expected.items():
        for t, tv in zip((1.0, 0.7), tvs):
            assert abs(node_law_tv(defect, Sampling(t)) - tv) < 1e-4, (defect, t)
            assert node_law_tv("none", Sampling(t)) < 1e-15


def test_openvino_validation_is_lossy_even_when_the_target_drafts_for_itself():
    """OpenVINO GenAI 2026.4.1's sampled validation: ratio q(x) / p(y) against the target's own
    sample y, on a grid of 101 values, the rejected token replaced from the next row. Exactly
    lossy on one draft of 3 tokens, also with q = p; the token rule is exact there."""
    from specproof.properties.oracle.findings import (
        OPENVINO_WITNESS,
        openvino_self_rejection,
        openvino_validate_witness,
    )

    res = openvino_validate_witness()
    assert res.verdict == Verdict.LOSSY and res.tv == Fraction(679395, 3697408), res.explain()
    same = openvino_validate_witness(Fraction(1))  # q == p
    assert same.verdict == Verdict.LOSSY and same.tv == Fraction(26877, 924352), same.explain()
    assert check("token", "iid_chain", OPENVINO_WITNESS).tv == 0
    p = OPENVINO_WITNESS.target.law(OPENVINO_WITNESS.prefix)
    assert p == (Fraction(1, 8), Fraction(3, 8), Fraction(1, 2))
    # an exact rule never rejects a draft drawn from the target itself; this one rejects 12.4 %
    assert openvino_self_rejection(p) == Fraction(801, 6464)
