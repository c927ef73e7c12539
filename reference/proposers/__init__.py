"""Proposers: where a step's drafts come from, each declaring its proposal process.

A proposer turns the target into a *drafter* (a step's draft model, a reference
:class:`~specproof.reference.models.LM`, as a function of the step's committed tokens; see
:mod:`.selfdraft`) plus the proposal processes that grow the draft tree from it
(:mod:`..processes`, :mod:`..dynamic_tree`), so that every rule's claim ("exact for process P")
applies to it directly:

=======  ===========================================  =================================  ============
name     drafts                                       processes (first: the default)     default rule
=======  ===========================================  =================================  ============
draft    an independent smaller transformer           iid_chain, onehot_chain            token
ngram    prompt lookup: the last matching n-gram      onehot_chain                       token
medusa   3 heads on the last hidden state, top-k      onehot_siblings, topk_siblings     rrs
medusa2  Medusa-2: heads and backbone fine-tuned      onehot_siblings, topk_siblings     rrs
eagle1   feature-level autoregressive draft, top-k    onehot_siblings, topk_siblings     rrs
eagle2   EAGLE-1's network, dynamic tree              dynamic_tree                       rrs
eagle3   fused low/mid/high features, dynamic tree    dynamic_tree                       rrs
mtp      3 sequential MTP modules, chain              iid_chain, onehot_chain            token
dflash   one-pass block of 3 per-position laws        iid_chain, onehot_chain            token
=======  ===========================================  =================================  ============

Default rules: the exact rule closest to what each method's papers sample with. Medusa's own
sampling rule is typical acceptance, which is not lossless (``--rule typical`` shows it); EAGLE
uses multi-round speculative sampling, which is RRS, exact on the one-hot drafts of a
deterministic tree; the chains use token-level rejection sampling.

Self-drafting networks are distilled briefly from their target (:mod:`.distill`, cached);
``make_drafter(target, trained=False)`` gives the network's initial weights instead.

Medusa-2 changes the target: its backbone is fine-tuned with the heads, so its drafts are
verified by the fine-tuned model, :meth:`Proposer.verifying_target` (every other proposer's
verifying target is the target itself). Exactness then holds with respect to that model
(proofs_notes/medusa2.md).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

from ..dynamic_tree import DynamicTree
from ..processes import PROCESSES, Process
from ..rules import RULES
from ..transformer import TinyTransformer
from ..tree import DraftTree
from .dflash import DFlashNet
from .distill import trained
from .draft_model import draft_model
from .eagle1 import Eagle1Net
from .eagle3 import Eagle3Net
from .medusa import MedusaHeads, choices_to_shape
from .medusa2 import drafter as medusa2_drafter
from .medusa2 import verifier as medusa2_verifier
from .mtp import MTPModules
from .ngram import NgramLM
from .selfdraft import Drafter, DraftNet, as_drafter

CHAIN2, CHAIN3 = (-1, 0, 1), (-1, 0, 1, 2)
#: Medusa/EAGLE-1 static trees: 2 + 2 drafts of depth 2 (exact checks), 2 + 2 + 1 of depth 3.
TREE_SMALL = choices_to_shape([(0,), (1,), (0, 0), (1, 0)])
TREE_E2E = choices_to_shape([(0,), (1,), (0, 0), (1, 0), (0, 0, 0)])
#: EAGLE-2/3: beam 2 per depth, the 4 best nodes; the shape (a chain) gives the depth.
DYNAMIC = DynamicTree(top_k=2, nodes=4)


@dataclass(frozen=True)
class Proposer:
    name: str
    build: Callable[[TinyTransformer, bool], Drafter]
    processes: tuple[Process, ...]
    default_rule: str
    exact_shape: tuple[int, ...]  # the tree (or depth chain) of the exact multi-step check
    shape: tuple[int, ...]  # the tree (or depth chain) of the sampled decoding loop
    doc: str
    #: the model that verifies, given the target (None: the target itself)
    verifier: Callable[[TinyTransformer, bool], TinyTransformer] | None = None

    def make_drafter(self, target: TinyTransformer, trained: bool = True) -> Drafter:
        return self.build(target, trained)

    def exact_rules(self, process_index: int = 0) -> list[str]:
        """The rules declared exact for this proposer's process (its first by default) that
        verify its drafts: chain-only rules only when the process and the shape are chains."""
        proc = self.processes[process_index]
        chain = DraftTree(self.shape, "shape").is_chain and proc.chain
        return [r.name for r in RULES.values() if proc.name in r.exact_for and r.applies_to(chain)]

    def verifying_target(self, target: TinyTransformer, trained: bool = True) -> TinyTransformer:
        """The model whose laws verify this proposer's drafts on ``target``: ``target`` itself,
        or the fine-tuned backbone for a proposer that fine-tunes it (Medusa-2)."""
        return target if self.verifier is None else self.verifier(target, trained)

    @property
    def process(self) -> Process:
        return self.processes[0]


def _net(make: Callable[[TinyTransformer], DraftNet]) -> Callable[[TinyTransformer, bool], Drafter]:
    memo: weakref.WeakKeyDictionary[TinyTransformer, dict[bool, Drafter]] = weakref.WeakKeyDictionary()

    def build(target: TinyTransformer, train: bool) -> Drafter:
        per_target = memo.setdefault(target, {})
        if train not in per_target:
            net = make(target)
            per_target[train] = (trained(net, target) if train else net).drafter(target)
        return per_target[train]

    return build


def _plain(make: Callable[[TinyTransformer], object]) -> Callable[[TinyTransformer, bool], Drafter]:
    return lambda target, train: as_drafter(make(target))  # type: ignore[arg-type]


_CHAINS = (PROCESSES["iid_chain"], PROCESSES["onehot_chain"])
_TOPK = (PROCESSES["onehot_siblings"], PROCESSES["topk_siblings"])

PROPOSERS: dict[str, Proposer] = {
    p.name: p
    for p in [
        Proposer(
            "draft",
            _plain(draft_model),
            _CHAINS,
            "token",
            CHAIN2,
            CHAIN3,
            "an independent smaller transformer; sampled chain (or its greedy one-hot chain)",
        ),
        Proposer(
            "ngram",
            _plain(lambda t: NgramLM(t.vocab)),
            (PROCESSES["onehot_chain"],),
            "token",
            CHAIN2,
            CHAIN3,
            "prompt lookup: one-hot drafts continuing the last earlier match of the context's tail",
        ),
        Proposer(
            "medusa",
            _net(lambda t: MedusaHeads(t, heads=3)),
            _TOPK,
            "rrs",
            TREE_SMALL,
            TREE_E2E,
            "Medusa-1: 3 residual heads on the frozen target's last hidden state; static top-k tree",
        ),
        Proposer(
            "medusa2",
            medusa2_drafter,
            _TOPK,
            "rrs",
            TREE_SMALL,
            TREE_E2E,
            "Medusa-2: the backbone fine-tuned with the 3 heads; verified by the fine-tuned backbone",
            verifier=medusa2_verifier,
        ),
        Proposer(
            "eagle1",
            _net(Eagle1Net),
            _TOPK,
            "rrs",
            TREE_SMALL,
            TREE_E2E,
            "EAGLE-1: (feature, next token) -> next feature, the target's head; static top-k tree",
        ),
        Proposer(
            "eagle2",
            _net(Eagle1Net),
            (DYNAMIC,),
            "rrs",
            CHAIN2,
            CHAIN3,
            "EAGLE-2: EAGLE-1's network with the dynamic tree (beam 2, top 4 nodes)",
        ),
        Proposer(
            "eagle3",
            _net(Eagle3Net),
            (DYNAMIC,),
            "rrs",
            CHAIN2,
            CHAIN3,
            "EAGLE-3: fused low/mid/high features, own head, training-time test; dynamic tree",
        ),
        Proposer(
            "mtp",
            _net(lambda t: MTPModules(t, modules=3)),
            _CHAINS,
            "token",
            CHAIN2,
            CHAIN3,
            "DeepSeek-V3 MTP: 3 sequential modules sharing the target's embedding and head; chain",
        ),
        Proposer(
            "dflash",
            _net(lambda t: DFlashNet(t, block=3)),
            _CHAINS,
            "token",
            CHAIN2,
            CHAIN3,
            "DFlash-style: one pass, a block of 3 laws that ignore the other drafts; chain",
        ),
    ]
}

__all__ = ["PROPOSERS", "DraftNet", "Drafter", "DynamicTree", "NgramLM", "Proposer", "draft_model"]
