"""Third-party adapters against their packages (run by `tox -e conform`; skipped without them).

Verdicts at fixed sample sizes and seeds (alpha 1e-6), so they do not depend on machine speed:
HF's ``_speculative_sampling`` passes and its documented ensemble relaxation is flagged;
SGLang's Triton chain sampler passes, token-level and with block verification, and its greedy
tree verifier preserves greedy decoding; vLLM's V1 rejection sampler and its model runner V2
verifier (token-level and block verification) pass, and both keep greedy decoding exactly;
Medusa-1's typical acceptance is flagged; Medusa's and EAGLE's tree buffers equal the reference
on every tree they can express; EAGLE-1's posterior emits, on fixed inputs, the exact law of the
reference reproduction of its deviation (properties/oracle/findings.py) and not RRS's law.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from specproof.properties.audit.stages import AuditConfig, audit, default_cases
from specproof.properties.audit.stats import pearson
from specproof.properties.conformance.backends import REGISTRY
from specproof.properties.conformance.buffers import conform
from specproof.properties.oracle.exact import step_emitted_law
from specproof.properties.oracle.findings import EAGLE_RATIO, EAGLE_WITNESS, MEDUSA_TYPICAL
from specproof.reference.processes import Proposal, node_contexts
from specproof.reference.step import make_step


def _audit(
    name: str, kind: str, process: str, *, tv: float = 0.01, samples: int | None = None, cases: int = 4
):
    """A few small cases, planned for ``tv`` (a pass must reach power 0.99 against it), or a
    fixed sample size (for a lossy verdict, which needs no power); no id-range probes (an
    interpreted kernel walks every id of a 262,144-wide row)."""
    backend = dataclasses.replace(REGISTRY[(kind, name)], processes=(process,))
    small = [c for c in default_cases(backend, 0) if c.vocab <= 8][:cases]
    config = AuditConfig(seed=0, tv=tv, samples=samples, budget_seconds=900, cases=small, probes=False)
    return audit(backend, config)


def _need(module: str) -> None:
    """Skip, with the adapter's own reason, unless its package is usable here."""
    from specproof.properties.conformance.backends.thirdparty import ADAPTERS, availability

    ok, why = availability(next(a for a in ADAPTERS if a.module == module))
    if not ok:
        pytest.skip(why)


@pytest.mark.slow
def test_hf_speculative_sampling_passes_and_its_ensemble_is_flagged():
    pytest.importorskip("transformers")
    ok = _audit("hf.speculative_sampling", "chain", "iid_chain", tv=0.12)  # about 3,000 steps a case
    assert ok.verdict == "pass", ok.summary()
    bad = _audit("hf.speculative_sampling[ensemble=0.5]", "chain", "iid_chain", samples=3000)
    assert bad.verdict == "lossy", bad.summary()


def test_medusa_typical_acceptance_is_flagged_and_its_buffers_conform():
    pytest.importorskip("medusa.model.utils")
    from specproof.properties.conformance.backends.thirdparty.medusa import generate_buffers

    res = _audit("medusa.evaluate_posterior", "tree", "onehot_siblings", samples=2000)
    assert res.verdict == "lossy", res.summary()
    b = conform("medusa.generate_medusa_buffers", generate_buffers)
    assert b.verdict == "pass" and b.checked >= 8, b.summary()


def test_eagle_buffers_conform():
    pytest.importorskip("eagle.model.utils")
    from specproof.properties.conformance.backends.thirdparty.eagle import generate_buffers

    b = conform("eagle.generate_tree_buffers", generate_buffers)
    assert b.verdict == "pass" and b.checked == len(b.outcomes) - 1, b.summary()  # all but the root-only tree


def test_eagle_candidates_are_the_tokens_and_draft_probabilities_along_each_path():
    """EAGLE's ``generate_candidates``, fed the draft as its drafting loop lays it out (one row of
    top-k tokens per expanded node), puts at every retrieve path the tokens of that path's nodes
    and their draft probabilities, on every battery tree EAGLE can express, random tokens."""
    pytest.importorskip("eagle.model.utils")
    from specproof.properties.conformance.backends.thirdparty.eagle import _buffers, _candidates
    from specproof.properties.conformance.buffers import Unsupported, battery

    g = torch.Generator().manual_seed(0)
    checked = 0
    for _, parents in battery():
        try:
            buf, ids = _buffers(parents)
        except Unsupported:
            continue
        N, V = len(parents), 50
        back = {e: ours for ours, e in enumerate(ids)}
        order = [back[e] for e in range(N)]
        tok = torch.randint(0, V, (N,), generator=g)
        q = torch.softmax(torch.randn(N, V, generator=g), -1)
        cart, cart_prob, tree_cand, _ = _candidates(parents, tok, q)
        assert tree_cand[0].tolist() == tok[order].tolist()
        for row, prow, path in zip(cart.tolist(), cart_prob.tolist(), buf["retrieve_indices"].tolist()):
            for t, pr, e in zip(row, prow, path):
                if e < 0:
                    assert t == -1 and pr == 1.0
                    continue
                node = back[e]
                assert t == int(tok[node])
                want = 1.0 if node == 0 else float(q[parents[node], tok[node]])
                assert pr == pytest.approx(want, abs=0), (parents, node)
        checked += 1
    assert checked >= 15


