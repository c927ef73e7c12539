"""Hypothesis strategies: trees, laws with their edge cases, model pairs, instances, rules.

Public and composable, for specproof's own tests and for users' tests of their verifiers. All
of them shrink towards small vocabularies, short chains, the first style and small seeds, so a
failure is reported on a minimal case.

* :func:`trees` — draft-tree parent arrays: ``kind`` is "chain", "wide" (one level of
  siblings), "deep" (a chain with one side branch), "branching" (random with at least one node
  of two or more children) or "random" (any of them).
* :func:`laws`, :func:`law_pairs` — exact (Fraction) or float laws with the edge cases a
  verifier must survive: one-hot, uniform, tiny masses, ties, zeros where the other law has mass,
  ``p == q``, disjoint supports.
* :func:`instances` — an exact-oracle instance (target/draft toy model pair, tree shape, prefix)
  sized so the enumeration stays small.
* :func:`steps` — validated single-step inputs (tree, tokens drafted from q, laws).
* :func:`rule_configs` — configured rules, including random SGLang knobs and typical-acceptance
  parameters.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import strategies as st

from specproof.properties.oracle.exact import Instance, max_drafts
from specproof.reference.errors import UsageError
from specproof.reference.models import STYLES
from specproof.reference.processes import PROCESSES
from specproof.reference.rules import RULES, Rule, target_only, typical
from specproof.reference.step import Step, make_step

TREE_KINDS = ("chain", "wide", "deep", "branching", "random")


@st.composite
def trees(draw: Any, kind: str = "random", max_nodes: int = 7, max_depth: int = 3) -> tuple[int, ...]:
    """A parent array ``(-1, ...)`` with ``parents[i] < i``, at most ``max_nodes`` nodes."""
    if kind not in TREE_KINDS:
        raise UsageError(f"kind: unknown tree kind {kind!r}; known: {', '.join(TREE_KINDS)}")
    if max_nodes < 2:
        raise UsageError(f"max_nodes: must be >= 2, got {max_nodes}")
    if kind == "random":
        kind = draw(st.sampled_from(TREE_KINDS[:-1]))
    if kind == "chain":
        k = draw(st.integers(1, min(max_depth, max_nodes - 1)))
        return (-1,) + tuple(range(k))
    if kind == "wide":
        k = draw(st.integers(2, max(2, max_nodes - 1)))
        return (-1,) + (0,) * k
    if kind == "deep":
        k = draw(st.integers(1, min(max_depth, max_nodes - 2)))
        chain = (-1,) + tuple(range(k))
        at = draw(st.integers(0, k - 1))
        return chain + (at,)
    # branching: random parents, then force one node to have two children
    n = draw(st.integers(3, max_nodes))
    parents = [-1]
    depth = [0]
    for i in range(1, n):
        options = [j for j in range(i) if depth[j] < max_depth]
        p = draw(st.sampled_from(options))
        parents.append(p)
        depth.append(depth[p] + 1)
    counts = [parents.count(j) for j in range(n)]
    if max(counts) < 2:
        parents[-1] = parents[-2] if parents[-2] != -1 else 0
    return tuple(parents)


@st.composite
def weights(draw: Any, vocab: int) -> list[int]:
    """Integer weights (at least one positive) with the edge-case styles of ToyLM."""
    style = draw(st.sampled_from(("random",) + STYLES))
    if style == "onehot":
        w = [0] * vocab
        w[draw(st.integers(0, vocab - 1))] = 1
    elif style == "uniform":
        w = [1] * vocab
    elif style == "tiny":
        w = [10**6] * vocab
        w[draw(st.integers(0, vocab - 1))] = 1
    elif style == "ties":
        w = draw(st.lists(st.integers(1, 2), min_size=vocab, max_size=vocab))
    elif style == "sparse":
        w = draw(st.lists(st.integers(0, 3), min_size=vocab, max_size=vocab))
    elif style == "peaked":
        w = draw(st.lists(st.integers(0, 2), min_size=vocab, max_size=vocab))
        w[draw(st.integers(0, vocab - 1))] = 40
    else:
        w = draw(st.lists(st.integers(1, 9), min_size=vocab, max_size=vocab))
    if sum(w) == 0:
        w[0] = 1
    return w


def _law(w: list[int], exact: bool) -> tuple[Any, ...]:
    total = sum(w)
    law = tuple(Fraction(v, total) for v in w)
    return law if exact else tuple(float(v) for v in law)


@st.composite
def laws(draw: Any, vocab: int, exact: bool = True) -> tuple[Any, ...]:
    """A probability law over ``vocab`` tokens (Fractions if ``exact``) with edge cases."""
    return _law(draw(weights(vocab)), exact)


@st.composite
def law_pairs(draw: Any, vocab: int, exact: bool = True) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``(p, q)``: independent, equal, or disjoint in support, each with edge cases."""
    p = draw(laws(vocab, exact))
    mode = draw(st.sampled_from(("independent", "equal", "disjoint")))
    if mode == "equal":
        return p, p
    if mode == "disjoint" and any(v == 0 for v in p):
        w = [0 if v > 0 else draw(st.integers(1, 5)) for v in p]
        return p, _law(w, exact)
    return p, draw(laws(vocab, exact))


