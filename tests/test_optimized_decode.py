"""The optimized decoding loop against the reference loop, step for step (Triton interpreter).

Coupling: the reference loop (``reference.decode.decode`` itself, its draws read from a tape)
and the optimized loop (batched drafters, one target forward over every request's tree on a
paged KV cache, the rule's kernel, commit) are fed the same uniforms in the reference's tape
layout; in float64 they must emit the same tokens at every step for every request. Checked for
every proposer x every rule with a kernel that is declared exact for the proposer's default
process (B = 4 requests of different prompts, 8 to 10 steps each), on hypothesis-drawn
proposers, processes, rules, prompts, batch sizes and tree shapes (static trees, chains,
EAGLE-2's top_k / nodes / depth), and three mutant loops must break it: stale KV after a
rejection, positions off by one after a commit, a request's tree laws read from another row.
Also: the twins' laws, the target's tree forward, the batched draws and the engine contract.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specproof.optimized.decode import (
    KERNEL_RULES,
    OptimizedDecoder,
    OptimizedEngine,
    TapeUniforms,
    reference_decode_on_tape,
    verifying_target,
)
from specproof.optimized.paged_kv import QueryBatch, chain_rows, commit_moves, tree_rows
from specproof.optimized.proposers import twin
from specproof.optimized.proposers.ngram import lookup
from specproof.optimized.proposers.processes import categorical, ranked
from specproof.optimized.proposers.selfdraft import Node
from specproof.optimized.transformer import PagedTransformer
from specproof.reference.choices import categorical_from_uniform
from specproof.reference.decode import e2e_models
from specproof.reference.dynamic_tree import DynamicTree
from specproof.reference.errors import BadParameterError, NotAChainError, ShapeError, TokenOutOfRangeError
from specproof.reference.proposers import PROPOSERS, NgramLM
from specproof.reference.proposers.medusa import choices_to_shape
from specproof.reference.rules import RULES
from specproof.reference.transformer import KVCache, TransformerLM
from specproof.reference.tree import DraftTree

SMALL, BIG = e2e_models()
PROMPTS = [(3, 4), (1, 2, 3, 1, 2), (5, 6, 7), (9, 9, 9, 9, 0, 1, 2)]
STEPS = [8, 9, 8, 8]  # ragged: the batch shrinks at the end
SLOW = pytest.mark.skipif(os.environ.get("SPECPROOF_SLOW") != "1", reason="slow sweep: SPECPROOF_SLOW=1")


@pytest.fixture(autouse=True)
def _one_thread():
    # float64 matmuls this small are dominated by thread hand-offs on a loaded machine
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def exact_pairs(process_index: int = 0) -> list[tuple[str, str]]:
    """(proposer, rule) for every rule with a kernel declared exact for the proposer's process."""
    out = []
    for name, p in PROPOSERS.items():
        proc = p.processes[min(process_index, len(p.processes) - 1)]
        chain = DraftTree(p.shape).is_chain and proc.chain
        for rule in KERNEL_RULES:
            r = RULES[rule]
            if proc.name in r.exact_for and r.applies_to(chain):
                out.append((name, rule))
    return out


def run_both(
    proposer,
    rule,
    prompts,
    steps,
    seed,
    *,
    decoder=OptimizedDecoder,
    dtype=torch.float64,
    **kw,
):
    """Decode ``prompts`` with both loops on the same random tapes; (reference, optimized) pairs."""
    dec = decoder(BIG, proposer, rule, dtype=dtype, **kw)
    rng = np.random.default_rng(seed)
    tapes = [(rng.random((s, dec.S)), rng.random((s, dec.N)), rng.random(s)) for s in steps]
    for i, (p, s, t) in enumerate(zip(prompts, steps, tapes)):
        dec.admit(i, p, steps=s, tape=TapeUniforms(*t))
    got = dec.run()
    ref = [
        reference_decode_on_tape(BIG, proposer, rule, p, TapeUniforms(*t), s, **kw)
        for p, s, t in zip(prompts, steps, tapes)
    ]
    return [(r, got[i]) for i, r in enumerate(ref)], dec


