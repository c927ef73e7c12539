"""Request parameters mishandled under speculation: the public bug classes, each a one-line
defect of the reference loop, and the settings that exercise them.

The reference loop (:func:`specproof.reference.decode.decode`) applies every request parameter
at every node of the draft tree with that node's own context (reference/sampling.py). Each
engine here changes one thing about how a node's law is computed (:data:`DEFECTS`), modelled on
what engines shipped:

* ``penalty_ignored_at_drafts``: penalties applied where no draft is involved (the first new
  token) and not at draft positions (a fused speculative path that skips them);
* ``penalty_per_step``: the penalties count the tokens committed before the step, not the drafts
  on the node's path (state updated once per step, not once per token);
* ``penalty_counted_twice``: the last committed token counted twice;
* ``penalty_bonus_only``, ``min_p_bonus_only``, ``logit_bias_bonus_only``: the parameter applied
  to the bonus token only (the law after every draft), not where drafts are verified;
* ``one_grammar_mask``: one grammar state, the step's, for every position of the step;
* ``min_new_tokens_in_steps``: end of sequence held back by the tokens committed before the step;
* ``min_new_tokens_counts_drafts_ahead``: the count reads every token evaluated in the step, the
  drafts after the node included, so end of sequence is let through early (llama-cpp-python
  0.3.36 with prompt lookup: its min-tokens processor reads the whole evaluated batch);
* ``top_p_draft_only``: top-p applied to the draft side only;
* ``ignores_penalties``: penalties accepted and applied nowhere, in the samples and the engine's
  own law alike: the law test sees a consistent engine, and only the audit's parameter check
  (the law must change where the parameter changes it) can call it (``ignored_parameter``).

Every defect but the last keeps the verifier exact: the loop tells it the wrong target law, so the
tokens follow a law that is not the request's, which the engine audit must see
(tests/test_sampling_params.py; proofs_notes/sampling_params.md). The drafter applies the request
correctly in all of them, and ``alternative.sampling_params`` is the same loop without a defect.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import replace

from specproof.properties.engine.contract import Sampling
from specproof.properties.engine.loops import CHAIN3, ReferenceEngine, engine_target
from specproof.properties.verdicts import Planted, Verdict, planted
from specproof.reference.decode import NodeLaw, node_context
from specproof.reference.proposers.draft_model import draft_model
from specproof.reference.sampling import Grammar, View, processed_law
from specproof.reference.tree import DraftTree

#: the engine target's 8 tokens as text, for a grammar written as a regex
TEXTS = tuple("abcdefgh")
EOS = 7
#: the output alternates a token of {a, b, c} with one of {d, e, f}, and may end after {a, b, c}
GRAMMAR = Grammar.from_regex("[a-c]([d-f][a-c])*", TEXTS)
PENALTIES = Sampling(1.0, repetition_penalty=1.6, presence_penalty=0.6)


def _without_penalties(s: Sampling) -> Sampling:
    return replace(s, repetition_penalty=None, presence_penalty=0.0, frequency_penalty=0.0)


def _leaf(tree: DraftTree, i: int) -> bool:
    return not tree.children[i]


def defect_law(defect: str, sampling: Sampling, prompt_len: int) -> NodeLaw:
    """How a node's law is computed under ``defect`` (module docstring)."""

    def law(
        i: int, row: list[float], ctx: tuple[int, ...], tree: DraftTree, tokens: Sequence[int]
    ) -> list[float]:
        node_ctx = node_context(ctx, tree, tokens, i)
        s, view = sampling, None
        if defect == "penalty_ignored_at_drafts" and i > 0:
            s = _without_penalties(sampling)
        elif defect == "penalty_per_step":
            view = View(counted=ctx)
        elif defect == "penalty_counted_twice":
            view = View(counted=node_ctx + ctx[-1:])
        elif defect == "penalty_bonus_only" and not _leaf(tree, i):
            s = _without_penalties(sampling)
        elif defect == "min_p_bonus_only" and not _leaf(tree, i):
            s = replace(sampling, min_p=None)
        elif defect == "logit_bias_bonus_only" and not _leaf(tree, i):
            s = replace(sampling, logit_bias=())
        elif defect in ("one_grammar_mask", "min_new_tokens_in_steps"):
            view = View(generated=ctx[prompt_len:])
        elif defect == "min_new_tokens_counts_drafts_ahead":
            view = View(generated=ctx[prompt_len:] + tuple(tokens[1:]))
        elif defect == "top_p_draft_only":
            s = replace(sampling, top_p=None)
        return processed_law(row, s, node_ctx, prompt_len, view=view)

    return law


