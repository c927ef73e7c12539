"""Every proposer, on the transformer targets of ``specproof e2e``.

Exact, over two consecutive steps (the law of the first 2 * (depth + 1) tokens enumerated and
compared with the target's; float64 laws, so lossless means TV < 1e-12):

* every (proposer, process, rule declared exact for it) is lossless, with the distilled
  networks and with their initial weights (so no verdict rests on how training went);
* typical acceptance is flagged with every proposer.

Sampled: greedy verification with any proposer reproduces the target's own greedy decoding,
token for token. Structure: EAGLE-2's dynamic tree is ancestor-closed and has exactly N draft
nodes on hypothesis-drawn laws (ties, zeros and one-hot laws included), and it is the top N of
the candidates by value; Medusa and DFlash laws ignore the draft path, MTP and EAGLE's do not;
distillation lowers the held-out KL of every network; bad input raises a named error.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specproof.properties.oracle.exact import multi_step_check
from specproof.reference.decode import decode, e2e_models
from specproof.reference.dynamic_tree import DynamicTree, candidates, expand, select
from specproof.reference.errors import ShapeError
from specproof.reference.models import STYLES, ToyLM, greedy_sequence
from specproof.reference.proposers import PROPOSERS
from specproof.reference.proposers.distill import Recipe, heldout_kl, trained
from specproof.reference.proposers.medusa import MedusaHeads, choices_to_shape
from specproof.reference.rules import RULES
from specproof.reference.transformer import TransformerLM
from specproof.reference.tree import DraftTree

SMALL, BIG = e2e_models()
TARGET = TransformerLM(SMALL)
PREFIX = (2, 0, 3, 2)
NETS = [name for name in PROPOSERS if name not in ("draft", "ngram")]

PAIRS = [
    (p.name, i, rule.name)
    for p in PROPOSERS.values()
    for i, proc in enumerate(p.processes)
    for rule in RULES.values()
    if proc.name in rule.exact_for and rule.applies_to(DraftTree(p.exact_shape, "shape").is_chain)
]


def _check(proposer: str, process_index: int, rule: str, trained_nets: bool = True) -> tuple[float, float]:
    p = PROPOSERS[proposer]
    drafter = p.make_drafter(SMALL, trained_nets)
    return multi_step_check(rule, p.processes[process_index], TARGET, drafter, p.exact_shape, PREFIX, 2)


@pytest.mark.parametrize(("proposer", "process_index", "rule"), PAIRS)
def test_every_declared_exact_pair_is_lossless_over_two_steps(proposer, process_index, rule):
    tv, mean = _check(proposer, process_index, rule)
    depth = DraftTree(PROPOSERS[proposer].exact_shape, "shape").max_depth
    assert tv < 1e-12, (tv, mean)
    assert 1 <= mean <= depth + 1


@pytest.mark.parametrize("proposer", NETS)
def test_untrained_networks_are_lossless_too(proposer):
    tv, _ = _check(proposer, 0, PROPOSERS[proposer].default_rule, trained_nets=False)
    assert tv < 1e-12


@pytest.mark.parametrize("proposer", sorted(PROPOSERS))
def test_typical_acceptance_is_flagged_with_every_proposer(proposer):
    tv, _ = _check(proposer, 0, "typical")
    assert tv > 1e-2


def test_the_table_of_pairs_covers_every_proposer_and_process():
    covered = {(name, i) for name, i, _ in PAIRS}
    assert covered == {(p.name, i) for p in PROPOSERS.values() for i in range(len(p.processes))}


@pytest.mark.parametrize("proposer", sorted(PROPOSERS))
def test_greedy_verification_reproduces_the_targets_greedy_decoding(proposer):
    p = PROPOSERS[proposer]
    process = p.processes[0] if not p.processes[0].gives_draft_probs else p.processes[-1]
    prompt = (1, 5, 9, 1, 5)
    out = decode(BIG, p.make_drafter(BIG), process, "greedy", p.shape, prompt, 6, np.random.default_rng(0))
    n = len(out.tokens) - len(prompt)
    assert tuple(out.tokens[len(prompt) :]) == greedy_sequence(TransformerLM(BIG, 0.0), prompt, n)
    assert out.target_forwards == 6 and n >= 6


@pytest.mark.parametrize("proposer", NETS)
def test_distillation_lowers_the_held_out_kl(proposer):
    """Fresh corpus (seed 99, not the training seed 0): the distilled network is closer to the
    target than its initial weights by a wide margin (Medusa's heads, blind to the path, the
    least: they can only learn the average law two and three tokens ahead)."""
    p = PROPOSERS[proposer]
    net_trained = p.make_drafter(SMALL, True)(PREFIX).net  # type: ignore[attr-defined]
    net_initial = p.make_drafter(SMALL, False)(PREFIX).net  # type: ignore[attr-defined]
    before, after = heldout_kl(net_initial, SMALL, seed=99), heldout_kl(net_trained, SMALL, seed=99)
    assert after < 0.9 * before, (before, after)


def test_medusa_and_dflash_laws_ignore_the_path_mtp_and_eagle_do_not():
    for name in ("medusa", "dflash", "mtp", "eagle1", "eagle3"):
        lm = PROPOSERS[name].make_drafter(SMALL)(PREFIX)
        a, b = lm.law(PREFIX + (0,)), lm.law(PREFIX + (1,))
        same = max(abs(x - y) for x, y in zip(a, b)) < 1e-15
        assert same == (name in ("medusa", "dflash")), name
        # and depth matters for all of them
        assert lm.law(PREFIX) != lm.law(PREFIX + (0,)), name


# --- EAGLE-2's dynamic tree ---------------------------------------------------------------


def _values(lm: ToyLM, prefix: tuple[int, ...], parents, tokens) -> list[float]:
    """Each node's value recomputed from its root path (product of draft probabilities)."""
    ctx, val = [prefix], [1.0]
    for i in range(1, len(parents)):
        c = ctx[parents[i]]
        val.append(val[parents[i]] * float(lm.law(c)[tokens[i]]))
        ctx.append(c + (tokens[i],))
    return val