def coupled(pairs) -> bool:
    return all(r.tokens == o.tokens and r.emitted_per_step == o.emitted_per_step for r, o in pairs)


@pytest.mark.parametrize(("proposer", "rule"), exact_pairs())
def test_every_proposer_and_exact_rule_couples_with_the_reference_loop(proposer, rule):
    pairs, dec = run_both(proposer, rule, PROMPTS, STEPS, seed=hash((proposer, rule)) % 2**32)
    for i, (r, o) in enumerate(pairs):
        assert o.tokens == r.tokens, (i, r.emitted_per_step, o.emitted_per_step)
        assert o.emitted_per_step == r.emitted_per_step
        assert len(o.emitted_per_step) == STEPS[i]
    assert dec.cache.owned() == 0 and not dec.requests  # every block back on the free list


def test_every_pair_is_covered_and_traversal_is_refused():
    pairs = exact_pairs()
    assert {p for p, _ in pairs} == set(PROPOSERS)  # every proposer has exact rules with kernels
    assert {r for _, r in pairs} == {"greedy", "token", "strict", "block", "mss", "rrs", "target_only"}
    with pytest.raises(BadParameterError, match="no optimized kernel"):
        OptimizedDecoder(BIG, "draft", "traversal")
    with pytest.raises(NotAChainError):
        OptimizedDecoder(BIG, "medusa", "token")


@st.composite
def configs(draw):
    """A proposer with one of its processes, a shape for it, a rule declared exact for that
    process (with a kernel), 4 to 6 prompts."""
    name = draw(st.sampled_from(sorted(PROPOSERS)))
    ref = PROPOSERS[name]
    proc = draw(st.sampled_from(list(ref.processes)))
    kw: dict = {}
    if isinstance(proc, DynamicTree):
        k = draw(st.integers(1, 3))
        depth = draw(st.integers(1, 3))
        cands = k + (depth - 1) * k * k
        proc = DynamicTree(top_k=k, nodes=draw(st.integers(1, min(cands, 8))))
        ref = dataclasses.replace(ref, processes=(proc,))
        shape = tuple(range(-1, depth))
    elif proc.chain:
        limit = {"mtp": 3, "dflash": 3}.get(name, 4)
        shape = tuple(range(-1, draw(st.integers(1, limit))))
        kw["process"] = proc.name
    else:
        depth = 3 if name.startswith("medusa") else 4  # Medusa's three heads
        choices = [(r,) for r in range(draw(st.integers(1, 3)))]
        for _ in range(draw(st.integers(0, 4))):
            parent = draw(st.sampled_from(choices))
            if len(parent) < depth:
                kids = [c for c in choices if c[:-1] == parent and len(c) == len(parent) + 1]
                choices.append(parent + (len(kids),))
        shape = choices_to_shape(sorted(set(choices), key=lambda c: (len(c), c)))
        kw["process"] = proc.name
    chain = DraftTree(shape).is_chain and proc.chain
    rules = [r for r in KERNEL_RULES if proc.name in RULES[r].exact_for and RULES[r].applies_to(chain)]
    rule = draw(st.sampled_from(rules))
    B = draw(st.integers(4, 6))
    prompts = [tuple(draw(st.lists(st.integers(0, 15), min_size=2, max_size=7))) for _ in range(B)]
    return ref, rule, shape, prompts, kw


@settings(max_examples=5)
@given(cfg=configs(), seed=st.integers(0, 2**32 - 1))
def test_coupling_on_drawn_proposers_rules_prompts_batches_and_shapes(cfg, seed):
    ref, rule, shape, prompts, kw = cfg
    steps = [8] * len(prompts)
    pairs, _ = run_both(ref, rule, prompts, steps, seed, shape=shape, **kw)
    for r, o in pairs:
        assert (o.tokens, o.emitted_per_step) == (r.tokens, r.emitted_per_step)


