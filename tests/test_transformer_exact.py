"""The exact oracle on a real transformer: a TinyTransformer target and an independent, smaller
TinyTransformer draft model (issue 5's "draft model" proposer, sampled chain or greedy one-hot).

Every (rule, process) pair the reference declares exact, on chains (K = 2) and trees
(two children, then one each), must be lossless: the exact law of one step completed to the
horizon equals the target's, up to float64 rounding (TV < 1e-12; the laws are float64 softmaxes,
so TV == 0 exactly is not expected). Typical acceptance must be flagged (TV > 1e-3) and greedy
verification must reproduce the target's greedy continuation exactly.
"""

from __future__ import annotations

import pytest

from specproof.properties.oracle.exact import ModelInstance, check
from specproof.reference.decode import e2e_models
from specproof.reference.processes import PROCESSES
from specproof.reference.rules import RULES
from specproof.reference.transformer import Config, TinyTransformer, TransformerLM

V = 4
TARGET = TransformerLM(e2e_models()[0])  # the 4-token target of `specproof e2e`
DRAFT = TransformerLM(TinyTransformer(Config(vocab=V, width=8, layers=1, heads=2, mlp=16), seed=12))
CHAIN = (-1, 0, 1)
TREE = (-1, 0, 0, 1, 2)
PREFIX = (2, 0, 3)

PAIRS = [
    (rule, process)
    for rule in RULES.values()
    for process in PROCESSES.values()
    if process.name in rule.exact_for and rule.applies_to(process.chain)
]


@pytest.mark.parametrize(("rule", "process"), [(r.name, p.name) for r, p in PAIRS])
def test_declared_exact_pairs_are_lossless_on_the_transformer(rule, process):
    shape = CHAIN if PROCESSES[process].chain else TREE
    res = check(rule, process, ModelInstance(TARGET, DRAFT, shape, PREFIX, "tiny transformers"))
    assert res.tv < 1e-12, res.explain()


@pytest.mark.parametrize("process", ["iid_chain", "onehot_chain"])
def test_typical_acceptance_is_flagged_on_the_transformer(process):
    res = check("typical", process, ModelInstance(TARGET, DRAFT, CHAIN, PREFIX, "tiny transformers"))
    assert res.tv > 1e-3, res.explain()
    print(res.explain())


def test_expected_emitted_length_is_that_of_a_real_speculative_step():
    # the draft is a different (smaller) model: some but not all drafts are accepted
    res = check("token", "iid_chain", ModelInstance(TARGET, DRAFT, CHAIN, PREFIX, "tiny transformers"))
    assert 1 < res.expected_emitted < 3
