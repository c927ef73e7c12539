"""Contract checks: every kind of malformed verifier output is named, and the audit exits 2."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from specproof.properties.cli import main
from specproof.properties.conformance.contracts import (
    ContractViolation,
    check_chain_output,
    check_tree_output,
)

DRAFTS = torch.tensor([[1, 2], [3, 0]])


@pytest.mark.parametrize(
    ("out", "kind"),
    [
        ([[1, 2, 3], [3, 0, 1]], "type"),
        (torch.zeros(2, 2, dtype=torch.int64), "shape"),
        (torch.zeros(2, 3), "dtype"),
        (torch.tensor([[1, -1, 2], [3, 0, 1]]), "padding"),
        (torch.tensor([[-1, -1, -1], [3, 0, 1]]), "padding"),
        (torch.tensor([[1, -2, -1], [3, 0, 1]]), "padding"),
        (torch.tensor([[1, 2, 5], [3, 0, 1]]), "token_range"),
        (torch.tensor([[2, 2, -1], [3, 0, 1]]), "not_draft"),
    ],
)
def test_chain_output_violations_are_named(out, kind):
    with pytest.raises(ContractViolation) as e:
        check_chain_output(out, DRAFTS, vocab=5)
    assert e.value.kind == kind


def test_chain_output_valid_rows_give_emitted_lengths():
    tokens, lengths = check_chain_output(torch.tensor([[1, 4, -1], [3, 0, 2]]), DRAFTS, vocab=5)
    assert lengths.tolist() == [2, 3]
    assert tokens[0].tolist() == [1, 4, -1]


PARENTS = torch.tensor([[-1, 0, 0, 1]])
TOKENS = torch.tensor([[0, 2, 3, 1]])


@pytest.mark.parametrize(
    ("acc", "nxt", "kind"),
    [
        ([[1, -1, -1, -1]], [0], "not_root_path"),
        ([[0, 3, -1, -1]], [0], "not_root_path"),
        ([[0, 1, 2, -1]], [0], "not_root_path"),
        ([[0, 9, -1, -1]], [0], "not_root_path"),
        ([[0, -1, 1, -1]], [0], "padding"),
        ([[0, 1, -1, -1]], [7], "token_range"),
        ([[0, 1, -1]], [1], "shape"),
    ],
)
def test_tree_output_violations_are_named(acc, nxt, kind):
    with pytest.raises(ContractViolation) as e:
        check_tree_output((torch.tensor(acc), torch.tensor(nxt)), PARENTS, TOKENS, vocab=5)
    assert e.value.kind == kind


def test_tree_output_emits_path_tokens_then_next():
    emitted, lengths = check_tree_output(
        (torch.tensor([[0, 1, 3, -1]]), torch.tensor([4])), PARENTS, TOKENS, vocab=5
    )
    assert lengths.tolist() == [3]
    assert emitted[0].tolist() == [2, 1, 4, -1]


BAD_VERIFIERS = textwrap.dedent(
    """
    import torch

    def _ok(d, dp, tp, g):
        B, K = d.shape
        out = torch.full((B, K + 1), -1, dtype=torch.int64)
        out[:, 0] = torch.multinomial(tp[:, 0], 1, generator=g).squeeze(1)
        return out

    def wrong_shape(d, dp, tp, g):
        return _ok(d, dp, tp, g)[:, :-1]

    def float_ids(d, dp, tp, g):
        return _ok(d, dp, tp, g).float()

    def holes(d, dp, tp, g):
        out = _ok(d, dp, tp, g)
        out[:, -1] = out[:, 0]
        out[:, 0] = -1
        return out

    def out_of_range(d, dp, tp, g):
        out = _ok(d, dp, tp, g)
        out[:, 0] = tp.shape[-1]
        return out

    def raises(d, dp, tp, g):
        raise RuntimeError("kernel exploded")

    def global_rng(d, dp, tp, g):
        return _ok(d, dp, tp, None)

    def tree_not_path(parents, tokens, dp, tp, g):
        B, N = parents.shape
        acc = torch.full((B, N), -1, dtype=torch.int64)
        acc[:, 0] = 0
        acc[:, 1] = N - 1  # a leaf of depth 2 in a binary tree: not a child of the root
        return acc, torch.zeros(B, dtype=torch.int64)
    """
)


@pytest.mark.parametrize(
    ("fn", "kind"),
    [
        ("wrong_shape", "shape"),
        ("float_ids", "dtype"),
        ("holes", "padding"),
        ("out_of_range", "token_range"),
        ("raises", "raised"),
        ("global_rng", "nondeterministic"),
    ],
)
def test_audit_exits_2_and_names_the_violation(tmp_path, capsys, fn, kind):
    path = tmp_path / "bad.py"
    path.write_text(BAD_VERIFIERS)
    out = tmp_path / "v.json"
    code = main(["audit", "chain", f"{path}:{fn}", "--json", str(out), "--progress", "off"])
    assert code == 2
    verdict = json.loads(out.read_text())
    assert verdict["verdict"] == "contract_violation"
    assert verdict["violation"]["kind"] == kind
    assert kind in capsys.readouterr().out


def test_tree_audit_flags_a_non_path(tmp_path, capsys):
    path = tmp_path / "bad.py"
    path.write_text(BAD_VERIFIERS)
    code = main(["audit", "tree", f"{path}:tree_not_path", "--process", "iid_siblings", "--progress", "off"])
    assert code == 2
    assert "not_root_path" in capsys.readouterr().out