def test_eagle_posterior_has_the_law_of_the_reproduction():
    pytest.importorskip("eagle.model.utils")
    from specproof.properties.conformance.backends.thirdparty.eagle import evaluate_posterior

    inst = EAGLE_WITNESS
    q = inst.draft.law(inst.prefix)
    x1, x2 = sorted(range(inst.vocab), key=lambda t: -q[t])[:2]  # two distinct drafts
    parents, tokens = (-1, 0, 0), (inst.prefix[-1], x1, x2)
    contexts = node_contexts(inst.prefix, Proposal(parents, tokens, (0, 1, 2)))
    target = [inst.target.law(c) for c in contexts]
    step = make_step(parents, tokens, [q, None, None], target)
    want = step_emitted_law(EAGLE_RATIO, step)
    rrs = step_emitted_law("rrs", step)
    B = 6000
    as_t = lambda rows: torch.tensor([[float(v) for v in r] for r in rows], dtype=torch.float32)  # noqa: E731
    p_t = as_t(target)[None].expand(B, -1, -1)
    q_t = torch.stack([as_t([q])[0], as_t(target)[1], as_t(target)[2]])[None].expand(B, -1, -1)
    acc, nxt = evaluate_posterior(
        torch.tensor(parents)[None].expand(B, -1),
        torch.tensor(tokens)[None].expand(B, -1),
        q_t,
        p_t,
        torch.Generator().manual_seed(0),
    )
    seen: dict[tuple[int, ...], int] = {}
    for a, y in zip(acc.tolist(), nxt.tolist()):
        e = tuple(tokens[i] for i in a if i > 0) + (y,)
        seen[e] = seen.get(e, 0) + 1
    for law, should_pass in ((want, True), (rrs, False)):
        keys = sorted(set(law) | set(seen))
        probs = np.array([float(law.get(k, 0)) for k in keys])
        counts = np.array([seen.get(k, 0) for k in keys], dtype=float)
        if (counts[probs == 0] > 0).any():
            assert not should_pass
            continue
        _, p = pearson(counts[probs > 0], probs[probs > 0])
        assert (p >= 1e-6) == should_pass, (law, seen, p)


def test_medusa_posterior_returns_exactly_the_reproductions_output():
    """Deterministic on both sides: 40 seeded random trees and laws, output for output."""
    pytest.importorskip("medusa.model.utils")
    from specproof.properties.conformance.backends.thirdparty.medusa import evaluate_posterior
    from specproof.properties.conformance.buffers import battery

    g = torch.Generator().manual_seed(0)
    trees = [p for _, p in battery() if 2 <= len(p) <= 40]
    for k in range(40):
        parents = trees[k % len(trees)]
        N, V = len(parents), 7
        laws = torch.softmax(2 * torch.randn(N, V, generator=g, dtype=torch.float64), -1)
        tokens = torch.randint(0, V, (N,), generator=g)
        acc, nxt = evaluate_posterior(torch.tensor([parents]), tokens[None], None, laws[None].float(), g)
        step = make_step(parents, tokens.tolist(), None, laws.tolist())
        want = MEDUSA_TYPICAL(None, step)  # type: ignore[arg-type]
        got = tuple(int(v) for v in acc[0] if v >= 0)
        assert (got, int(nxt[0])) == (want.accepted, want.next_token), k


def test_sglang_chain_sampler_passes_token_level_and_block_verification():
    """Interpreted on CPU (tens of ms a row): two small cases planned for TV 0.3 (a few hundred
    steps each), alpha 1e-6."""
    _need("sglang")
    for name in (
        "sglang.chain_speculative_sampling",
        "sglang.chain_speculative_sampling[block_verification]",
    ):
        res = _audit(name, "chain", "iid_chain", tv=0.3, cases=2)
        assert res.verdict == "pass", res.summary()


