"""The tiny transformer target: tree attention and KV commit against plain causal forwards.

For hypothesis-drawn trees (up to 9 nodes, any shape) and prefixes (0 to 5 tokens), one forward
over the flattened tree must give, for every node, the logits and every layer's hidden state of
the ordinary causal forward over the prefix and that node's root path (float64, within 1e-10).
After accepting a root path and committing the cache, the next forward must equal the one on a
cache rebuilt from scratch from the committed tokens. Four mutants of the tree forward (a causal
mask over the flattened order, flattened position ids, positions off by one, a rejected branch's
KV kept in the cache) must each fail these comparisons on the fixed instance below.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specproof.reference.errors import ShapeError, TokenOutOfRangeError
from specproof.reference.transformer import Config, KVCache, TinyTransformer
from specproof.reference.tree import DraftTree

MODEL = TinyTransformer(Config(vocab=16, width=16, layers=2, heads=2, mlp=32), seed=1)
TOL = 1e-10


@st.composite
def tree_cases(draw):
    n = draw(st.integers(1, 9))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = draw(st.lists(st.integers(0, 15), min_size=n, max_size=n))
    prefix = draw(st.lists(st.integers(0, 15), min_size=0, max_size=5))
    return DraftTree(parents), torch.tensor(tokens), torch.tensor(prefix, dtype=torch.long)


def prefix_cache(prefix: torch.Tensor) -> KVCache:
    cache = KVCache()
    if len(prefix):
        MODEL.forward(prefix, cache)
    return cache


def path_forward(prefix, tree, tokens, node):
    cache = prefix_cache(prefix)
    path = list(tree.ancestors(node))
    logits, hidden = MODEL.forward(tokens[path], cache)
    return logits[-1], [h[-1] for h in hidden]


def close(a, b):
    return float((a - b).abs().max()) <= TOL


@settings(max_examples=40)
@given(case=tree_cases())
def test_tree_forward_equals_the_causal_forward_over_each_root_path(case):
    tree, tokens, prefix = case
    logits, hidden = MODEL.forward_tree(tree, tokens, prefix_cache(prefix))
    for i in range(tree.n):
        want_logits, want_hidden = path_forward(prefix, tree, tokens, i)
        assert close(logits[i], want_logits), i
        assert all(close(h[i], w) for h, w in zip(hidden, want_hidden)), i


@settings(max_examples=40)
@given(case=tree_cases(), pick=st.randoms(use_true_random=False), nxt=st.integers(0, 15))
def test_committed_cache_continues_like_a_rebuilt_one(case, pick, nxt):
    tree, tokens, prefix = case
    cache = prefix_cache(prefix)
    MODEL.forward_tree(tree, tokens, cache)
    path, node = [0], 0
    while tree.children[node] and pick.random() < 0.8:
        node = pick.choice(tree.children[node])
        path.append(node)
    cache.commit(tree, tuple(path), len(prefix))
    rebuilt = prefix_cache(torch.cat([prefix, tokens[path]]))
    assert len(cache) == len(rebuilt) == len(prefix) + len(path)
    for a, b in zip(cache.keys + cache.values, rebuilt.keys + rebuilt.values):
        assert close(a, b)
    got, _ = MODEL.forward(torch.tensor([nxt]), cache)
    want, _ = MODEL.forward(torch.tensor([nxt]), rebuilt)
    assert close(got, want)


# the fixed instance for the mutants: a branching tree, a prefix, accept the second branch
TREE = DraftTree([-1, 0, 0, 1, 2, 2])
TOKENS = torch.tensor([3, 7, 1, 4, 9, 12])
PREFIX = torch.tensor([5, 2, 11])


def _mutant_tree_forward(kind: str):
    cache = prefix_cache(PREFIX)
    depth = torch.tensor(TREE.depth)
    mask = torch.tensor(TREE.attention_mask(), dtype=torch.bool)
    positions = len(cache) + depth
    if kind == "causal_mask":
        mask = torch.ones(TREE.n, TREE.n, dtype=torch.bool).tril()
    elif kind == "flattened_positions":
        positions = len(cache) + torch.arange(TREE.n)
    elif kind == "positions_off_by_one":
        positions = positions + 1
    return MODEL._run(TOKENS, cache, positions, mask), cache


@pytest.mark.parametrize("kind", ["causal_mask", "flattened_positions", "positions_off_by_one"])
def test_tree_forward_mutants_fail(kind):
    (logits, _), _ = _mutant_tree_forward(kind)
    diffs = [float((logits[i] - path_forward(PREFIX, TREE, TOKENS, i)[0]).abs().max()) for i in range(TREE.n)]
    assert max(diffs) > 1e-3, diffs


def test_keeping_a_rejected_branch_kv_fails_the_continuation():
    cache = prefix_cache(PREFIX)
    MODEL.forward_tree(TREE, TOKENS, cache)
    path = (0, 2, 4)
    # the mutant: no compaction, the whole tree's KV (rejected nodes 1, 3, 5 too) stays
    got, _ = MODEL.forward(torch.tensor([6]), cache)
    want, _ = MODEL.forward(torch.tensor([6]), prefix_cache(torch.cat([PREFIX, TOKENS[list(path)]])))
    assert float((got - want).abs().max()) > 1e-3
    # and the correct commit passes on the same instance
    cache = prefix_cache(PREFIX)
    MODEL.forward_tree(TREE, TOKENS, cache)
    cache.commit(TREE, path, len(PREFIX))
    got, _ = MODEL.forward(torch.tensor([6]), cache)
    assert close(got, want)


def test_bad_tokens_raise_specific_errors():
    with pytest.raises(TokenOutOfRangeError):
        MODEL.forward(torch.tensor([1, 16]), KVCache())
    with pytest.raises(ShapeError):
        MODEL.forward_tree(TREE, TOKENS[:3], KVCache())
    with pytest.raises(ShapeError):
        MODEL.forward(torch.tensor([[1, 2]]), KVCache())


def test_every_layers_hidden_state_is_exposed_and_logits_are_tied_to_the_embedding():
    logits, hidden = MODEL.forward(torch.tensor([1, 2, 3]), KVCache())
    assert logits.shape == (3, 16) and len(hidden) == MODEL.config.layers + 1
    assert all(h.shape == (3, 16) for h in hidden)
    probs = MODEL.next_token_probs(logits)
    assert torch.allclose(probs.sum(-1), torch.ones(3, dtype=torch.float64))
    assert MODEL.next_token_probs(logits, 0.0).sum(-1).tolist() == [1.0, 1.0, 1.0]
