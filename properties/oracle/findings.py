"""Findings on third-party verifiers, reproduced in the reference.

A lossy verdict of the audit says *that* a verifier's law is wrong; this module says *why*, by
writing the suspected deviation as a reference rule and checking it with the exact oracle
(proofs_notes/thirdparty.md). tests/test_thirdparty.py then checks, where the package is
installed, that the third-party function's emitted law matches the reproduction's exact law
(and not the target's).

EAGLE-1's ``evaluate_posterior`` (``eagle-llm`` 1.2.1), sampling branch: after rejecting the
children x_1 .. x_{j-1} of a node it renormalizes q without them for the residual, as RRS does,
but it accepts x_j with probability ``p^(j)(x_j) / q(x_j)``, the *original* q, where RRS divides
by ``q^(j)(x_j) = q(x_j) / (1 - q(x_1) - .. - q(x_{j-1}))``. The ratio is too large, so later
siblings are over-accepted. :func:`rrs_original_q_ratio` is RRS with that one change.

Medusa-1's ``evaluate_posterior`` (``medusa-llm`` 0.1): typical acceptance (lossy by design,
proofs_notes/typical.md), and the token after the accepted candidates is the *argmax* of the
target's law there (``generate_candidates`` makes it the next tree's root), even when sampling.
:data:`MEDUSA_TYPICAL` is the reference's typical rule with its final draw replaced by the
mode; it is deterministic, so the package's function must return exactly its output
(tests/test_thirdparty.py), and the oracle finds it lossy even with one draft and q = p.

HF transformers' engines (found by the engine audit, ``specproof audit engine hf.*``): Gemma 4's
assistant drafts argmax tokens but tells the verifier their soft law (:data:`ARGMAX_TOLD_Q`);
universal speculative decoding tells the verifier a permutation of the law its drafts were drawn
from (:func:`permuted_draft_law`). tests/test_engines_hf.py checks the packages' own code paths
against these mechanisms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from specproof.properties.oracle.exact import Instance, OracleResult, check
from specproof.reference.choices import Choices, Site
from specproof.reference.laws import acceptance, normalize, onehot, residual, without
from specproof.reference.models import LM
from specproof.reference.processes import PROCESSES, Process, Proposal
from specproof.reference.rules import Rule
from specproof.reference.rules.typical import typical
from specproof.reference.step import Outcome, Step


def rrs_original_q_ratio(ch: Choices, step: Step) -> Outcome:
    """RRS whose acceptance ratio uses the node's original draft law (EAGLE-1's posterior)."""
    path, node = [0], 0
    while True:
        p = step.target_probs[node]
        q_orig = step.draft_probs[node]
        q_node = q_orig
        for c in step.tree.children[node]:
            x = step.tokens[c]
            q_ratio = q_orig or onehot(x, step.vocab, p[0])  # the deviation: not q_node
            if ch.bernoulli(acceptance(p[x], q_ratio[x]), ("accept", c)):
                path.append(c)
                node = c
                break
            q = q_node or onehot(x, step.vocab, p[0])
            p = residual(p, q)
            if q_node is not None:
                rest = without(q_node, [x])
                q_node = normalize(rest) if sum(rest) > 0 else rest
        else:
            return Outcome(tuple(path), ch.categorical(p, ("final", 0)))


EAGLE_RATIO = Rule("rrs[ratio against the original q]", rrs_original_q_ratio, frozenset())

#: The smallest instance where the deviation shows: two siblings drafted without replacement.
EAGLE_WITNESS = Instance(
    vocab=3,
    shape=(-1, 0, 0),
    target_seed=0,
    target_styles=("random",),
    draft_seed=1,
    draft_styles=("peaked",),
    overlap=Fraction(0),
)


def eagle_ratio_witness() -> OracleResult:
    """The exact oracle on :data:`EAGLE_WITNESS`: the reproduction is lossy (TV > 0 exactly)."""
    return check(EAGLE_RATIO, "wor_siblings", EAGLE_WITNESS)


class _Mode:
    """A choice interpreter whose draws return the most likely outcome (first on ties)."""

    def bernoulli(self, p: Any, site: Site) -> bool:
        return bool(p > 1 - p)

    def categorical(self, weights: Sequence[Any], site: Site) -> int:
        best = max(weights)
        return next(i for i, w in enumerate(weights) if w == best)


def typical_argmax_final(ch: Choices, step: Step, eps: float = 0.09, delta: float = 0.3) -> Outcome:
    """Typical acceptance whose token after the accepted path is the argmax (Medusa-1 0.1)."""
    return typical(_Mode(), step, eps, delta)


MEDUSA_TYPICAL = Rule("typical[argmax next token]", typical_argmax_final, frozenset())

#: One draft, q = p: the smallest instance, and still lossy.
MEDUSA_WITNESS = Instance(vocab=3, shape=(-1, 0), target_seed=0, overlap=Fraction(1))


def medusa_typical_witness() -> OracleResult:
    return check(MEDUSA_TYPICAL, "onehot_siblings", MEDUSA_WITNESS)


# --------------------------------------------------------------------------- engine findings
# Found by the engine audit (properties/engine/audit.py) on HF transformers 5.24's generate
# loop; reproduced here as a reference process differing from an exact one by one line, and
# checked by the exact oracle (proofs_notes/thirdparty.md, "HF transformers' engines").

#: Gemma 4's assistant (``SinglePositionMultiTokenCandidateGenerator``) drafts the *argmax* of
#: its logits but hands the verifier the logits themselves, so token-level verification divides
#: by q(x) = softmax(logits)(x) for a token that was drawn with probability 1. The reference
#: ``onehot_chain`` with that one change: the draft law is given (``gives_draft_probs``).
ARGMAX_TOLD_Q = Process(
    "argmax chain, verifier given q",
    PROCESSES["onehot_chain"].choose,
    True,
    True,
    "the draft model's argmax chain, but the verifier is given the draft's soft law q",
)

#: Two tokens are enough; with q == p the loop becomes greedy decoding (every draft accepted).
ARGMAX_WITNESS = Instance(vocab=3, shape=(-1, 0))


def argmax_told_q_witness() -> OracleResult:
    """The exact oracle: token-level verification under :data:`ARGMAX_TOLD_Q` (TV 1/2 here)."""
    return check("token", ARGMAX_TOLD_Q, ARGMAX_WITNESS)


@dataclass(frozen=True)
class PermutedDraftLaw(Process):
    """A process whose verifier is given ``q(perm[y])`` at token y instead of ``q(y)``: HF's
    ``UniversalSpeculativeDecodingGenerator`` with an assistant tokenizer whose ``get_vocab()``
    order is not ascending by id (its pruned head's logits land on the wrong target ids)."""

    perm: tuple[int, ...] = ()

    def draft_probs(self, prefix: tuple[int, ...], proposal: Proposal, draft: LM) -> list[Any] | None:
        laws = Process.draft_probs(self, prefix, proposal, draft)
        if laws is None:
            return None
        return [None if q is None else tuple(q[self.perm[y]] for y in range(len(q))) for q in laws]


def permuted_draft_law(perm: tuple[int, ...]) -> PermutedDraftLaw:
    base = PROCESSES["iid_chain"]
    return PermutedDraftLaw(f"iid chain, verifier given q o {perm}", base.choose, True, True, base.doc, perm)


#: One draft on 3 tokens, the law told to the verifier rotated by one.
PERMUTED_WITNESS = Instance(vocab=3, shape=(-1, 0))


def permuted_draft_law_witness(perm: tuple[int, ...] = (1, 2, 0)) -> OracleResult:
    """The exact oracle: token-level verification told a permuted draft law (TV 3/26 here)."""
    return check("token", permuted_draft_law(perm), PERMUTED_WITNESS)
