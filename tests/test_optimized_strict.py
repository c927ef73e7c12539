"""The strict rule's kernel against the reference (Triton interpreter).

Fed the same uniforms (``u_y[b, v]`` for site ``("y", v)``), the kernel returns the reference's
accepted path and next token on hypothesis-drawn batches: trees up to 12 nodes of any shape,
V from 2 to 50 with blocks of 16 so rows span several blocks, float32 / float16 / bfloat16 laws
with ties, zeros, one-hot and tiny masses, drafts that are and are not the target's likely
tokens, uniforms at 0 and just below 1. Malformed input raises the reference's exception before
any launch. The comparison is sensitive to the tape layout: the kernel fed node 0's uniform at
every node (a stale site index) returns other tokens on deep walks, and the test sees it.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from optimized_helpers import DTYPES, STYLES, laws

from specproof.optimized.strict import strict, strict_verifier
from specproof.reference import RULES, TapeReader, make_step
from specproof.reference.errors import CycleError, NotNormalizedError, ShapeError
from specproof.reference.validate import tolerance

strict_module = importlib.import_module("specproof.optimized.strict")


@st.composite
def batches(draw):
    n = draw(st.integers(1, 12))
    B = draw(st.integers(1, 3))
    parents = [[-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)] for _ in range(B)]
    V = draw(st.sampled_from([2, 3, 5, 7, 13, 33, 50]))
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    style = draw(st.sampled_from(STYLES))
    seed = draw(st.integers(0, 2**32 - 1))
    edge = draw(st.sampled_from([None, 0.0, 1 - 2**-53]))
    return parents, V, DTYPES[dtype], style, seed, edge


def inputs(parents, V, dtype, style, seed, edge):
    rng = np.random.default_rng(seed)
    B, N = len(parents), len(parents[0])
    tp = laws(rng, (B, N, V), dtype, style)
    # half the drafts are the target's argmax at their parent, so walks go deep
    tokens = torch.tensor(rng.integers(0, V, (B, N)))
    for b in range(B):
        for c in range(1, N):
            if rng.random() < 0.5:
                tokens[b, c] = int(tp[b, parents[b][c]].float().argmax())
    u = torch.tensor(rng.random((B, N))) if edge is None else torch.full((B, N), edge, dtype=torch.float64)
    return torch.tensor(parents), tokens, tp, u


def reference(parents, tokens, tp, u, dtype):
    out = []
    for b in range(len(parents)):
        step = make_step(
            parents[b].tolist(),
            tokens[b].tolist(),
            None,
            [r.tolist() for r in tp[b].double()],
            tol=tolerance(dtype, tp.shape[-1]),
        )
        oc = RULES["strict"](TapeReader({"y": u[b].tolist()}), step)
        out.append((list(oc.accepted), oc.next_token))
    return out


def unpad(acc, nxt):
    return [([a for a in row if a >= 0], int(x)) for row, x in zip(acc.tolist(), nxt.tolist())]


@settings(max_examples=40)
@given(case=batches())
def test_strict_kernel_equals_the_reference(case):
    parents, V, dtype, style, seed, edge = case
    par, tok, tp, u = inputs(parents, V, dtype, style, seed, edge)
    assert unpad(*strict(par, tok, tp, u, block=16)) == reference(par, tok, tp, u, dtype)


def test_a_stale_site_index_is_caught():
    # node 0's uniform read at every node (a stale index): the comparison rejects it
    par, tok, tp, u = inputs([[-1, 0, 1, 2, 3]] * 3, 5, torch.float32, "random", 3, None)
    for b in range(3):  # a chain of the target's argmax tokens: every walk goes deep
        for c in range(1, 5):
            tok[b, c] = int(tp[b, c - 1].argmax())
    want = reference(par, tok, tp, u, torch.float32)
    stale = torch.stack([u[:, 0]] * 5, 1)
    assert unpad(*strict(par, tok, tp, u)) == want
    assert unpad(*strict(par, tok, tp, stale)) != want


def test_malformed_input_raises_before_any_launch(monkeypatch):
    class NoLaunch:
        def __getitem__(self, grid):
            raise AssertionError("launched on malformed input")

    monkeypatch.setattr(strict_module, "strict_tree_kernel", NoLaunch())
    par, tok, tp, u = inputs([[-1, 0, 0]], 4, torch.float32, "random", 0, None)
    with pytest.raises(CycleError):
        strict(torch.tensor([[-1, 2, 1]]), tok, tp, u)
    bad = tp.clone()
    bad[0, 1] *= 0.5
    with pytest.raises(NotNormalizedError):
        strict(par, tok, bad, u)
    with pytest.raises(ShapeError, match="u_y"):
        strict(par, tok, tp, u[:, :2])


def test_the_verifier_meets_the_tree_contract():
    par, tok, tp, _ = inputs([[-1, 0, 0, 1]] * 2, 6, torch.float32, "ties", 1, None)
    a = strict_verifier(par, tok, None, tp, torch.Generator().manual_seed(0))
    b = strict_verifier(par, tok, None, tp, torch.Generator().manual_seed(0))
    assert unpad(*a) == unpad(*b)
