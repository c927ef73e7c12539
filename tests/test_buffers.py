"""The tree-builder contract (properties/conformance/buffers.py): the checks, exactly, and their mutants.

The reference's and the Triton engine's builders equal the reference on every battery tree; a
causal mask, flattened position ids (the node's index), a dropped leaf, a wrong shape, an
exception and a non-tensor are each caught and named. The adapters' translations of
Medusa-1's dense trees and EAGLE's choices lists are checked without the packages (they are
pure functions); the packages themselves: tests/test_thirdparty.py.
"""

from __future__ import annotations

import pytest
import torch

from specproof.properties.conformance.backends.thirdparty.eagle import choices_of
from specproof.properties.conformance.backends.thirdparty.medusa import medusa_choices
from specproof.properties.conformance.buffers import (
    EAGLE_MC_SIM_7B_63,
    MEDUSA_MC_SIM_7B_63,
    TreeBuffers,
    Unsupported,
    battery,
    builtin_builders,
    conform,
    reference_builder,
)
from specproof.reference.proposers.medusa import choices_to_shape
from specproof.reference.tree import DraftTree


@pytest.mark.parametrize("name", sorted(builtin_builders()))
def test_builtin_builders_equal_the_reference_on_every_tree(name):
    res = conform(name, builtin_builders()[name])
    assert res.verdict == "pass", res.summary()
    assert res.checked == len(battery())


def _mutant(change):
    def build(parents):
        out = reference_builder(parents)
        change(out, DraftTree(parents))
        return out

    return build


def _causal(out, tree):
    out.attention_mask = torch.ones(tree.n, tree.n, dtype=torch.bool).tril()


def _flat_positions(out, tree):
    out.position_ids = torch.arange(tree.n)


def _drop_leaf(out, tree):
    out.leaf_paths = out.leaf_paths[:-1]


def _bad_shape(out, tree):
    out.attention_mask = out.attention_mask[:, :-1]


def _not_a_tensor(out, tree):
    out.position_ids = "depths"


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        (_causal, "mask"),
        (_flat_positions, "positions"),
        (_drop_leaf, "leaf_paths"),
        (_bad_shape, "shape"),
        (_not_a_tensor, "type"),
    ],
)
def test_mutant_builders_are_caught_and_named(change, kind):
    res = conform("mutant", _mutant(change))
    assert res.verdict == "contract_violation"
    kinds = {o.status for o in res.outcomes}
    assert kind in kinds, res.summary()
    assert "pass" in kinds or kind in ("shape", "type", "leaf_paths")  # trivial trees may still pass


def test_raising_and_unsupported_builders():
    def boom(parents):
        raise RuntimeError("no")

    def picky(parents):
        if len(parents) > 3:
            raise Unsupported("small trees only")
        return reference_builder(parents)

    assert conform("boom", boom).verdict == "contract_violation"
    res = conform("picky", picky)
    assert res.verdict == "pass" and 0 < res.checked < len(battery())
    assert "not expressible" in res.summary()
    none = conform("none", lambda p: (_ for _ in ()).throw(Unsupported("never")))
    assert none.verdict == "not_applicable" and none.checked == 0
    bad = conform("tuple", lambda p: (1, 2, 3))
    assert {o.status for o in bad.outcomes} == {"type"}


def test_published_choices_lists_are_trees():
    medusa = DraftTree(choices_to_shape(MEDUSA_MC_SIM_7B_63))
    eagle = DraftTree(choices_to_shape(EAGLE_MC_SIM_7B_63))
    assert (medusa.n, medusa.max_depth) == (64, 4)
    assert (eagle.n, eagle.max_depth) == (26, 5)


def test_medusa_dense_trees_translate_and_others_are_unsupported():
    assert medusa_choices((-1,)) == [1]
    assert medusa_choices((-1, 0, 0, 1, 1, 2, 2)) == [1, 2, 2]
    with pytest.raises(Unsupported):
        medusa_choices((-1, 0, 0, 1))  # node 2 has no children but node 1 does
    with pytest.raises(Unsupported):
        medusa_choices((-1, 0, 0, 2, 2, 1, 1))  # siblings together, but level order broken


def test_eagle_choices_round_trip():
    shape = choices_to_shape(EAGLE_MC_SIM_7B_63)
    choices, ids = choices_of(shape)
    assert sorted(choices) == sorted(EAGLE_MC_SIM_7B_63)
    assert sorted(ids) == list(range(len(shape)))
    with pytest.raises(Unsupported, match="ranks"):
        choices_of((-1,) + (0,) * 11)


def test_treebuffers_from_lists_are_accepted():
    parents = (-1, 0, 0, 1)
    tree = DraftTree(parents)
    out = TreeBuffers(
        [list(r) for r in tree.attention_mask()], list(tree.depth), [list(p) for p in tree.leaf_paths()]
    )
    assert conform("lists", lambda p: out if p == parents else reference_builder(p)).verdict == "pass"


def test_conform_command_on_the_builtin_builders(tmp_path):
    import json

    from specproof.properties.cli import main

    js, md = tmp_path / "c.json", tmp_path / "c.md"
    args = [
        "conform",
        "reference.tree_buffers",
        "optimized.tree_buffers",
        "--json",
        str(js),
        "--markdown",
        str(md),
    ]
    assert main(args) == 0
    report = json.loads(js.read_text())
    assert [r["backend"] for r in report["rows"]] == ["reference.tree_buffers", "optimized.tree_buffers"]
    assert all(r["verdict"] == "pass" for r in report["rows"]) and report["verdict"] == "pass"
    assert "torch" in report["versions"] and report["date"]
    assert "| backend | process | expected | verdict |" in md.read_text()
    assert main(["conform", "no.such.backend"]) == 4  # usage errors exit 4
    assert main(["conform", "--budget-seconds", "0"]) == 4
