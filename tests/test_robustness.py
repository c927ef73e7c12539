"""The robustness battery (properties/audit/robustness.py): malformed inputs in a forked child.

Deterministic (no statistics): each malformed input is classified as raised, returned, hung or
crashed, and the verdict is ``robust`` only when every malformed input is refused (the two valid
edge inputs may also return a valid output).
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from specproof.properties.audit.robustness import malformed, robustness
from specproof.properties.cli import main
from specproof.properties.conformance.backends import REGISTRY, Backend
from specproof.properties.conformance.backends.torch_chain import token_chain


@pytest.mark.parametrize(
    ("kind", "name"), [("chain", "reference.token"), ("chain", "torch.token"), ("tree", "reference.mss")]
)
def test_the_project_backends_refuse_every_malformed_input(kind, name):
    result = robustness(REGISTRY[(kind, name)])
    assert result.verdict == "robust", result.summary()
    raised = [o for o in result.outcomes if o.status == "raised"]
    assert all(o.names_argument for o in raised), result.summary()  # each message names its argument
    if kind == "tree":
        assert {"cyclic_parents", "forward_parent", "self_parent"} <= {o.name for o in raised}


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("tree", "optimized.greedy"),
        ("tree", "optimized.strict"),
        ("tree", "optimized.target_only"),
        ("chain", "optimized.typical"),
    ],
)
def test_optimized_rules_that_never_read_q_still_refuse_a_malformed_draft_law(kind, name):
    # their kernels take no draft laws; the reference refuses a NaN row or a zero-probability
    # draft all the same, and so must the optimized contract (robustness found the gap)
    result = robustness(REGISTRY[(kind, name)])
    by = {o.name: o for o in result.outcomes}
    assert by["nan_draft_row"].status == "raised" and by["nan_draft_row"].names_argument, result.summary()
    assert by["zero_draft_probability"].status == "raised", result.summary()
    assert result.verdict == "robust", result.summary()


def _silent(d, dp, tp, g):
    """Validates nothing: emits the argmax of the first target row, NaN or not."""
    import torch

    B, K = d.shape
    out = torch.full((B, K + 1), -1, dtype=torch.int64)
    out[:, 0] = tp[:, 0].nan_to_num(0).argmax(dim=1)
    return out


def _hangs_on_nan(d, dp, tp, g):
    if bool(tp.isnan().any()):
        threading.Event().wait()
    return token_chain(d, dp, tp, g)


def _crashes_on_nan(d, dp, tp, g):
    if bool(tp.isnan().any()):
        os.abort()
    return token_chain(d, dp, tp, g)


def test_silent_hung_and_crashed_are_told_apart():
    silent = robustness(Backend("silent", "chain", _silent, ("iid_chain",)))
    by = {o.name: o for o in silent.outcomes}
    assert silent.verdict == "fragile"
    assert by["nan_target_row"].status == "returned" and "output_token_ids" in by["nan_target_row"].detail
    hung = robustness(Backend("hangs", "chain", _hangs_on_nan, ("iid_chain",)), timeout=3)
    by = {o.name: o for o in hung.outcomes}
    assert by["nan_target_row"].status == "hung" and by["inf_target"].status == "raised"  # it goes on
    crashed = robustness(Backend("aborts", "chain", _crashes_on_nan, ("iid_chain",)))
    by = {o.name: o for o in crashed.outcomes}
    assert by["nan_target_row"].status == "crashed" and "SIGABRT" in by["nan_target_row"].detail
    assert by["negative_target"].status == "raised"  # a fresh child took over after the crash


def test_every_input_is_malformed_in_the_way_it_says():
    names = {m.name for m in malformed("tree", "iid_siblings")}
    assert {"cyclic_parents", "forward_parent", "self_parent", "one_node_tree", "nan_target_row"} <= names
    chain = {m.name: m for m in malformed("chain", "onehot_chain")}
    assert "nan_draft_row" not in chain  # one-hot drafts have no draft laws to corrupt
    assert chain["no_drafts"].edge and chain["no_drafts"].args[0].shape[1] == 0


@pytest.mark.slow
def test_the_robustness_command_writes_its_table(tmp_path, capsys):
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    code = main(["robustness", "chain", "torch.token", "--markdown", str(md), "--json", str(js)])
    assert code == 0
    assert "| torch.token | robust |" in md.read_text()
    assert json.loads(js.read_text())[0]["verdict"] == "robust"
    assert main(["audit", "chain", "torch.token", "--tv", "0.2", "--no-probes", "--robustness"]) == 0
    assert "robustness of torch.token (chain): ROBUST" in capsys.readouterr().out
