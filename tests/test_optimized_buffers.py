"""Tree buffers, KV commit and tree attention of the optimized engine against the reference.

Hypothesis draws batches of trees (up to 40 nodes, so the packed mask spans two 32-bit words)
and prefix lengths; the kernels must equal :class:`specproof.reference.tree.DraftTree`'s mask,
position ids, leaf paths and KV-commit moves exactly, and tree attention must equal the plain
causal attention computed one root path at a time within 1e-5 (float32 kernel against float64).
Two mutants (a causal mask over the flattened order, flattened position ids) must fail that
comparison, so it has teeth. Triton interpreter on CPU.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specproof.optimized.tree_attention import reference_attention, tree_attention
from specproof.optimized.tree_buffers import commit_kv, tree_buffers, unpack_mask
from specproof.reference.errors import CycleError, RootError, ShapeError
from specproof.reference.tree import DraftTree


@st.composite
def forests(draw, max_nodes=40, max_rows=3):
    n = draw(st.integers(1, max_nodes))
    rows = draw(st.integers(1, max_rows))
    out = []
    for _ in range(rows):
        style = draw(st.sampled_from(["random", "chain", "star", "deep"]))
        par = [-1]
        for i in range(1, n):
            if style == "chain":
                par.append(i - 1)
            elif style == "star":
                par.append(0)
            elif style == "deep":
                par.append(max(0, i - draw(st.integers(1, 2))))
            else:
                par.append(draw(st.integers(0, i - 1)))
        out.append(par)
    return out


@settings(max_examples=30)
@given(forest=forests(), prefix=st.integers(0, 9))
def test_tree_buffers_equal_the_reference(forest, prefix):
    parents = torch.tensor(forest)
    buf = tree_buffers(parents, prefix)
    mask = unpack_mask(buf.mask, parents.shape[1])
    width = buf.leaf_paths.shape[2]
    for b, par in enumerate(forest):
        tree = DraftTree(par)
        assert mask[b].tolist() == [list(r) for r in tree.attention_mask()]
        assert buf.position_ids[b].tolist() == list(tree.position_ids(prefix))
        assert buf.depth[b].tolist() == list(tree.depth)
        paths = [list(p) + [-1] * (width - len(p)) for p in tree.leaf_paths()]
        L = int(buf.n_leaves[b])
        assert L == len(tree.leaves())
        assert buf.leaf_paths[b, :L].tolist() == paths
        assert bool((buf.leaf_paths[b, L:] == -1).all())


@settings(max_examples=30)
@given(forest=forests(max_nodes=12), seed=st.integers(0, 2**31), prefix=st.integers(0, 5))
def test_commit_kv_equals_the_reference_plan(forest, seed, prefix):
    g = torch.Generator().manual_seed(seed)
    B, N = len(forest), len(forest[0])
    accepted = torch.full((B, N), -1)
    for b, par in enumerate(forest):  # a random root path of each tree
        tree, node, path = DraftTree(par), 0, [0]
        while tree.children[node] and torch.rand(1, generator=g) < 0.8:
            kids = tree.children[node]
            node = kids[int(torch.randint(len(kids), (1,), generator=g))]
            path.append(node)
        accepted[b, : len(path)] = torch.tensor(path)
    cache = torch.randn(B, 2, prefix + N + 3, 5, generator=g)
    expected = cache.clone()
    lengths = []
    for b, par in enumerate(forest):
        path = [int(a) for a in accepted[b] if a >= 0]
        moves, new_len = DraftTree(par).kv_commit_plan(path, prefix)
        for src, dst in moves:  # the reference's moves, applied in order
            expected[b, :, dst] = expected[b, :, src]
        lengths.append(new_len)
    got = commit_kv(cache, accepted, prefix)
    assert got.tolist() == lengths
    for b in range(B):
        assert torch.equal(cache[b, :, : lengths[b]], expected[b, :, : lengths[b]])


def _attention_inputs(forest, seed, prefix, D=8, H=2, S=12):
    g = torch.Generator().manual_seed(seed)
    B, N = len(forest), len(forest[0])
    q, k, v = (torch.randn(B, H, N, D, generator=g) for _ in range(3))
    kp, vp = (torch.randn(B, H, S, D, generator=g) for _ in range(2))
    pre = torch.tensor([min(S, prefix + b) for b in range(B)])
    return q, k, v, kp, vp, torch.tensor(forest), pre


@settings(max_examples=25)
@given(forest=forests(max_nodes=10), seed=st.integers(0, 2**31), prefix=st.integers(0, 9), rope=st.booleans())
def test_tree_attention_equals_attention_path_by_path(forest, seed, prefix, rope):
    args = _attention_inputs(forest, seed, prefix)
    base = 10000.0 if rope else None
    got = tree_attention(*args, rope_base=base)
    want = reference_attention(*args, rope_base=base)
    assert torch.allclose(got.double(), want, atol=1e-5, rtol=0)


def test_mutants_of_tree_attention_fail_the_comparison():
    forest = [[-1, 0, 0, 1, 2, 1]]
    args = _attention_inputs(forest, 7, 3)
    want = reference_attention(*args, rope_base=10000.0)
    # causal mask over the flattened order: a chain [-1, 0, 1, ...] of the same size
    causal = list(args)
    causal[5] = torch.tensor([[-1, 0, 1, 2, 3, 4]])
    assert not torch.allclose(tree_attention(*causal, rope_base=10000.0).double(), want, atol=1e-3)
    # flattened position ids: rotate by node index instead of depth (the right mask kept)
    from specproof.optimized import tree_attention as ta

    q, k, v, kp, vp, par, pre = args
    flat = pre[:, None] + torch.arange(6)[None, :]
    qf, kf = ta.rope(q, flat, 10000.0), ta.rope(k, flat, 10000.0)
    got = tree_attention(qf, kf, v, kp, vp, par, pre)
    assert not torch.allclose(got.double(), want, atol=1e-3)


def test_bad_buffers_input_raises_the_reference_errors():
    with pytest.raises(RootError):
        tree_buffers(torch.tensor([[0, 0]]))
    with pytest.raises(CycleError):
        tree_buffers(torch.tensor([[-1, 2, 1]]))
    with pytest.raises(ShapeError, match="prefix_len"):
        tree_buffers(torch.tensor([[-1, 0]]), -1)
    with pytest.raises(ShapeError, match="cache"):
        commit_kv(torch.zeros(1, 1, 3, 2), torch.tensor([[0, 1, -1]]), 2)
    q = torch.zeros(1, 1, 2, 4)
    with pytest.raises(ShapeError, match="k_prefix"):
        tree_attention(q, q, q, torch.zeros(1, 1, 3, 5), torch.zeros(1, 1, 3, 5), torch.tensor([[-1, 0]]), 1)
    nan = q.clone()
    nan[0, 0, 1, 2] = float("nan")
    with pytest.raises(ShapeError, match="q"):
        tree_attention(
            nan, q, q, torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4), torch.tensor([[-1, 0]]), 1
        )
