"""The optimized tree rules and typical acceptance against the reference, sample for sample.

For hypothesis-drawn trees (up to 12 nodes, any shape), vocabularies that are neither powers of
two nor multiples of the kernel's block, float32 / float16 / bfloat16 laws and sampled or
deterministic siblings, each kernel fed the reference's uniforms returns the reference's
accepted path and next token. The small BLOCK (16) makes rows span several blocks, so the
running sums' carries are exercised at small V. Malformed trees raise the reference's errors
before any launch. Triton interpreter on CPU.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from optimized_helpers import DTYPES, FULL, STYLES, laws
from test_optimized_coupled import MarginReader, split_agrees

from specproof.optimized import greedy, mss, rrs, target_only, typical
from specproof.reference import make_step
from specproof.reference.errors import (
    CycleError,
    ForwardParentError,
    RootError,
    ShapeError,
    TokenOutOfRangeError,
    ZeroDraftProbabilityError,
)
from specproof.reference.rules import greedy as ref_greedy
from specproof.reference.rules import mss as ref_mss
from specproof.reference.rules import rrs as ref_rrs
from specproof.reference.rules import target_only as ref_target_only
from specproof.reference.rules import typical as ref_typical
from specproof.reference.tree import DraftTree
from specproof.reference.validate import tolerance

VOCABS = [2, 3, 5, 7, 13, 33, 50] + ([32000] if FULL else [])
BLOCK = None if FULL else 16  # small blocks exercise the carries at small V


@st.composite
def parent_arrays(draw, max_nodes=12):
    n = draw(st.integers(1, max_nodes))
    return [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]


def draw_batch(seed, parents_list, V, dtype, style, sampled, distinct):
    """Laws and tokens for a batch of trees (all of N nodes). Sampled siblings are drawn from
    the node's draft law (without replacement when ``distinct``); deterministic ones are
    distinct ids."""
    rng = np.random.default_rng(seed)
    B, N = len(parents_list), len(parents_list[0])
    tp = laws(rng, (B, N, V), dtype, style)
    dp = laws(rng, (B, N, V), dtype, "random") if sampled else None
    tokens = np.zeros((B, N), dtype=np.int64)
    for b, par in enumerate(parents_list):
        tree = DraftTree(par)
        tokens[b, 0] = rng.integers(V)
        for v in range(N):
            kids = tree.children[v]
            if not kids:
                continue
            if sampled:
                q = dp[b, v].double().numpy()
                support = np.flatnonzero(q > 0)
                if distinct:
                    k = min(len(kids), len(support))
                    pick = rng.choice(support, size=k, replace=False)
                    pick = np.concatenate([pick, rng.choice(support, size=len(kids) - k)])
                else:
                    pick = rng.choice(support, size=len(kids))
            else:
                pick = rng.permutation(V)[: len(kids)] if len(kids) <= V else rng.integers(0, V, len(kids))
            tokens[b, list(kids)] = pick
    return torch.tensor(parents_list), torch.tensor(tokens), dp, tp


def reference(rule, par, tok, dp, tp, tape, dtype, margins=None, **params):
    acc, nxt = [], []
    for b in range(par.shape[0]):
        step = make_step(
            par[b].tolist(),
            tok[b].tolist(),
            None if dp is None else [r.tolist() for r in dp[b].double()],
            [r.tolist() for r in tp[b].double()],
            tol=tolerance(dtype, tp.shape[-1]),
        )
        reader = MarginReader({k: v[b] for k, v in tape.items()})
        oc = rule(reader, step, **params)
        acc.append(list(oc.accepted))
        nxt.append(oc.next_token)
        if margins is not None:
            margins.append(reader.margin)
    return acc, nxt


def unpad(acc):
    return [[int(v) for v in row if v >= 0] for row in acc.tolist()]


common = dict(
    parents=parent_arrays(),
    B=st.integers(1, 3),
    V=st.sampled_from(VOCABS),
    dtype=st.sampled_from(sorted(DTYPES)),
    style=st.sampled_from(STYLES),
    seed=st.integers(0, 2**32 - 1),
)


@given(**common, sampled=st.booleans())
def test_mss_kernel_equals_the_reference(parents, B, V, dtype, style, seed, sampled):
    par, tok, dp, tp = draw_batch(seed, [parents] * B, V, DTYPES[dtype], style, sampled, distinct=False)
    rng = np.random.default_rng(seed + 1)
    ua, uf = torch.tensor(rng.random((B, len(parents)))), torch.tensor(rng.random(B))
    acc, nxt = mss(par, tok, dp, tp, ua, uf, block=BLOCK)
    tape = {"accept": [r.tolist() for r in ua], "final": [[float(u)] for u in uf]}
    assert (unpad(acc), nxt.tolist()) == reference(ref_mss, par, tok, dp, tp, tape, DTYPES[dtype])


@given(**common, sampled=st.booleans())
def test_rrs_kernel_equals_the_reference(parents, B, V, dtype, style, seed, sampled):
    par, tok, dp, tp = draw_batch(seed, [parents] * B, V, DTYPES[dtype], style, sampled, distinct=True)
    rng = np.random.default_rng(seed + 1)
    ua, uf = torch.tensor(rng.random((B, len(parents)))), torch.tensor(rng.random(B))
    acc, nxt = rrs(par, tok, dp, tp, ua, uf, block=BLOCK)
    tape = {"accept": [r.tolist() for r in ua], "final": [[float(u)] for u in uf]}
    assert (unpad(acc), nxt.tolist()) == reference(ref_rrs, par, tok, dp, tp, tape, DTYPES[dtype])


@given(**common, knobs=st.sampled_from([(1.0, 1.0), (0.3, 1.0), (1.0, 0.5), (0.25, 0.75)]))
def test_target_only_kernel_equals_the_reference(parents, B, V, dtype, style, seed, knobs):
    par, tok, _, tp = draw_batch(seed, [parents] * B, V, DTYPES[dtype], style, False, distinct=True)
    rng = np.random.default_rng(seed + 1)
    uc, uf = torch.tensor(rng.random((B, len(parents)))), torch.tensor(rng.random(B))
    acc, nxt = target_only(par, tok, tp, uc, uf, *knobs, block=BLOCK)
    tape = {"coin": [r.tolist() for r in uc], "final": [[float(u)] for u in uf]}
    params = {"threshold_single": knobs[0], "threshold_acc": knobs[1]}
    assert (unpad(acc), nxt.tolist()) == reference(
        ref_target_only, par, tok, None, tp, tape, DTYPES[dtype], **params
    )


@given(**common)
def test_greedy_kernel_equals_the_reference(parents, B, V, dtype, style, seed):
    par, tok, _, tp = draw_batch(seed, [parents] * B, V, DTYPES[dtype], style, False, distinct=True)
    rng = np.random.default_rng(seed + 2)
    for b in range(B):  # make the argmax child likely: give some node's argmax to a child
        for c in range(1, len(parents)):
            if rng.random() < 0.5:
                tok[b, c] = int(tp[b, parents[c]].double().argmax())
    acc, nxt = greedy(par, tok, tp, block=BLOCK)
    assert (unpad(acc), nxt.tolist()) == reference(ref_greedy, par, tok, None, tp, {}, DTYPES[dtype])


@given(**common, params=st.sampled_from([(0.09, 0.3), (0.3, 0.5), (0.05, 2.0)]))
def test_typical_kernel_equals_the_reference(parents, B, V, dtype, style, seed, params):
    par, tok, _, tp = draw_batch(seed, [parents] * B, V, DTYPES[dtype], style, False, distinct=True)
    uf = torch.tensor(np.random.default_rng(seed + 1).random(B))
    acc, nxt = typical(par, tok, tp, uf, *params, block=BLOCK)
    tape = {"final": [[float(u)] for u in uf]}
    kw = {"eps": params[0], "delta": params[1]}
    assert (unpad(acc), nxt.tolist()) == reference(ref_typical, par, tok, None, tp, tape, DTYPES[dtype], **kw)


@given(parents=parent_arrays(), V=st.sampled_from(VOCABS), seed=st.integers(0, 2**32 - 1))
def test_a_batch_of_different_trees_is_verified_row_by_row(parents, V, seed):
    # rows of one batch may hold different trees of the same size
    other = [-1] + [max(0, i - 1) for i in range(1, len(parents))]  # the chain of the same size
    par, tok, dp, tp = draw_batch(seed, [parents, other], V, torch.float32, "random", True, distinct=False)
    rng = np.random.default_rng(seed + 1)
    ua, uf = torch.tensor(rng.random((2, len(parents)))), torch.tensor(rng.random(2))
    acc, nxt = mss(par, tok, dp, tp, ua, uf, block=BLOCK)
    tape = {"accept": [r.tolist() for r in ua], "final": [[float(u)] for u in uf]}
    assert (unpad(acc), nxt.tolist()) == reference(ref_mss, par, tok, dp, tp, tape, torch.float32)


def SPLIT(V):  # small V: many tiny chunks per row; full-size V: the GPU's own chunk and block
    return {"path": "split", **({"chunk": 16, "block": 8} if V <= 1000 else {})}


SPLIT_VOCABS = [3, 13, 50] + ([32000] if FULL else [])
split_common = dict(common, V=st.sampled_from(SPLIT_VOCABS))


def split_rows(acc, nxt):
    return [(a, n) for a, n in zip(unpad(acc), nxt.tolist())]


@settings(max_examples=25)
@given(**split_common, sampled=st.booleans(), wor=st.booleans())
def test_split_multi_draft_agrees_with_the_reference(parents, B, V, dtype, style, seed, sampled, wor):
    # One launch per full-row pass; no scratch rows: the current laws after k rejections are
    # recomputed from p, q and the recorded masses. Masses are chunk sums, so a row may differ
    # only where the reference's run came within BOUNDARY of a coin or of a draw's partial sum.
    fn, ref = (rrs, ref_rrs) if wor else (mss, ref_mss)
    par, tok, dp, tp = draw_batch(seed, [parents] * B, V, DTYPES[dtype], style, sampled, distinct=wor)
    rng = np.random.default_rng(seed + 1)
    ua, uf = torch.tensor(rng.random((B, len(parents)))), torch.tensor(rng.random(B))
    acc, nxt = fn(par, tok, dp, tp, ua, uf, **SPLIT(V))
    assert (nxt >= 0).all(), "every row must finish within the launched passes"
    tape = {"accept": [r.tolist() for r in ua], "final": [[float(u)] for u in uf]}
    margins: list[float] = []
    want_acc, want_nxt = reference(ref, par, tok, dp, tp, tape, DTYPES[dtype], margins)
    split_agrees(split_rows(acc, nxt), list(zip(want_acc, want_nxt)), margins)


@settings(max_examples=25)
@given(**split_common, knobs=st.sampled_from([(1.0, 1.0), (0.3, 1.0), (0.25, 0.75)]))
def test_split_target_only_agrees_with_the_reference(parents, B, V, dtype, style, seed, knobs):
    # every chunk program replays the walk on gathered values (the reference's numbers), so
    # the path is exact; only the final draw's partial sums are grouped by chunks
    par, tok, _, tp = draw_batch(seed, [parents] * B, V, DTYPES[dtype], style, False, distinct=True)
    rng = np.random.default_rng(seed + 1)
    uc, uf = torch.tensor(rng.random((B, len(parents)))), torch.tensor(rng.random(B))
    acc, nxt = target_only(par, tok, tp, uc, uf, *knobs, **SPLIT(V))
    tape = {"coin": [r.tolist() for r in uc], "final": [[float(u)] for u in uf]}
    params = {"threshold_single": knobs[0], "threshold_acc": knobs[1]}
    margins: list[float] = []
    want_acc, want_nxt = reference(
        ref_target_only, par, tok, None, tp, tape, DTYPES[dtype], margins, **params
    )
    assert unpad(acc) == want_acc
    split_agrees(split_rows(acc, nxt), list(zip(want_acc, want_nxt)), margins)


@settings(max_examples=25)
@given(**split_common)
def test_split_greedy_equals_the_reference(parents, B, V, dtype, style, seed):
    # argmax per chunk, then the first chunk holding the maximum: exact, ties to the smallest id
    par, tok, _, tp = draw_batch(seed, [parents] * B, V, DTYPES[dtype], style, False, distinct=True)
    rng = np.random.default_rng(seed + 2)
    for b in range(B):
        for c in range(1, len(parents)):
            if rng.random() < 0.7:
                tok[b, c] = int(tp[b, parents[c]].double().argmax())
    acc, nxt = greedy(par, tok, tp, **SPLIT(V))
    assert (unpad(acc), nxt.tolist()) == reference(ref_greedy, par, tok, None, tp, {}, DTYPES[dtype])


def test_split_multi_draft_check_rejects_a_stale_draft_law():
    # The mutant: rrs's split path run as mss (the draft law keeps the rejected tokens), on
    # siblings drawn without replacement; the agreement check against rrs must flag it.
    parents = [-1, 0, 0, 0, 0]
    par, tok, dp, tp = draw_batch(2, [parents] * 6, 13, torch.float32, "random", True, distinct=True)
    ua = torch.full((6, 5), 0.97, dtype=torch.float64)  # reject often: the draft law matters
    uf = torch.tensor(np.random.default_rng(4).random(6))
    tape = {"accept": [r.tolist() for r in ua], "final": [[float(u)] for u in uf]}
    margins: list[float] = []
    want = list(zip(*reference(ref_rrs, par, tok, dp, tp, tape, torch.float32, margins)))
    split_agrees(split_rows(*rrs(par, tok, dp, tp, ua, uf, path="split", chunk=16, block=8)), want, margins)
    with pytest.raises(AssertionError):
        split_agrees(
            split_rows(*mss(par, tok, dp, tp, ua, uf, path="split", chunk=16, block=8)), want, margins
        )


def _tree_inputs():
    par, tok, dp, tp = draw_batch(0, [[-1, 0, 0, 1]] * 2, 5, torch.float32, "random", True, distinct=True)
    return (
        par,
        tok,
        dp,
        tp,
        torch.full((2, 4), 0.5, dtype=torch.float64),
        torch.full((2,), 0.5, dtype=torch.float64),
    )


def _bad_tree(case):
    par, tok, dp, tp, ua, uf = _tree_inputs()
    if case == "root":
        par[1, 0] = 0
    elif case == "cycle":
        par[1] = torch.tensor([-1, 2, 1, 1])
    elif case == "forward":
        par[0] = torch.tensor([-1, 0, 3, 0])
    elif case == "token":
        tok[1, 3] = 9
    elif case == "zero_draft":
        dp[0, 1] = torch.tensor([0.0, 0.25, 0.25, 0.25, 0.25])
        tok[0, 3] = 0
    elif case == "shape":
        tok = tok[:, :3]
    elif case == "uniform":
        ua = ua[:, :3]
    return par, tok, dp, tp, ua, uf


@pytest.mark.parametrize(
    ("case", "error", "argument"),
    [
        ("root", RootError, "parents[1][0]"),
        ("cycle", CycleError, "parents[1][1]"),
        ("forward", ForwardParentError, "parents[0][2]"),
        ("token", TokenOutOfRangeError, "tokens[1, 3]"),
        ("zero_draft", ZeroDraftProbabilityError, "draft_probs[0, 1, 0]"),
        ("shape", ShapeError, "tokens"),
        ("uniform", ShapeError, "u_accept"),
    ],
)
def test_malformed_trees_raise_the_reference_errors_before_any_launch(monkeypatch, case, error, argument):
    class NoLaunch:
        def __getitem__(self, grid):
            raise AssertionError("the kernel was launched on malformed input")

    monkeypatch.setattr(importlib.import_module("specproof.optimized.mss"), "multi_draft_kernel", NoLaunch())
    with pytest.raises(error) as e:
        mss(*_bad_tree(case))
    assert e.value.argument == argument
    # the reference names the same problem on the same row
    par, tok, dp, tp, _, _ = _bad_tree(case)
    if case not in ("shape", "uniform"):
        b = 0 if case in ("forward", "zero_draft") else 1
        with pytest.raises(error):
            make_step(
                par[b].tolist(), tok[b].tolist(), [r.tolist() for r in dp[b]], [r.tolist() for r in tp[b]]
            )


def test_leaf_draft_rows_are_not_read_so_they_need_not_be_laws():
    par, tok, dp, tp, ua, uf = _tree_inputs()
    dp[:, 2:] = 0  # nodes 2 and 3 are leaves
    mss(par, tok, dp, tp, ua, uf)