@settings(max_examples=150, deadline=None)
@given(
    vocab=st.integers(2, 6),
    k=st.integers(1, 3),
    depth=st.integers(1, 4),
    seed=st.integers(0, 10**6),
    styles=st.lists(st.sampled_from(STYLES), min_size=1, max_size=3),
    data=st.data(),
)
def test_dynamic_tree_is_ancestor_closed_with_exactly_n_nodes(vocab, k, depth, seed, styles, data):
    k = min(k, vocab)
    n = data.draw(st.integers(1, candidates(depth, k)), label="nodes")
    lm = ToyLM(vocab, seed, tuple(styles), exact=False)
    prefix = (seed % vocab,)
    proposal = DynamicTree(top_k=k, nodes=n).propose(None, DraftTree.chain(depth), prefix, lm)  # type: ignore[arg-type]
    tree = DraftTree(proposal.parents)  # validates: every parent precedes its child
    assert tree.n == n + 1
    assert tree.max_depth <= depth
    # ancestor-closed and top-N: no candidate left out has a larger value than a kept node
    cands = expand(prefix, lm, depth, k)
    vals = _values(lm, prefix, proposal.parents, proposal.tokens)
    kept_paths = {tuple(proposal.tokens[j] for j in tree.ancestors(i)[1:]) for i in range(1, tree.n)}
    assert len(kept_paths) == n
    cand_paths = {c.context[len(prefix) :]: c for c in cands}
    assert kept_paths <= set(cand_paths)
    for path in kept_paths:
        assert path[:-1] == () or path[:-1] in kept_paths  # ancestor-closed
    out_vals = [math.exp(c.log_value) for p, c in cand_paths.items() if p not in kept_paths]
    if out_vals:
        assert min(vals[1:]) >= max(out_vals) - 1e-12
    # siblings are distinct tokens, each among the k most likely of the parent's law
    contexts = [prefix]
    for i in range(1, tree.n):
        contexts.append(contexts[proposal.parents[i]] + (proposal.tokens[i],))
    for i in range(tree.n):
        kids = [proposal.tokens[c] for c in tree.children[i]]
        assert len(set(kids)) == len(kids)
        q = lm.law(contexts[i])
        kth = sorted(q, reverse=True)[k - 1]
        assert all(q[x] >= kth for x in kids)