class DefectEngine(ReferenceEngine):
    """The reference loop (draft model, i.i.d. chain of 3, token-level verification) with one
    defect of :data:`DEFECTS` in how it computes the target's law at a node."""

    def __init__(self, sampling: Sampling, defect: str) -> None:
        target = engine_target()
        if defect == "ignores_penalties":  # in its samples and in its law alike
            sampling = _without_penalties(sampling)
        super().__init__(target, draft_model(target), "iid_chain", "token", CHAIN3, sampling)
        self.defect = defect

    def node_law(self, prompt: tuple[int, ...]) -> NodeLaw | None:
        return None if self.defect in PLAIN else defect_law(self.defect, self.sampling, len(prompt))


#: defect -> (the settings that exercise it, what it models)
DEFECTS: dict[str, tuple[tuple[Sampling, ...], str]] = {
    "penalty_ignored_at_drafts": (
        (PENALTIES,),
        "repetition and presence penalties skipped at draft positions (a fused speculative path)",
    ),
    "penalty_per_step": ((PENALTIES,), "penalty counts updated once per step, not once per token"),
    "penalty_counted_twice": (
        (Sampling(1.0, frequency_penalty=1.2),),
        "the last committed token counted twice by the frequency penalty",
    ),
    "penalty_bonus_only": ((PENALTIES,), "penalties applied to the bonus token only"),
    "min_p_bonus_only": ((Sampling(1.0, min_p=0.25),), "min-p applied to the bonus token only"),
    "logit_bias_bonus_only": (
        (Sampling(1.0, logit_bias=((3, 2.0), (5, -math.inf))),),
        "logit bias applied to the bonus token only",
    ),
    "one_grammar_mask": (
        (Sampling(1.0, eos=EOS, grammar=GRAMMAR),),
        "one grammar mask, the step's, for every draft position",
    ),
    "min_new_tokens_in_steps": (
        (Sampling(1.0, eos=EOS, min_new_tokens=3, logit_bias=((EOS, 2.5),)),),
        "min_new_tokens counted in steps (end of sequence held back by the committed tokens only)",
    ),
    "min_new_tokens_counts_drafts_ahead": (
        (Sampling(1.0, eos=EOS, min_new_tokens=3, logit_bias=((EOS, 2.5),)),),
        "min_new_tokens counts the step's drafts ahead of the node (llama-cpp-python 0.3.36)",
    ),
    "top_p_draft_only": ((Sampling(1.0, top_p=0.6),), "top-p applied to the drafts, not to the target"),
}
#: defects that do not touch a node's law: the correct loop, and one that drops a parameter everywhere
PLAIN = ("none", "ignores_penalties")
#: the correct loop under every setting above (and under all of them at once where they combine)
CORRECT_SETTINGS: tuple[Sampling, ...] = tuple(dict.fromkeys(s for ss, _ in DEFECTS.values() for s in ss))


def builders() -> dict[str, Planted]:
    """The planted faults of this module, by name, for the registry (each a builder, its
    settings, the verdict the audit must give it, what it is)."""
    out = [
        Planted(
            f"mutant.{defect}", Verdict.LOSSY, doc, functools.partial(DefectEngine, defect=defect), settings
        )
        for defect, (settings, doc) in DEFECTS.items()
    ]
    out.append(
        Planted(
            "mutant.ignores_penalties",
            Verdict.CONTRACT_VIOLATION,
            "accepts penalties but applies none, in its samples and in its own law alike (only the "
            "parameter check can tell: the law test sees a consistent engine)",
            functools.partial(DefectEngine, defect="ignores_penalties"),
            (PENALTIES,),
        )
    )
    out.append(
        Planted(
            "alternative.sampling_params",
            Verdict.PASS,
            "the reference loop with every request parameter applied at every node (penalties, min-p, "
            "logit bias, a grammar, min_new_tokens, top-p)",
            functools.partial(DefectEngine, defect="none"),
            CORRECT_SETTINGS,
        )
    )
    return planted(*out)