def _fits(vocab: int, shape: tuple[int, ...], max_cells: int) -> bool:
    depth = [0] * len(shape)
    for i in range(1, len(shape)):
        depth[i] = depth[shape[i]] + 1
    return vocab ** (len(shape) - 1) <= max_cells and vocab ** (max(depth) + 1) <= max_cells


@st.composite
def instances(
    draw: Any,
    process: str = "iid_chain",
    max_vocab: int = 4,
    max_nodes: int = 7,
    max_depth: int = 3,
    max_cells: int = 800,
    exact: bool = True,
) -> Instance:
    """An oracle instance for ``process``: chain shapes for chain processes, branching trees
    otherwise; ``vocab ** drafts`` and ``vocab ** horizon`` stay within ``max_cells``."""
    if process not in PROCESSES:
        raise UsageError(f"process: unknown {process!r}; known: {', '.join(PROCESSES)}")
    vocab = draw(st.integers(2, max_vocab))
    kind = "chain" if PROCESSES[process].chain else "branching"
    nodes = max(3, min(max_nodes, max_drafts(vocab, max_cells) + 1))
    shape = draw(trees(kind, nodes, max_depth).filter(lambda s: _fits(vocab, s, max_cells)))
    styles = st.lists(st.sampled_from(STYLES), min_size=1, max_size=3, unique=True).map(tuple)
    overlap = draw(
        st.sampled_from((Fraction(1, 2), Fraction(0), Fraction(1)))
        | st.fractions(min_value=0, max_value=1, max_denominator=7)
    )
    prefix = tuple(draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=2)))
    return Instance(
        vocab=vocab,
        shape=shape,
        target_seed=draw(st.integers(0, 2**16)),
        target_styles=draw(styles),
        draft_seed=draw(st.integers(0, 2**16)),
        draft_styles=draw(styles),
        overlap=overlap,
        prefix=prefix,
        exact=exact,
    )


@st.composite
def model_pairs(draw: Any, max_vocab: int = 5, exact: bool = True) -> tuple[Any, Any]:
    """``(target, draft)`` toy models over one vocabulary: edge-case styles, any overlap."""
    inst = draw(instances("iid_chain", max_vocab=max_vocab, exact=exact))
    return inst.target, inst.draft


@st.composite
def steps(
    draw: Any, kind: str = "chain", max_vocab: int = 5, deterministic: bool | None = None, exact: bool = True
) -> Step:
    """Validated one-step inputs: a tree, tokens drafted within q's support, the laws.

    ``deterministic`` True gives ``draft_probs=None`` (one-hot drafts), False gives draft laws,
    None lets hypothesis choose.
    """
    vocab = draw(st.integers(2, max_vocab))
    parents = draw(trees(kind))
    n = len(parents)
    det = draw(st.booleans()) if deterministic is None else deterministic
    pairs = [draw(law_pairs(vocab, exact)) for _ in range(n)]
    target = [p for p, _ in pairs]
    draft = None if det else [q for _, q in pairs]
    tokens = [draw(st.integers(0, vocab - 1))]
    for i in range(1, n):
        if draft is None:
            tokens.append(draw(st.integers(0, vocab - 1)))
        else:
            support = [x for x, v in enumerate(draft[parents[i]]) if v > 0]
            tokens.append(draw(st.sampled_from(support)))
    return make_step(parents, tokens, draft, target)


@st.composite
def rule_configs(draw: Any) -> Rule:
    """A configured rule: a registered one, or target-only / typical with drawn parameters."""
    kind = draw(st.sampled_from(("registered", "target_only", "typical")))
    if kind == "registered":
        return RULES[draw(st.sampled_from(sorted(RULES)))]
    if kind == "target_only":
        knob = st.sampled_from((1, Fraction(1, 2), Fraction(3, 10))) | st.fractions(
            min_value=Fraction(1, 10), max_value=1, max_denominator=10
        )
        ts, ta = draw(knob), draw(knob)
        exact_for = RULES["target_only"].exact_for if ts == 1 and ta == 1 else frozenset()
        return Rule(
            f"target_only[threshold_single={ts},threshold_acc={ta}]",
            target_only,
            exact_for,
            params={"threshold_single": ts, "threshold_acc": ta},
        )
    eps = draw(st.sampled_from((0.09, 0.05, 0.3)))
    delta = draw(st.sampled_from((0.3, 0.1, 0.6)))
    return Rule(
        f"typical[eps={eps},delta={delta}]", typical, frozenset(), params={"eps": eps, "delta": delta}
    )