def test_dynamic_tree_keeps_parents_on_ties():
    """One-hot laws make a child's value equal its parent's: the tie must go to the parent."""
    lm = ToyLM(3, 0, ("onehot",), exact=True)
    for n in range(1, candidates(4, 2) + 1):
        proposal = DynamicTree(top_k=2, nodes=n).propose(None, DraftTree.chain(4), (0,), lm)  # type: ignore[arg-type]
        assert DraftTree(proposal.parents).n == n + 1


def test_a_deeper_first_tie_break_breaks_ancestor_closure():
    """The mutant: ties broken towards deeper nodes keeps a child without its parent (one-hot
    laws: every node on the greedy path has value 1)."""
    lm = ToyLM(3, 0, ("onehot",), exact=True)
    cands = expand((0,), lm, 3, 2)
    mutant = sorted(range(len(cands)), key=lambda i: (-cands[i].log_value, -cands[i].depth, i))[:1]
    assert cands[mutant[0]].parent != -1  # kept without its parent: not a tree
    assert select(cands, 1, 0).parents == (-1, 0)  # the real order keeps the root's child


def test_dynamic_tree_rejects_impossible_budgets():
    lm = ToyLM(4, 0)
    with pytest.raises(ValueError, match="nodes"):
        DynamicTree(top_k=2, nodes=7).propose(None, DraftTree.chain(2), (0,), lm)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k"):
        DynamicTree(top_k=0, nodes=1)
    with pytest.raises(Exception, match="shape"):
        DynamicTree(top_k=2, nodes=2).propose(None, DraftTree((-1, 0, 0)), (0,), lm)  # type: ignore[arg-type]
    assert select(expand((0,), lm, 1, 2), 2, 0).parents == (-1, 0, 0)


# --- Medusa choices, depth limits, short prompts ----------------------------------------------


def test_choices_to_shape():
    assert choices_to_shape([(0,), (1,), (0, 0)]) == (-1, 0, 0, 1)
    assert choices_to_shape([(0, 0), (1,), (0,)]) == (-1, 0, 0, 1)  # order-free
    for bad, why in [
        ([(0,), (0, 1)], "skips rank 0"),
        ([(1,)], "skips rank 0"),
        ([(0, 0)], "without its parent"),
        ([(0,), (0,)], "twice"),
        ([()], "non-empty"),
    ]:
        with pytest.raises(ValueError, match=why):
            choices_to_shape(bad)


def test_bounded_drafts_refuse_deeper_trees_and_short_prompts():
    lm = PROPOSERS["mtp"].make_drafter(SMALL)(PREFIX)
    with pytest.raises(ShapeError, match="at most 3"):
        lm.law(PREFIX + (0, 1, 2))
    with pytest.raises(ShapeError, match="at least two committed tokens"):
        PROPOSERS["eagle1"].make_drafter(SMALL)((1,))
    with pytest.raises(ShapeError, match="extend"):
        lm.law((0, 0, 0, 0, 1))


def test_trained_weights_come_back_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECPROOF_CACHE", str(tmp_path))
    recipe = Recipe(sequences=4, length=5, steps=3, batch=2)
    a = trained(MedusaHeads(SMALL, heads=2, seed=5), SMALL, recipe)
    files = list(tmp_path.rglob("*.pt"))
    assert len(files) == 1
    b = trained(MedusaHeads(SMALL, heads=2, seed=5), SMALL, recipe)  # loaded, not retrained
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.res, MedusaHeads(SMALL, heads=2, seed=5).res)  # training moved it
    trained(MedusaHeads(SMALL, heads=2, seed=5), SMALL, Recipe(sequences=4, length=5, steps=4, batch=2))
    assert len(list(tmp_path.rglob("*.pt"))) == 2  # another recipe, another entry


def test_dynamic_tree_on_exact_laws():
    """Exact (Fraction) laws: values compare exactly through logs of positive rationals."""
    lm = ToyLM(4, 3, ("ties",), exact=True)
    p = DynamicTree(top_k=2, nodes=5).propose(None, DraftTree.chain(3), (1,), lm)  # type: ignore[arg-type]
    assert len(p.parents) == 6 and isinstance(lm.law((1,))[0], Fraction)