def test_sglang_greedy_tree_verifier_preserves_greedy_decoding():
    _need("sglang")
    from specproof.properties.conformance.backends.thirdparty.sglang import verify_tree_greedy

    res = _audit("sglang.verify_tree_greedy", "tree", "onehot_siblings", tv=0.45, cases=3)
    assert res.verdict == "pass", res.summary()
    # and it does walk the tree: node 1 is not the argmax, node 2 is, node 3 (under 2) is too
    p = torch.softmax(torch.randn(1, 4, 5, generator=torch.Generator().manual_seed(1)), -1)
    am = p[0].argmax(-1).tolist()
    tokens = torch.tensor([[0, (am[0] + 1) % 5, am[0], am[2]]])
    acc, nxt = verify_tree_greedy(torch.tensor([[-1, 0, 0, 2]]), tokens, None, p, torch.Generator())
    assert acc[0].tolist() == [0, 2, 3, -1] and int(nxt[0]) == am[3]


def test_sglang_tree_builder_conforms_and_a_wrong_encoding_is_caught(monkeypatch):
    """SGLang's Triton tree builder, fed each battery tree as an EAGLE-2 selection, returns the
    reference's buffers on all of them; with the selection's slots read at the wrong ``topk``
    (the parent of a slot is ``slot // topk``) the same check names violations."""
    _need("sglang")
    from specproof.properties.conformance.backends.thirdparty import sglang

    assert sglang.encode_selection((-1, 0, 0, 1, 1, 2, 3)) == (
        [-1, 0, 1, 2, 3],  # step 0's beams (every root child), then step 1's: node 3 and a spare slot
        [0, 1, 2, 3, 4, 6],  # nodes 1..6 at their slots
        2,
        3,
        [0, 1, 2, 3, 4, 5, 6],
    )
    res = conform("sglang.build_tree_kernel_efficient", sglang.build_tree)
    assert res.verdict == "pass" and res.checked == len(res.outcomes), res.summary()

    right = sglang.encode_selection

    def wrong_topk(parents):  # type: ignore[no-untyped-def]
        parent_list, selected, topk, steps, order = right(parents)
        return parent_list, selected, topk + 1, steps, order

    monkeypatch.setattr(sglang, "encode_selection", wrong_topk)
    bad = conform("sglang.build_tree_kernel_efficient[wrong topk]", sglang.build_tree)
    kinds = {o.status for o in bad.outcomes}
    assert bad.verdict != "pass" and kinds & {"mask", "positions", "leaf_paths"}, bad.summary()


@pytest.mark.parametrize(
    "name, process, tv",
    [
        ("vllm.v1.rejection_sample", "iid_chain", 0.25),
        ("vllm.v1.rejection_sample", "onehot_chain", 0.25),
        ("vllm.mrv2.rejection_sample", "onehot_chain", 0.45),
        ("vllm.mrv2.rejection_sample[block_verification]", "onehot_chain", 0.45),
    ],
)
def test_vllm_samplers_pass(name: str, process: str, tv: float):
    """Interpreted on CPU (V1 about 16 ms a row, MRV2 70-100 ms): two small cases planned for a
    coarse TV (hundreds of steps), alpha 1e-6."""
    _need("vllm")
    res = _audit(name, "chain", process, tv=tv, cases=2)
    assert res.verdict == "pass", res.summary()


@pytest.mark.parametrize(
    "name", ["vllm.mrv2.rejection_sample", "vllm.mrv2.rejection_sample[block_verification]"]
)
def test_vllm_mrv2_passes_with_power_on_one_case(name: str):
    """One case given the time (iid drafts, K = 2, V = 8; planned for TV 0.15: 1,793 steps, a few min
    interpreted): a pass that detects TV 0.14 on its cells at power 0.99."""
    _need("vllm")
    backend = dataclasses.replace(REGISTRY[("chain", name)], processes=("iid_chain",))
    case = next(c for c in default_cases(backend, 0) if c.name == "iid/K2/V8")
    res = audit(backend, AuditConfig(seed=0, tv=0.15, budget_seconds=900, cases=[case], probes=False))
    assert res.verdict == "pass", res.summary()
    assert res.cases[0].n == res.cases[0].planned and res.cases[0].detectable_tv < 0.15, res.summary()


def test_vllm_audit_through_the_kernel_is_not_vacuous():
    """The same audit flags V1's kernel when it is handed the wrong draft law (q reversed over
    the vocabulary; the drafts were sampled from q). (Declaring sampled drafts one-hot would not
    do: accepting x with probability p(x) and otherwise drawing from p without x emits p for any
    law of x.)"""
    _need("vllm")
    from specproof.properties.conformance.backends import Backend
    from specproof.properties.conformance.backends.thirdparty.vllm import v1_rejection_sample

    def wrong(ids, q, p, g):  # type: ignore[no-untyped-def]
        return v1_rejection_sample(ids, q.flip(-1), p, g)

    good = REGISTRY[("chain", "vllm.v1.rejection_sample")]
    bad = dataclasses.replace(good, name="vllm.v1[q reversed]", fn=wrong, processes=("iid_chain",))
    assert isinstance(bad, Backend)
    small = [c for c in default_cases(bad, 0) if c.vocab <= 8][:2]
    res = audit(bad, AuditConfig(seed=0, samples=600, budget_seconds=600, cases=small, probes=False))
    assert res.verdict == "lossy", res.summary()


