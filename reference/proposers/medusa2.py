"""Medusa-2 (Cai et al. 2024, "Medusa: Simple LLM Inference Acceleration Framework with Multiple
Decoding Heads", sec. 2.2, training strategies; and its self-distillation recipe): the backbone
is fine-tuned *together with* the heads, so the model that verifies is a new target.

Medusa-1 freezes the backbone and trains the heads alone: the verifying model is the original
one, and an exact rule preserves the original model's law. Medusa-2 trains the backbone jointly,
with a loss that keeps it close to the original (self-distillation: the original model's own
next-token law is the backbone's label) plus the heads' loss at a small weight; the heads' loss
also flows into the backbone, which therefore moves. The speculative step then verifies with
the *fine-tuned* model: an exact rule preserves the fine-tuned model's law, not the original's,
and how far the two are apart is a quality question to measure separately
(proofs_notes/medusa2.md).

Here: the heads (Medusa-1's architecture, :class:`~.medusa.MedusaHeads`) are first distilled
with the backbone frozen (the Medusa-1 stage, the ``medusa`` proposer's cached weights, which
serves as the heads' warm-up), then the backbone (a copy of the target) and the heads are
fine-tuned jointly on the same synthetic corpus (:class:`~.distill.JointRecipe`, cached like
the other networks). The drafter reads the fine-tuned backbone's features, and
:func:`verifier` returns the fine-tuned backbone, which is what the decoding loop must verify
with. Untrained (``trained=False``): the initial heads on the original backbone.

Process: as Medusa's (a static tree of top-k tokens; ``onehot_siblings`` is exact for every rule
declared exact for it, with any verifying model). Checked by tests/test_medusa2.py.
"""

from __future__ import annotations

import weakref

from ..transformer import TinyTransformer
from .distill import JointRecipe, trained, trained_jointly
from .medusa import MedusaHeads
from .selfdraft import Drafter

HEADS = 3

_memo: weakref.WeakKeyDictionary[TinyTransformer, dict[bool, tuple[TinyTransformer, MedusaHeads, Drafter]]]
_memo = weakref.WeakKeyDictionary()


def medusa2(
    target: TinyTransformer, train: bool = True, recipe: JointRecipe | None = None
) -> tuple[TinyTransformer, MedusaHeads]:
    """``(fine-tuned backbone, heads)`` for ``target``: Medusa-1's distilled heads as the warm
    start, then the joint fine-tuning. ``train=False``: ``(target, initial heads)``."""
    if not train:
        return target, MedusaHeads(target, heads=HEADS)
    warm = MedusaHeads(target, heads=HEADS)
    trained(warm, target)  # the Medusa-1 stage, in place (cached: the medusa proposer's heads)
    return trained_jointly(warm, target, recipe or JointRecipe())


def _built(target: TinyTransformer, train: bool) -> tuple[TinyTransformer, MedusaHeads, Drafter]:
    per_target = _memo.setdefault(target, {})
    if train not in per_target:
        backbone, heads = medusa2(target, train)
        per_target[train] = (backbone, heads, heads.drafter(backbone))
    return per_target[train]


def drafter(target: TinyTransformer, train: bool = True) -> Drafter:
    """The heads bound to the fine-tuned backbone (the same object on every call)."""
    return _built(target, train)[2]


def verifier(target: TinyTransformer, train: bool = True) -> TinyTransformer:
    """The model that verifies Medusa-2's drafts: the fine-tuned backbone (``target`` itself
    when untrained). Memoized, so it is the same object :func:`drafter` reads features from."""
    return _built(target, train)[0]
