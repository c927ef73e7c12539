"""Proposers: where a step's drafts come from, each declaring its proposal process.

A proposer turns the target model into a *draft model* (an :class:`~specproof.reference.models.LM`)
plus the proposal process that grows the draft tree from it (:mod:`..processes`), so that every
rule's claim ("exact for process P") applies to it directly:

=========  ==========================================  =======================  ============
name       drafts                                      processes                default rule
=========  ==========================================  =======================  ============
draft      an independent smaller transformer          iid_chain, onehot_chain  token
ngram      prompt lookup: the last matching n-gram     onehot_chain             token
=========  ==========================================  =======================  ============

Medusa, EAGLE-1/2/3, MTP and DFlash are not built yet (issue 5).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..models import LM
from ..transformer import TinyTransformer
from .draft_model import draft_model
from .ngram import NgramLM


@dataclass(frozen=True)
class Proposer:
    name: str
    make_draft: Callable[[TinyTransformer], LM]
    processes: tuple[str, ...]
    default_rule: str
    doc: str


PROPOSERS: dict[str, Proposer] = {
    p.name: p
    for p in [
        Proposer(
            "draft",
            lambda target: draft_model(target),
            ("iid_chain", "onehot_chain"),
            "token",
            "an independent smaller transformer; sampled chain (or its greedy one-hot chain)",
        ),
        Proposer(
            "ngram",
            lambda target: NgramLM(target.vocab),
            ("onehot_chain",),
            "token",
            "prompt lookup: one-hot drafts continuing the last earlier match of the context's tail",
        ),
    ]
}

#: Proposer names the issue asks for that do not exist yet.
PLANNED = ("medusa", "eagle1", "eagle2", "eagle3", "mtp", "dflash")

__all__ = ["PLANNED", "PROPOSERS", "NgramLM", "Proposer", "draft_model"]
