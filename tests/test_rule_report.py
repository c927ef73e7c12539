"""``rule_report`` and ``specproof rule``: a user's rule through the exact oracle.

The worked examples of docs/adding-a-rule.md (docs/examples/top_p_rule.py): the one-sided top-p
verifier is found lossy with an exact witness under the chain processes it claims (and a
hand-computed witness pins the size of the error); the nucleus-gated rule is exact on every
instance, and a mutant of it (gated acceptance, token-level residual) is caught; a project rule
gets exactly its row of the exactness matrix; the command's exit statuses (0, 1, 2, 4) and the
note skeleton, whose generated test runs and passes. Few instances: about 10 s on 2 cores.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from specproof.properties.cli import main
from specproof.properties.oracle import strategies as sps
from specproof.properties.oracle.exact import ModelInstance, check
from specproof.properties.oracle.matrix import exactness_matrix, markdown, random_instance
from specproof.properties.oracle.rule_report import (
    V_CONTRACT,
    V_EXACT,
    V_LOSSY,
    V_NOT_APPLICABLE,
    RuleSpecError,
    load_rule,
    rule_report,
    seeded_instances,
)
from specproof.properties.verdicts import USAGE_ERROR
from specproof.reference.choices import Choices
from specproof.reference.laws import acceptance, onehot, residual
from specproof.reference.rules import CHAINS, RULES, Rule
from specproof.reference.step import Outcome, Step

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "top_p_rule.py"
TOP_P = load_rule(f"{EXAMPLE}:TOP_P_VERIFIER")
GATED = load_rule(f"{EXAMPLE}:NUCLEUS_GATED")
CHAIN_PROCESSES = sorted(CHAINS)


def test_the_top_p_verifier_is_lossy_with_an_exact_shrunk_witness_where_it_claims_exactness():
    report = rule_report(TOP_P, instances=4, processes=CHAIN_PROCESSES)
    assert report.exit_code == 1 and not report.agrees
    for cell in report.cells:
        assert cell.declared_exact and cell.verdict == V_LOSSY and not cell.agrees
        assert isinstance(cell.tv, Fraction) and cell.tv > 0
        w = cell.witness
        assert w is not None and isinstance(w.tv, Fraction) and w.tv > 0
        assert cell.witness_source == "shrunk by hypothesis"
        assert w.instance.vocab <= 3 and len(w.instance.shape) <= 3, w.summary()
        # the witness is a claim anyone can re-check: the oracle again, from scratch
        assert check(TOP_P, cell.process, w.instance).tv == w.tv
        assert w.witness(), "a lossy witness names its deviating cells"
    assert "**!**" in report.markdown()


@dataclass(frozen=True)
class Constant:
    """A model with the same next-token law at every context."""

    p: tuple[Fraction, ...]

    @property
    def vocab(self) -> int:
        return len(self.p)

    def law(self, context: tuple[int, ...]) -> tuple[Fraction, ...]:
        return self.p


@pytest.mark.parametrize("process, tv", [("onehot_chain", Fraction(1, 5)), ("iid_chain", Fraction(13, 50))])
def test_the_top_p_verifier_on_a_hand_computed_witness(process, tv):
    """p = (1/5, 4/5) everywhere, q = (1/2, 1/2), one draft: the nucleus at 0.8 is {1}, so the
    first emitted token is never 0 (the target's 1/5). One-hot draft (argmax q = 0): rejected,
    the residual is token 1, then a target token: TV = 1/5. Draft from q: token 1 accepted with
    its bonus 1 from the truncated law, token 0 rejected to token 1: (1, 1) has 9/10 against 16/25,
    (1, 0) 1/10 against 4/25, and 0 on the target's 1/5: TV = 13/50."""
    inst = ModelInstance(
        Constant((Fraction(1, 5), Fraction(4, 5))), Constant((Fraction(1, 2),) * 2), (-1, 0), (0,), "constant"
    )
    assert check(TOP_P, process, inst).tv == tv
    assert check(GATED, process, inst).tv == 0
    assert check(RULES["token"], process, inst).tv == 0


def test_the_nucleus_gated_rule_is_exact_on_every_seeded_instance():
    report = rule_report(GATED, instances=4, processes=CHAIN_PROCESSES)
    assert report.exit_code == 0 and report.agrees
    for cell in report.cells:
        assert cell.verdict == V_EXACT and cell.tv == 0 and cell.agrees and cell.witness is None


@pytest.mark.parametrize("process", CHAIN_PROCESSES)
def test_the_nucleus_gated_rule_is_exact_on_hypothesis_instances(process):
    @settings(max_examples=10)
    @given(sps.instances(process))
    def run(instance):
        res = check(GATED, process, instance)
        assert res.tv == 0, res.summary()

    run()


def test_the_nucleus_gated_rule_never_emits_more_than_token_level():
    """Its acceptance q a <= min(p, q) pointwise: E[emitted] <= token-level's on every seeded chain
    instance, exactly, and strictly less on some (the price of the gate)."""
    drawn = seeded_instances(4, 0)
    strictly = 0
    for process in CHAIN_PROCESSES:
        for inst in drawn[process]:
            gated = check(GATED, process, inst).expected_emitted
            token = check(RULES["token"], process, inst).expected_emitted
            assert gated <= token, inst.describe()
            strictly += gated < token
    assert strictly > 0


def _gated_with_token_residual(ch: Choices, step: Step, top: Fraction = Fraction(4, 5)) -> Outcome:
    """A mutant of nucleus_gated: the gated acceptance, but token-level's residual norm((p - q)+)
    instead of the unaccepted mass norm(p - q a)."""
    from specproof.reference.laws import top_p

    path, node = [0], 0
    while True:
        p = step.target_probs[node]
        kids = step.tree.children[node]
        if not kids:
            return Outcome(tuple(path), ch.categorical(p, ("final", 0)))
        S = {x for x, v in enumerate(top_p(p, top)) if v > 0}
        c = kids[0]
        x = step.tokens[c]
        q = step.draft_probs[node] or onehot(x, step.vocab, p[0])
        if ch.bernoulli(acceptance(p[x], q[x]) if x in S else p[0] * 0, ("accept", c)):
            path.append(c)
            node = c
            continue
        return Outcome(tuple(path), ch.categorical(residual(p, q), ("final", 0)))


def test_a_mutant_of_the_exact_example_is_caught():
    """The gate without its matched residual: a draft outside the nucleus is always rejected and
    then excluded from the residual, so it is never emitted first (TV 1/5 = p(0) on the constant
    instance under both chain processes); the seeded run finds it too."""
    mutant = Rule("gated_token_residual", _gated_with_token_residual, CHAINS, chain_only=True)
    inst = ModelInstance(
        Constant((Fraction(1, 5), Fraction(4, 5))), Constant((Fraction(1, 2),) * 2), (-1, 0), (0,), "constant"
    )
    assert check(mutant, "onehot_chain", inst).tv == Fraction(1, 5)
    assert check(mutant, "iid_chain", inst).tv > 0
    report = rule_report(mutant, instances=4, processes=["iid_chain"], shrink=False)
    assert report.cells[0].verdict == V_LOSSY and report.exit_code == 1


def test_the_fix_truncating_the_target_everywhere_is_exact():
    """With top-p applied to the target model itself, the unchanged token rule preserves its law."""
    module = sys.modules[TOP_P.fn.__module__]  # the example file, as load_rule imported it
    drawn = seeded_instances(3, 0)
    for process in CHAIN_PROCESSES:
        for inst in drawn[process]:
            assert module.truncated_target_check(process, inst).tv == 0


@pytest.mark.parametrize("name", ["token", "block"])
def test_a_project_rule_gets_its_row_of_the_matrix(name):
    report = rule_report(RULES[name], instances=3, shrink=False)
    cells = exactness_matrix(instances=3, seed=0, rules=[name])
    mine = report.matrix_cells()
    assert [(c.process, c.verdict, c.tv_exact, c.agrees) for c in mine] == [
        (c.process, c.verdict, c.tv_exact, c.agrees) for c in cells
    ]
    assert report.markdown() == markdown(cells)
    assert report.exit_code == 0
    if name == "block":
        assert [c.verdict for c in report.cells[2:]] == [V_NOT_APPLICABLE] * 4


def test_seeded_instances_are_the_matrix_instances():
    import numpy as np

    rng = np.random.default_rng(5)
    expected = {p: [random_instance(rng, p) for _ in range(2)] for p in seeded_instances(2, 5)}
    assert seeded_instances(2, 5) == expected


def _run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_command_exits_0_when_every_cell_agrees(capsys):
    argv = ["rule", f"{EXAMPLE}:NUCLEUS_GATED", "--instances", "2", "--process", "iid_chain", "--no-shrink"]
    rc, out, _ = _run(argv, capsys)
    assert rc == 0, out
    assert "| nucleus_gated[top=0.8] | exact |" in out and "exit 0" in out


def test_the_command_exits_0_for_a_function_with_its_declaration(tmp_path, capsys):
    note = tmp_path / "gated.md"
    argv = ["rule", f"{EXAMPLE}:nucleus_gated", "--exact-for", "iid_chain", "onehot_chain"]
    argv += ["--instances", "2", "--process", "onehot_chain", "--note", str(note)]
    rc, out, _ = _run(argv, capsys)
    assert rc == 0, out
    text = note.read_text()
    assert 'exact_for=["iid_chain", "onehot_chain"]' in text and "def test_nucleus_gated_is_exact" in text


def test_the_command_exits_1_and_the_note_holds_the_witness(tmp_path, capsys):
    note, js = tmp_path / "top_p.md", tmp_path / "top_p.json"
    argv = ["rule", f"{EXAMPLE}:TOP_P_VERIFIER", "--instances", "2", "--process", "onehot_chain"]
    argv += ["--note", str(note), "--json", str(js)]
    rc, out, _ = _run(argv, capsys)
    assert rc == 1, out
    assert "LOSSY but declared exact" in out and "exit 1" in out
    data = json.loads(js.read_text())
    (cell,) = data["cells"]
    assert cell["verdict"] == "lossy" and cell["declared_exact"] and not cell["agrees"]
    w = cell["witness"]
    assert Fraction(w["tv_exact"]) > 0 and w["instance"].startswith("Instance(")
    text = note.read_text()
    assert w["instance"] in text and "**The declaration is refuted**" in text
    assert f"TV = {w['tv_exact']}" in text
    # the generated test is Python that runs and passes on the witness it pins
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), "skeleton", "exec"), namespace)
    tests = [k for k in namespace if k.startswith("test_") and k.endswith("_is_lossy_on_its_witness")]
    assert tests, code.group(1)
    for process in namespace["WITNESSES"]:
        namespace[tests[0]](process)


