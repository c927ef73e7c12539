"""The oracle itself: its laws are laws, it has power against real bug classes, greedy mode,
and the command that prints the matrix."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given, settings

from specproof.properties.cli import main
from specproof.properties.oracle import strategies as sps
from specproof.properties.oracle.exact import Instance, check, emitted_law
from specproof.reference.laws import acceptance, normalize, onehot, positive_part
from specproof.reference.models import greedy_sequence
from specproof.reference.processes import PROCESSES
from specproof.reference.rules import RULES, Rule
from specproof.reference.step import Outcome

INST = Instance(
    vocab=3,
    shape=(-1, 0, 1),
    target_styles=("random", "sparse"),
    draft_styles=("peaked",),
    overlap=Fraction(1, 3),
    prefix=(1,),
)


@given(sps.instances("iid_siblings"))
@settings(max_examples=10)
def test_emitted_law_is_a_probability_law(instance):
    law = emitted_law(RULES["mss"], PROCESSES["iid_siblings"], instance)
    assert sum(law.values()) == 1
    assert all(1 <= len(e) <= instance.horizon for e in law)


def _token_resampling_from_p(ch, step):
    """Bug class: the recovered token is drawn from p instead of norm((p - q)+)."""
    path, node = [0], 0
    while step.tree.children[node]:
        c = step.tree.children[node][0]
        x, p = step.tokens[c], step.target_probs[node]
        q = step.draft_probs[node] or onehot(x, step.vocab, p[0])
        if not ch.bernoulli(acceptance(p[x], q[x]), ("accept", c)):
            return Outcome(tuple(path), ch.categorical(p, ("final", 0)))
        path.append(c)
        node = c
    return Outcome(tuple(path), ch.categorical(step.target_probs[node], ("final", 0)))


def _block_tokenwise(ch, step):
    K = step.tree.n - 1
    P, X = step.target_probs, step.tokens

    def q(i):
        return step.draft_probs[i] or onehot(X[i + 1], step.vocab, P[0][0])

    pw = [Fraction(1)]
    for i in range(1, K + 1):
        pw.append(min(Fraction(1), pw[-1] * P[i - 1][X[i]] / q(i - 1)[X[i]]))
    tau = 0
    for i in range(K, 0, -1):
        if i == K:
            h = pw[K]
        else:
            Z = sum(positive_part([pw[i] * a - b for a, b in zip(P[i], q(i))]))
            h = Z / (Z + 1 - pw[i]) if Z + 1 - pw[i] > 0 else 1
        if ch.bernoulli(h, ("eta", i)):
            tau = i
            break
    if tau == K:
        return Outcome(tuple(range(K + 1)), ch.categorical(P[K], ("final", 0)))
    w = positive_part([a - b for a, b in zip(P[tau], q(tau))])  # the bug: p_tau dropped
    law = normalize(w) if sum(w) > 0 else P[tau]
    return Outcome(tuple(range(tau + 1)), ch.categorical(law, ("final", 0)))


@pytest.mark.parametrize(
    "fn", [_token_resampling_from_p, _block_tokenwise], ids=["resample-from-p", "block-tokenwise"]
)
def test_the_oracle_flags_real_bug_classes(fn):
    mutant = Rule(fn.__name__, fn, frozenset())
    res = check(mutant, "iid_chain", INST)
    assert res.tv > 0, res.explain()
    assert "LOSSY" in res.explain()


def test_the_oracle_passes_the_correct_rules_on_the_same_instance():
    for name in ("token", "block"):
        assert check(name, "iid_chain", INST).tv == 0


def test_greedy_is_checked_against_greedy_decoding():
    res = check("greedy", "iid_siblings", Instance(vocab=3, shape=(-1, 0, 0, 1), prefix=(2,)))
    want = greedy_sequence(res.instance.target, (2,), res.horizon)
    assert res.reference == {want: 1} and res.law == {want: 1}


def test_p_equals_q_accepts_everything():
    inst = Instance(vocab=3, shape=(-1, 0, 1, 2), overlap=Fraction(1), prefix=(0,))
    for name in ("token", "block", "mss", "traversal"):
        assert check(name, "iid_chain", inst).expected_emitted == 4


def test_a_chain_only_rule_on_a_tree_is_refused_clearly():
    with pytest.raises(ValueError, match="chains only"):
        check("block", "iid_siblings", Instance(vocab=2, shape=(-1, 0, 0)))


def test_matrix_command_writes_json_and_agrees_with_declarations(tmp_path, capsys):
    out = tmp_path / "m.json"
    rc = main(
        [
            "matrix",
            "--instances",
            "2",
            "--process",
            "iid_chain",
            "--process",
            "topk_siblings",
            "--rule",
            "token",
            "--rule",
            "block",
            "--rule",
            "target_only",
            "--rule",
            "typical",
            "--json",
            str(out),
            "--progress",
            "off",
        ]
    )
    cells = json.loads(out.read_text())
    assert rc == 0
    assert {tuple(sorted(c)) for c in cells} == {tuple(sorted(cells[0]))}
    assert {"process", "rule", "verdict", "tv"} <= set(cells[0])
    by = {(c["process"], c["rule"]): c for c in cells}
    assert by[("iid_chain", "token")]["verdict"] == "exact" and by[("iid_chain", "token")]["tv"] == 0
    assert (
        by[("topk_siblings", "block")]["verdict"] == "not_applicable"
        and by[("topk_siblings", "block")]["tv"] is None
    )
    assert by[("topk_siblings", "token")]["verdict"] == "lossy" and by[("topk_siblings", "token")]["tv"] > 0
    assert by[("iid_chain", "typical")]["verdict"] == "lossy"
    assert "| rule |" in capsys.readouterr().out


def test_matrix_command_usage_errors_exit_4(capsys):
    assert main(["matrix", "--rule", "nonsense"]) == 4
    assert main(["matrix", "--instances", "0", "--progress", "off"]) == 4
    assert "instances" in capsys.readouterr().err


def test_matrix_exit_1_when_a_declaration_is_wrong(monkeypatch, tmp_path):
    import specproof.properties.oracle.matrix as M

    lying = dict(RULES)
    lying["typical"] = Rule(
        "typical", RULES["typical"].fn, frozenset({"iid_chain"}), params=RULES["typical"].params
    )
    monkeypatch.setattr(M, "RULES", lying)
    assert (
        main(
            ["matrix", "--instances", "2", "--process", "iid_chain", "--rule", "typical", "--progress", "off"]
        )
        == 1
    )
