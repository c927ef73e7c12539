"""The paged KV cache of the optimized loop: attention through block tables, the in-place commit,
and the block allocator under admit / step / cancel / finish (Triton interpreter).

* Paged tree attention equals attention computed query by query from the blocks (float64 and
  float32, block sizes 1 to 16, ragged rows mixing causal chains and trees).
* A commit moves exactly the slots ``base + j`` whose accepted node ``a_j != j`` (from
  ``base + a_j``), as ``DraftTree.kv_commit_plan`` prescribes; no other slot of any block changes.
* A hypothesis state machine admits requests (prompts of different lengths), steps the batch and
  cancels requests at random, on a cache whose freed blocks are filled with NaN: after every
  rule each block is free or owned by exactly one live request, a request holds exactly the
  blocks its length needs, and every finished request emitted the tokens it emits decoded
  alone (so no request read another's blocks or a freed one). A mutant that frees the
  block holding a request's last committed slot is caught by the NaN poison.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from specproof.optimized.decode import OptimizedDecoder
from specproof.optimized.paged_kv import (
    CacheFullError,
    PagedKVCache,
    QueryBatch,
    chain_rows,
    commit,
    paged_attention,
    reference_paged_attention,
    tree_rows,
    write_kv,
)
from specproof.reference.decode import e2e_models
from specproof.reference.errors import NonFiniteError, ShapeError
from specproof.reference.tree import DraftTree

_, BIG = e2e_models()


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@st.composite
def trees(draw, max_nodes=9):
    n = draw(st.integers(1, max_nodes))
    return [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]


@settings(max_examples=25)
@given(
    rows=st.lists(st.tuples(st.integers(1, 12), trees()), min_size=1, max_size=4),
    bs=st.sampled_from([1, 2, 4, 16]),
    dtype=st.sampled_from([torch.float64, torch.float32]),
    seed=st.integers(0, 2**31),
)
def test_paged_attention_equals_attention_from_the_blocks(rows, bs, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    H, D = 2, 5
    cache = PagedKVCache(1, H, D, block_size=bs, num_blocks=64, dtype=dtype)
    rids = list(range(len(rows)))
    for r in rids:
        cache.admit(r)
    # a prefill chain per row, then a tree per row on top of it
    for stage in ("chain", "tree"):
        if stage == "chain":
            qs = chain_rows([0] * len(rows), [[0] * n for n, _ in rows])
        else:
            for r, (n, _) in zip(rids, rows):
                cache.set_length(r, n)
            qs = tree_rows([n for n, _ in rows], [t for _, t in rows], [[0] * len(t) for _, t in rows])
        batch = QueryBatch.build(cache, rids, qs)
        k, v, q = (torch.randn(batch.T, H, D, generator=g, dtype=torch.float64).to(dtype) for _ in range(3))
        write_kv(cache, 0, batch, k, v)
        got = paged_attention(q, cache, 0, batch)
        want = reference_paged_attention(q, cache, 0, batch)
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        assert torch.allclose(got.double(), want, atol=tol, rtol=0)


@settings(max_examples=25)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 7), trees(12), st.randoms(use_true_random=False)), min_size=1, max_size=4
    ),
    bs=st.sampled_from([1, 2, 4]),
)
def test_commit_moves_exactly_the_accepted_path_and_nothing_else(rows, bs):
    cache = PagedKVCache(2, 2, 3, block_size=bs, num_blocks=128, dtype=torch.float64)
    rids = list(range(len(rows)))
    paths, bases = [], []
    for r, (pre, par, rnd) in zip(rids, rows):
        cache.admit(r)
        cache.reserve(r, pre + len(par))
        tree, node, path = DraftTree(par), 0, [0]
        while tree.children[node] and rnd.random() < 0.8:
            node = rnd.choice(tree.children[node])
            path.append(node)
        paths.append(path)
        bases.append(pre)
    cache.k.normal_()
    cache.v.normal_()
    before_k, before_v = cache.k.clone(), cache.v.clone()

    def at(t, r, s):  # slot s of request r in every layer and head
        b = cache.tables[r][s // bs]
        return t[:, b, :, s % bs, :]

    expected = {}
    for r, par, path, pre in zip(rids, [p for _, p, _ in rows], paths, bases):
        moves, new_len = DraftTree(par).kv_commit_plan(path, pre)
        for src, dst in moves:
            expected[(r, dst)] = (at(before_k, r, src), at(before_v, r, src))
    owned = {(r, s) for r in rids for s in range(len(cache.tables[r]) * bs)}
    unowned = sorted(set(range(cache.num_blocks)) - {b for t in cache.tables.values() for b in t})
    commit(cache, rids, paths, bases)
    for r, path, pre in zip(rids, paths, bases):
        assert cache.lengths[r] == pre + len(path)
        assert len(cache.tables[r]) == -(-(pre + len(path)) // bs)  # the tree's extra blocks freed
    for r, s in owned:
        if s >= cache.lengths[r]:
            continue
        k, v = expected[(r, s)] if (r, s) in expected else (at(before_k, r, s), at(before_v, r, s))
        assert torch.equal(at(cache.k, r, s), k) and torch.equal(at(cache.v, r, s), v), (r, s)
    # blocks no request owned were not touched at all
    assert torch.equal(cache.k[:, unowned], before_k[:, unowned])
    assert torch.equal(cache.v[:, unowned], before_v[:, unowned])


def test_cache_errors_name_the_argument():
    cache = PagedKVCache(1, 1, 2, block_size=2, num_blocks=2)
    cache.admit("a")
    with pytest.raises(CacheFullError) as e:
        cache.reserve("a", 5)
    assert e.value.argument == "num_blocks"
    with pytest.raises(ShapeError):
        cache.admit("a")
    with pytest.raises(ShapeError):
        PagedKVCache(1, 1, 2, block_size=3)
    with pytest.raises(ShapeError):
        commit(cache, ["a"], [[1, 2]], [0])


def decode_alone(prompt, steps, seed, **kw):
    dec = OptimizedDecoder(BIG, "ngram", "token", **kw)
    dec.admit(0, prompt, steps=steps, seed=seed)
    return dec.run()[0].tokens


class PagedDecoding(RuleBasedStateMachine):
    """Admit / step / cancel on one decoder whose freed blocks are poisoned with NaN."""

    @initialize()
    def start(self):
        self.dec = OptimizedDecoder(BIG, "ngram", "token", block_size=2, num_blocks=64, poison=True)
        self.meta: dict[int, tuple[list[int], int, int]] = {}
        self.cancelled: set[int] = set()

    @rule(
        prompt=st.lists(st.integers(0, 15), min_size=1, max_size=7),
        steps=st.integers(1, 4),
        seed=st.integers(0, 99),
    )
    def admit(self, prompt, steps, seed):
        rid = len(self.meta)
        self.dec.admit(rid, prompt, steps=steps, seed=seed)
        self.meta[rid] = (prompt, steps, seed)

    @precondition(lambda self: bool(self.dec.requests))
    @rule()
    def step(self):
        self.dec.step()

    @precondition(lambda self: bool(self.dec.requests))
    @rule(data=st.data())
    def cancel(self, data):
        rid = data.draw(st.sampled_from(sorted(self.dec.requests)))
        self.dec.cancel(rid)
        self.cancelled.add(rid)

    @invariant()
    def every_block_is_free_or_owned_by_one_live_request(self):
        cache = self.dec.cache
        owned = [b for t in cache.tables.values() for b in t]
        assert len(owned) == len(set(owned)), "a block in two tables"
        assert not set(owned) & set(cache.free), "a block both owned and free"
        assert sorted(owned + cache.free) == list(range(cache.num_blocks))
        assert set(cache.tables) == set(self.dec.requests)
        for rid, req in self.dec.requests.items():
            n = cache.lengths[rid]
            assert len(cache.tables[rid]) == -(-n // cache.block_size)
            if req.prefilled:
                assert n == len(req.tokens) - 1

    def teardown(self):
        if not hasattr(self, "dec"):
            return
        self.dec.run()
        assert self.dec.cache.owned() == 0
        for rid, (prompt, steps, seed) in self.meta.items():
            if rid in self.cancelled:
                continue
            assert self.dec.finished[rid].tokens == decode_alone(prompt, steps, seed), rid


PagedDecoding.TestCase.settings = settings(max_examples=4, stateful_step_count=10, deadline=None)
test_paged_decoding_state_machine = PagedDecoding.TestCase


class EarlyFree(OptimizedDecoder):
    """Mutant: after each commit the block holding a request's last committed slot is freed
    (block size 1) while the request keeps its length, so the next step reads a freed block."""

    def _commit(self, rids, paths, prefix):
        super()._commit(rids, paths, prefix)
        for rid in rids:
            n = self.cache.lengths[rid]
            self.cache.set_length(rid, n - 1)
            self.cache.lengths[rid] = n


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered:RuntimeWarning")
def test_reading_a_freed_block_is_caught_by_the_poison():
    prompts = [[3, 4, 5], [1, 2, 3, 1, 2], [7, 8]]
    for cls in (OptimizedDecoder, EarlyFree):
        dec = cls(BIG, "ngram", "token", block_size=1, poison=True)
        for i, p in enumerate(prompts):
            dec.admit(i, p, steps=3, seed=i)
        if cls is OptimizedDecoder:
            dec.run()  # the honest loop never reads a poisoned block
        else:
            with pytest.raises(NonFiniteError):
                dec.run()


def test_prompts_of_any_length_share_the_cache_and_match_decoding_alone():
    prompts = [[5], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2], [3, 3]]
    dec = OptimizedDecoder(BIG, "ngram", "token", block_size=4, poison=True)
    for i, p in enumerate(prompts):
        dec.admit(i, p, steps=4, seed=10 + i)
    out = dec.run()
    for i, p in enumerate(prompts):
        assert out[i].tokens == decode_alone(p, 4, 10 + i)
