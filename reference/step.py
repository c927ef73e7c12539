"""One verification step's inputs, validated once, and its outcome.

``make_step`` is the public entry that every reference rule's input goes through. It checks
the tree, the tokens and both families of laws, and raises a specific
:mod:`specproof.reference.errors` exception naming the offending argument:

* ``parents``: a draft tree (see :func:`specproof.reference.tree.validate_parents`);
* ``tokens[i]``: the token at node ``i`` (``tokens[0]`` is the last committed token), an
  integer in ``[0, V)``;
* ``target_probs[i]``: the target's next-token law after the root path to ``i``;
* ``draft_probs``: ``None`` (every node's children are deterministic drafts, read as one-hot
  laws) or one entry per node: the law node ``i``'s children were drawn from, or ``None`` for
  a node whose children are deterministic. A drafted token must have positive probability
  under the law it was drawn from (ZeroDraftProbabilityError).

A rule returns an :class:`Outcome`: the accepted root path (node 0 first) and the next token
(the corrected or bonus token). The step emits the accepted drafts' tokens, then that token.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import DTypeError, ShapeError, TokenOutOfRangeError, ZeroDraftProbabilityError
from .laws import DEFAULT_TOL, Law, as_law
from .tree import DraftTree


@dataclass(frozen=True)
class Step:
    """Validated inputs of one step. Build with :func:`make_step`."""

    tree: DraftTree
    tokens: tuple[int, ...]
    draft_probs: tuple[Law | None, ...]
    target_probs: tuple[Law, ...]
    vocab: int


@dataclass(frozen=True)
class Outcome:
    """What a rule decided: the accepted root path and the token emitted after it."""

    accepted: tuple[int, ...]
    next_token: int

    def emitted(self, step: Step) -> tuple[int, ...]:
        """The tokens this step appends to the sequence (at least one)."""
        return tuple(step.tokens[i] for i in self.accepted[1:]) + (self.next_token,)


def _rows(values: object, argument: str, n: int) -> list[object]:
    if hasattr(values, "tolist") and callable(values.tolist):
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ShapeError(argument, f"expected one entry per tree node, got {type(values).__name__}")
    if len(values) != n:
        raise ShapeError(argument, f"has {len(values)} entries, expected {n} (one per tree node)")
    return list(values)


def make_step(
    parents: object,
    tokens: object,
    draft_probs: object,
    target_probs: object,
    tol: float = DEFAULT_TOL,
) -> Step:
    """Validate one step's inputs (see the module docstring) and return a :class:`Step`."""
    tree = DraftTree(parents)
    n = tree.n
    rows = _rows(target_probs, "target_probs", n)
    first = rows[0].tolist() if hasattr(rows[0], "tolist") else rows[0]
    if isinstance(first, (str, bytes)) or not isinstance(first, Sequence) or len(first) == 0:
        raise ShapeError("target_probs[0]", "expected a non-empty law over the vocabulary")
    vocab = len(first)
    target = tuple(as_law(r, f"target_probs[{i}]", vocab, tol) for i, r in enumerate(rows))

    toks = []
    for i, t in enumerate(_rows(tokens, "tokens", n)):
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            if hasattr(t, "item") and isinstance(t.item(), int):
                t = t.item()
            else:
                raise DTypeError(f"tokens[{i}]", f"expected an integer token id, got {t!r}")
        t = int(t)
        if not 0 <= t < vocab:
            raise TokenOutOfRangeError(f"tokens[{i}]", f"is {t}, outside [0, {vocab}) (vocabulary {vocab})")
        toks.append(t)

    if draft_probs is None:
        draft: tuple[Law | None, ...] = (None,) * n
    else:
        draft = tuple(
            None if r is None else as_law(r, f"draft_probs[{i}]", vocab, tol)
            for i, r in enumerate(_rows(draft_probs, "draft_probs", n))
        )
    for c in range(1, n):
        parent = tree.parents[c]
        law = draft[parent]
        if law is not None and not law[toks[c]] > 0:
            raise ZeroDraftProbabilityError(
                f"draft_probs[{parent}][{toks[c]}]",
                f"is 0 but token {toks[c]} was drafted at node {c} from node {parent}'s draft law",
            )
    return Step(tree=tree, tokens=tuple(toks), draft_probs=draft, target_probs=target, vocab=vocab)