@SLOW
@pytest.mark.slow
@settings(max_examples=60)
@given(cfg=configs(), seed=st.integers(0, 2**32 - 1))
def test_coupling_sweep(cfg, seed):
    test_coupling_on_drawn_proposers_rules_prompts_batches_and_shapes.hypothesis.inner_test(cfg, seed)


@SLOW
@pytest.mark.slow
@pytest.mark.parametrize(("proposer", "rule"), exact_pairs(1) + [(p, "typical") for p in PROPOSERS])
def test_second_processes_and_typical_couple_too(proposer, rule):
    ref = PROPOSERS[proposer]
    proc = ref.processes[min(1, len(ref.processes) - 1)].name
    pairs, _ = run_both(proposer, rule, PROMPTS, STEPS, seed=11, process=proc)
    assert coupled(pairs)


# -- mutants: each must break the coupling ----------------------------------------------------


class StaleKV(OptimizedDecoder):
    """After verification the cache keeps the tree's K/V where the tree forward wrote them: a
    rejected sibling's entry stays where the accepted node should move."""

    def _commit(self, rids, paths, prefix):
        for rid, path, pre in zip(rids, paths, prefix):
            self.cache.set_length(rid, pre + len(path))


class PositionsOffByOne(OptimizedDecoder):
    """Position ids one too far for every request that has committed a step."""

    def _rows(self, reqs, prefix, props):
        rows = super()._rows(reqs, prefix, props)
        for r, q in zip(reqs, rows):
            if r.out.emitted_per_step:
                q.positions = [p + 1 for p in q.positions]
        return rows


class OtherRow(OptimizedDecoder):
    """Row b's tree laws read from row b + 1 (an offset into the flattened forward)."""

    def _row_laws(self, laws, batch, b, n):
        s = int(batch.start[(b + 1) % len(batch.rids)])
        return laws[s : s + n]


def test_the_stale_kv_mutant_breaks_the_coupling():
    # the honest loop compacts some accepted path (a_j != j), so the mutant has something to miss
    seen: list[list[int]] = []

    class Spy(OptimizedDecoder):
        def _commit(self, rids, paths, prefix):
            seen.extend(paths)
            super()._commit(rids, paths, prefix)

    pairs, _ = run_both("eagle2", "rrs", PROMPTS, STEPS, seed=5, decoder=Spy)
    assert coupled(pairs)
    assert sum(len(commit_moves(p)) for p in seen) > 0
    mutant, _ = run_both("eagle2", "rrs", PROMPTS, STEPS, seed=5, decoder=StaleKV)
    assert not coupled(mutant)


def test_the_positions_mutant_breaks_the_coupling():
    pairs, _ = run_both("draft", "token", PROMPTS, STEPS, seed=6, decoder=PositionsOffByOne)
    assert not coupled(pairs)


def test_the_other_row_mutant_breaks_the_coupling():
    pairs, _ = run_both("medusa", "mss", PROMPTS, STEPS, seed=7, decoder=OtherRow)
    assert not coupled(pairs)


# -- the parts --------------------------------------------------------------------------------


@settings(max_examples=20)
@given(
    parents=st.lists(st.integers(0, 100), min_size=0, max_size=9).map(
        lambda xs: [-1] + [x % (i + 1) for i, x in enumerate(xs)]
    ),
    prompt_len=st.integers(1, 9),
    seed=st.integers(0, 2**31),
)
def test_the_tree_forward_equals_the_reference_tree_forward(parents, prompt_len, seed):
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 16, (prompt_len,), generator=g).tolist()
    toks = torch.randint(0, 16, (len(parents),), generator=g).tolist()
    model = PagedTransformer(BIG)
    cache = model.new_cache(16, 4)
    cache.admit("r")
    if prompt_len > 1:
        model.forward(QueryBatch.build(cache, ["r"], chain_rows([0], [prompt[:-1]])), cache)
    cache.set_length("r", prompt_len - 1)
    toks[0] = prompt[-1]
    batch = QueryBatch.build(cache, ["r"], tree_rows([prompt_len - 1], [parents], [toks]))
    logits, hidden = model.forward(batch, cache)
    ref_cache = KVCache()
    if prompt_len > 1:
        BIG.forward(torch.tensor(prompt[:-1]), ref_cache)
    want, want_hidden = BIG.forward_tree(DraftTree(parents), torch.tensor(toks), ref_cache)
    assert torch.allclose(logits, want, atol=1e-12, rtol=0)
    for a, b in zip(hidden, want_hidden):
        assert torch.allclose(a, b, atol=1e-12, rtol=0)