BAD_RULES = """
from specproof.reference.rules import CHAINS, Rule
from specproof.reference.step import Outcome


def off_the_tree(ch, step):
    return Outcome((0, 5), 0)


def raises(ch, step):
    raise RuntimeError("not written yet")


OFF_THE_TREE = Rule("off_the_tree", off_the_tree, CHAINS)
NOT_A_RULE = 3
"""


def test_the_command_exits_2_on_a_rule_that_breaks_its_contract(tmp_path, capsys):
    path = tmp_path / "bad.py"
    path.write_text(BAD_RULES)
    rc, out, _ = _run(["rule", f"{path}:OFF_THE_TREE", "--instances", "1", "--process", "iid_chain"], capsys)
    assert rc == 2 and "not a root path" in out, out
    report = rule_report(load_rule(f"{path}:raises", exact_for=[]), instances=1, processes=["iid_chain"])
    assert report.cells[0].verdict == V_CONTRACT and "not written yet" in (report.cells[0].error or "")


@pytest.mark.parametrize(
    "args, message",
    [
        (["{bad}:NOPE"], "has no 'NOPE'"),
        (["{bad}:NOT_A_RULE"], "neither a Rule nor a function"),
        (["no_such_file.py:RULE"], "no file"),
        (["{bad}"], "not path/to/file.py:NAME"),
        (["{bad}:raises"], "--exact-for"),
        (["{bad}:raises", "--exact-for", "iid_chian"], "unknown process iid_chian"),
        (["{example}:TOP_P_VERIFIER", "--exact-for", "iid_chain"], "is a Rule"),
        (["{example}:TOP_P_VERIFIER", "--instances", "0"], "instances"),
        (["{example}:TOP_P_VERIFIER", "--note", "/no/such/folder/n.md"], "does not exist"),
        (["{example}:TOP_P_VERIFIER", "--process", "nope"], ""),
    ],
)
def test_the_command_exits_4_on_usage_errors(tmp_path, capsys, args, message):
    bad = tmp_path / "bad.py"
    bad.write_text(BAD_RULES)
    argv = ["rule"] + [a.format(bad=bad, example=EXAMPLE) for a in args]
    rc, _, err = _run(argv, capsys)
    assert rc == USAGE_ERROR
    assert message in err


def test_rule_report_rejects_what_is_not_a_rule():
    with pytest.raises(RuleSpecError, match="expected a specproof.reference.rules.Rule"):
        rule_report(lambda ch, step: None)
    with pytest.raises(RuleSpecError, match="unknown process"):
        rule_report(Rule("x", RULES["token"].fn, frozenset({"iid_chians"})))