def test_vllm_seeded_requests_do_not_depend_on_their_batch():
    """A real bug class (seeds ignored; a batch mixing seeded and unseeded requests): a seeded
    request's row is the same alone and beside other requests, seeded or not, in both samplers
    (the bonus token, drawn by the adapter, is fixed by giving it a point mass)."""
    _need("vllm")
    from specproof.properties.conformance.backends.thirdparty.vllm import (
        mrv2_rejection_sample,
        v1_rejection_sample,
    )

    g = torch.Generator().manual_seed(3)
    B, K, V = 4, 3, 6
    p = torch.softmax(torch.randn(B, K + 1, V, generator=g, dtype=torch.float64), -1)
    p[:, K] = torch.nn.functional.one_hot(torch.tensor(2), V).double()
    q = torch.softmax(torch.randn(B, K, V, generator=g, dtype=torch.float64), -1)
    ids = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, K)
    rows = []
    for trial in range(8):
        seed = 1000 + trial
        alone = v1_rejection_sample(ids[:1], q[:1], p[:1], g, seeds=[seed])
        mixed = v1_rejection_sample(ids, q, p, g, seeds=[seed, None, 7, None])
        assert torch.equal(alone[0], mixed[0]), (trial, alone, mixed)
        alone2 = mrv2_rejection_sample(ids[:1], q[:1], p[:1], g, seeds=[seed])
        mixed2 = mrv2_rejection_sample(ids, q, p, g, seeds=[seed, 5, 6, 7])
        assert torch.equal(alone2[0], mixed2[0]), (trial, alone2, mixed2)
        rows.append(tuple(alone[0].tolist()))
    assert len(set(rows)) > 1  # and the seed does matter


@pytest.mark.parametrize("name", ["vllm.v1.rejection_sample[greedy]", "vllm.mrv2.rejection_sample[greedy]"])
def test_vllm_greedy_keeps_greedy_decoding_exactly(name: str):
    """At temperature 0 the accepted prefix is the drafts' agreement with the target's argmax,
    then the argmax: checked output for output on random laws (ties excluded by construction)."""
    _need("vllm")
    fn = REGISTRY[("chain", name)].fn
    g = torch.Generator().manual_seed(0)
    B, K, V = 32, 3, 6
    p = torch.softmax(3 * torch.randn(B, K + 1, V, generator=g, dtype=torch.float64), -1)
    am = p.argmax(-1)
    # drafts agree with the argmax for a random number of positions, then differ
    agree = torch.randint(0, K + 1, (B,), generator=g)
    ids = torch.where(torch.arange(K)[None] < agree[:, None], am[:, :K], (am[:, :K] + 1) % V)
    out = fn(ids, None, p, g)
    for b in range(B):
        n = int(agree[b])
        want = am[b, : n + 1].tolist() + [-1] * (K - n)
        assert out[b].tolist() == want, (b, out[b].tolist(), want)


@pytest.mark.parametrize(
    "module, name, kind, processes",
    [
        ("flashinfer", "flashinfer.chain_speculative_sampling", "chain", ("iid_chain", "onehot_chain")),
        (
            "sglang_cuda",
            "sglang.tree_speculative_sampling_target_only",
            "tree",
            ("onehot_siblings", "topk_siblings", "wor_siblings"),
        ),
    ],
)
def test_cuda_only_adapters_pass(module: str, name: str, kind: str, processes: tuple[str, ...]):
    """FlashInfer's chain sampler and SGLang's CUDA tree sampler: skipped without CUDA."""
    _need(module)
    for process in processes:
        res = _audit(name, kind, process, tv=0.04)
        assert res.verdict == "pass", res.summary()


def test_hf_prompt_lookup_as_a_proposer_is_lossless_under_every_exact_rule():
    pytest.importorskip("transformers")
    from specproof.properties.audit.conform import _proposer_row
    from specproof.properties.conformance.backends.thirdparty.hf import PromptLookupDraft, proposers

    assert PromptLookupDraft(4, (2, 0, 3, 2, 0, 3), 3).candidates == [2, 0, 3]  # continues the match
    row = _proposer_row(proposers()[0])
    assert row.verdict == "pass" and row.deterministic and row.max_tv is not None and row.max_tv < 1e-12, row
    assert row.rules is not None and len(row.rules) == 8