@settings(max_examples=60)
@given(
    w=st.lists(st.sampled_from([0.0, 1e-9, 0.1, 0.25, 0.5, 1.0, 3.0]), min_size=1, max_size=9).filter(
        lambda w: sum(w) > 0
    ),
    u=st.one_of(st.floats(0, 1, exclude_max=True), st.sampled_from([0.0, 1 - 2**-53, 0.5])),
)
def test_batched_draws_are_the_reference_inverse_cdf(w, u):
    got = categorical(torch.tensor([w], dtype=torch.float64), torch.tensor([u], dtype=torch.float64))
    assert int(got[0]) == categorical_from_uniform(u, w)
    order = ranked(torch.tensor([w], dtype=torch.float64))[0].tolist()
    assert order == sorted(range(len(w)), key=lambda x: (-w[x], x))


@settings(max_examples=60)
@given(ctx=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=5))
def test_batched_ngram_lookup_is_the_reference_lookup(ctx):
    ref = NgramLM(4, max_n=3)
    assert lookup(ctx, 3).tolist() == [ref.lookup(tuple(c)) for c in ctx]


@pytest.mark.parametrize("name", sorted(PROPOSERS))
def test_every_twin_gives_the_reference_draft_laws(name):
    # begin(): the root laws of three rows; expand(): a chain of drafts below each root
    drafter = twin(name, BIG)
    ref = PROPOSERS[name].make_drafter(BIG)
    rows = [(3, 4, 5), (1, 2, 3, 1, 2), (9, 9)]
    model = PagedTransformer(verifying_target(PROPOSERS[name], BIG, True))  # whose features it reads
    cache = model.new_cache(32, 4)
    for b, c in enumerate(rows):
        cache.admit(b)
        drafter.admit(b, c)
        _, hidden = model.forward(QueryBatch.build(cache, [b], chain_rows([0], [c[:-1]])), cache)
        drafter.observe(b, hidden)
    root = drafter.begin(list(range(3)), rows)
    depth = min(2, (drafter.max_depth or 3) - 1)
    paths: list[list[int]] = [[] for _ in rows]
    laws = [root]
    for d in range(1, depth + 1):
        nodes = [Node(b, d, d - 1, (b + d) % 16, d) for b in range(3)]
        for b in range(3):
            paths[b].append((b + d) % 16)
        laws.append(drafter.expand(nodes))
    drafter.end()
    for d, got in enumerate(laws):
        for b, c in enumerate(rows):
            want = ref(c).law(c + tuple(paths[b][:d]))
            assert torch.allclose(got[b].double(), torch.tensor(want, dtype=torch.float64), atol=1e-12), (
                d,
                b,
            )


# -- the engine contract --------------------------------------------------------------------


