"""pytest-benchmark suite (``tox -e bench``): the optimized engine, batched PyTorch and the
reference on the same inputs, grouped so pytest-benchmark prints them side by side. Nothing
here asserts a speed; the default test run does not collect this directory."""

from __future__ import annotations

import pytest
import torch

from specproof.properties.bench.kernels import chain_inputs, tree_inputs
from specproof.properties.conformance.backends import REGISTRY

FULL = torch.cuda.is_available()
CHAIN = (64, 8, 32000) if FULL else (8, 4, 128)
TREE = [-1, 0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("engine", ["torch", "optimized", "reference"])
@pytest.mark.parametrize("rule", ["token", "block"])
def test_chain(benchmark, rule, engine):
    benchmark.group = f"chain {rule} B,K,V={CHAIN}"
    x, dp, tp = chain_inputs(*CHAIN)
    fn = REGISTRY[("chain", f"{engine}.{rule}")].fn
    g = torch.Generator().manual_seed(0)
    out = benchmark.pedantic(
        fn, args=(x, dp, tp, g), rounds=3 if engine == "reference" else 10, warmup_rounds=1
    )
    assert out.shape == (CHAIN[0], CHAIN[1] + 1)


@pytest.mark.parametrize("engine", ["optimized", "reference"])
@pytest.mark.parametrize("rule", ["mss", "rrs", "target_only", "greedy", "typical"])
def test_tree(benchmark, rule, engine):
    B, V = (64, 32000) if FULL else (8, 128)
    benchmark.group = f"tree {rule} B={B} N={len(TREE)} V={V}"
    par, tok, dp, tp = tree_inputs(B, TREE, V)
    fn = REGISTRY[("tree", f"{engine}.{rule}")].fn
    g = torch.Generator().manual_seed(0)
    acc, nxt = benchmark.pedantic(fn, args=(par, tok, dp, tp, g), rounds=3, warmup_rounds=1)
    assert acc.shape == (B, len(TREE)) and nxt.shape == (B,)
