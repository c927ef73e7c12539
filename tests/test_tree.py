"""Tree invariants: masks, positions, leaf paths, KV commit, and malformed parents."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specproof.properties.oracle import strategies as sps
from specproof.reference import errors as E
from specproof.reference.tree import DraftTree, validate_parents


@given(sps.trees(max_nodes=12, max_depth=5))
def test_mask_row_is_exactly_ancestors_and_self(parents):
    t = DraftTree(parents)
    mask = t.attention_mask()
    for i in range(t.n):
        anc = set()
        j = i
        while j != -1:
            anc.add(j)
            j = parents[j]
        assert {j for j in range(t.n) if mask[i][j]} == anc


@given(sps.trees(kind="branching", max_nodes=12, max_depth=5))
def test_sibling_branches_never_see_each_other(parents):
    t = DraftTree(parents)
    mask = t.attention_mask()
    for v in range(t.n):
        kids = t.children[v]
        for a in kids:
            for b in kids:
                if a == b:
                    continue
                # nothing in a's subtree sees anything in b's subtree
                for x in range(t.n):
                    if a in t.ancestors(x):
                        for y in range(t.n):
                            if b in t.ancestors(y):
                                assert not mask[x][y]


@given(sps.trees(max_nodes=12, max_depth=5), st.integers(0, 1000))
def test_position_ids_are_prefix_plus_depth(parents, prefix_len):
    t = DraftTree(parents)
    pos = t.position_ids(prefix_len)
    for i in range(t.n):
        assert pos[i] == prefix_len + len(t.ancestors(i)) - 1
    for v in range(t.n):  # siblings share a position
        assert len({pos[c] for c in t.children[v]}) <= 1


@given(sps.trees(max_nodes=12, max_depth=5))
def test_every_leaf_path_is_a_root_path(parents):
    t = DraftTree(parents)
    paths = t.leaf_paths()
    assert len(paths) == len(t.leaves())
    for row in paths:
        assert len(row) == t.max_depth + 1
        nodes = [x for x in row if x != -1]
        assert row[: len(nodes)] == tuple(nodes)  # padding only at the end
        assert t.is_root_path(nodes) and not t.children[nodes[-1]]
    covered = {x for row in paths for x in row if x != -1}
    assert covered == set(range(t.n))


@given(sps.trees(max_nodes=12, max_depth=5), st.integers(0, 50), st.data())
def test_kv_commit_keeps_exactly_the_accepted_path(parents, prefix_len, data):
    t = DraftTree(parents)
    end = data.draw(st.integers(0, t.n - 1))
    path = t.ancestors(end)
    cache = list(range(prefix_len)) + [f"node{i}" for i in range(t.n)]
    moves, new_len = t.kv_commit_plan(path, prefix_len)
    for src, dst in moves:  # in place, increasing destination
        cache[dst] = cache[src]
    assert cache[:new_len] == list(range(prefix_len)) + [f"node{i}" for i in path]


def test_kv_commit_rejects_a_path_that_is_not_a_root_path():
    t = DraftTree([-1, 0, 0, 1])
    with pytest.raises(ValueError, match="not a root path"):
        t.kv_commit_plan([0, 2, 3], 5)


def test_chains_are_trees():
    t = DraftTree.chain(3)
    assert t.parents == (-1, 0, 1, 2) and t.is_chain and t.leaf_paths() == ((0, 1, 2, 3),)
    assert t.position_ids(10) == (10, 11, 12, 13)


@pytest.mark.parametrize(
    "parents, exc, where",
    [
        ([], E.EmptyTreeError, "parents"),
        ([0, 0], E.RootError, "parents[0]"),
        ([-1, 0, -1], E.MultipleRootsError, "parents[2]"),
        ([-1, 5], E.ParentOutOfRangeError, "parents[1]"),
        ([-1, -2], E.ParentOutOfRangeError, "parents[1]"),
        ([-1, 1], E.CycleError, "parents[1]"),
        ([-1, 2, 3, 1], E.CycleError, "parents[1]"),
        ([-1, 2, 0], E.ForwardParentError, "parents[1]"),
        ([-1, 0.5], E.DTypeError, "parents[1]"),
        ("abc", E.ShapeError, "parents"),
    ],
)
def test_malformed_parents_raise_the_specific_error(parents, exc, where):
    with pytest.raises(exc) as info:
        validate_parents(parents)
    assert info.value.argument == where
    assert isinstance(info.value, E.SpecproofInputError)


def test_a_long_cycle_is_found_without_hanging():
    n = 2000
    parents = [-1] + [i + 1 for i in range(1, n - 1)] + [1]  # 1 -> 2 -> ... -> n-1 -> 1
    with pytest.raises(E.CycleError):
        validate_parents(parents)