def test_the_engine_contract_generate_and_target_law():
    eng = OptimizedEngine("eagle2", "rrs")
    a = eng.generate([3, 4, 5], 7, seed=1)
    assert len(a) == 7 and all(0 <= t < 16 for t in a)
    assert eng.generate([3, 4, 5], 7, seed=1) == a  # same seed, same tokens
    batch = eng.generate_batch([[1, 2], [3, 4, 5], [7, 7, 7]], 7, [9, 1, 4])
    assert batch[1] == a  # a request alone and in a batch
    assert eng.generate([3, 4], 0, seed=0) == []
    law = eng.target_law([3, 4, 5])
    want = TransformerLM(BIG).law((3, 4, 5))
    assert len(law) == 16 and max(abs(x - y) for x, y in zip(law, want)) < 1e-12
    greedy = OptimizedEngine("ngram", "greedy").target_law([3, 4, 5])
    assert greedy == tuple(float(i == int(np.argmax(want))) for i in range(16))
    assert eng.decoder.cache.owned() == 0
    for bad, error in (
        (lambda: eng.generate([], 3, 0), ShapeError),
        (lambda: eng.generate([3, 99], 3, 0), TokenOutOfRangeError),
        (lambda: eng.generate([3], 3, 0), ShapeError),  # EAGLE needs two committed tokens
        (lambda: eng.generate([3, 4], -1, 0), BadParameterError),
        (lambda: eng.target_law([16]), TokenOutOfRangeError),
    ):
        with pytest.raises(error):
            bad()


# -- e2e and bench ------------------------------------------------------------------------------


def test_e2e_checks_run_on_the_optimized_loop(monkeypatch):
    # the exact law is the reference program's (run() computes it; stubbed here to keep this
    # test fast); optimized_run adds the coupling and runs the sampled and statistical checks on
    # the optimized loop
    from specproof.properties.e2e import check as e2e

    def exact(*a, **k):
        return e2e.E2EResult(
            proposer="ngram",
            process="onehot_chain",
            rule="token",
            declared_exact=True,
            exact_check=e2e.ExactCheck(
                vocab=4, steps=2, depth=2, drafts=2, tv=0.0, mean_emitted_per_step=1.0
            ),
            sampled=e2e.SampledCheck(
                vocab=16,
                drafts_per_step=3,
                steps=0,
                emitted=0,
                mean_emitted_per_target_forward=0.0,
                alpha=0.0,
                closed_form_iid=None,
            ),
        )

    monkeypatch.setattr(e2e, "run", exact)
    report = e2e.optimized_run(PROPOSERS["ngram"], "token", steps=2, seed=0, runs=12)
    assert report.engine == "optimized" and report.coupling is not None and report.coupling.equal
    assert report.coupling.requests >= 4 and report.coupling.steps >= 8
    assert report.sampled.engine == "optimized" and report.sampled.steps == 2
    assert report.statistical is not None and report.statistical.runs == 12 and report.statistical.lossless
    assert report.lossless and report.verdict == "pass"
    js = report.to_json()
    assert (
        js["verdict"] == "pass" and js["engine"] == "optimized" and js["statistical"]["engine"] == "optimized"
    )
    with pytest.raises(BadParameterError, match="no optimized kernel"):
        e2e.optimized_run(PROPOSERS["ngram"], "traversal")


def test_e2e_command_refuses_what_the_optimized_loop_cannot_run():
    from specproof.properties.cli import main

    base = ["e2e", "--proposer", "ngram", "--engine", "optimized", "--runs", "0", "--steps", "1"]
    assert main(base + ["--rule", "traversal"]) == 4  # no kernel: a usage error, not a verdict
    assert main(["e2e", "--proposer", "ngram", "--engine", "gpu"]) == 4


def test_float32_agreement_divergences_are_near_a_threshold():
    from specproof.properties.bench.decode import float32_agreement

    study = float32_agreement([("eagle2", "rrs")], requests=3, steps=5, seed=1, law_trees=4)
    assert study["law_rounding"] < study["delta"]  # the threshold window covers float32 rounding
    assert study["compared"] >= 3  # at least one step per request
    assert study["unexplained"] == 0  # every divergence had a uniform within delta of a threshold
    assert study["diverged"] <= study["near"]


def test_the_decode_bench_runs_and_reports_equal_outputs():
    from specproof.properties.bench.decode import markdown, speed

    rows = speed(True, lambda s: None)
    fp64 = [r for r in rows if r.engine == "optimized"]
    assert fp64 and all(r.extra["outputs_equal"] for r in fp64)
    assert all(abs(sum(r.extra["share"].values()) - 1) < 1e-9 for r in fp64)
    assert "| draft, token | 4 |" in markdown(rows)
