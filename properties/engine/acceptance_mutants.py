"""A bug that keeps the law and loses the speed, and its correct twin, for the acceptance oracle
(:mod:`.acceptance`).

``mutant.stale_draft_kv``: the draft model's KV cache misses the token the last step committed, so
each step's drafts are drawn after a context one token stale (the context without its last
token, then the step's drafts). The verifier is told the law the drafts truly came from, so every
emitted token keeps the target's law (token-level verification is exact for any draft law it is
told); but the stale law is further from the target's, and fewer drafts are accepted than the
engine's own draft law (the fresh one, which it declares) predicts. The law tests pass it; the
acceptance oracle calls it ``acceptance_low``. ``alternative.fresh_draft_kv`` is the same engine
with the cache up to date: acceptance as predicted, ``pass``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from specproof.properties.engine.contract import Sampling, Seq
from specproof.properties.engine.loops import CHAIN3, ReferenceEngine, engine_target
from specproof.properties.verdicts import Planted, Verdict, planted
from specproof.reference.models import LM
from specproof.reference.proposers.draft_model import draft_model


class _StaleLM:
    """The draft model read after a step's context with its last token missing: the law after
    ``context`` is the model's after ``context`` less the token at ``len(step) - 1``."""

    def __init__(self, lm: LM, step: Seq) -> None:
        self.lm, self.cut, self.vocab = lm, len(step) - 1, lm.vocab

    def law(self, context: Sequence[int]) -> Sequence[float]:
        ctx = tuple(int(x) for x in context)
        stale = ctx[: self.cut] + ctx[self.cut + 1 :] if len(ctx) > 1 else ctx
        return self.lm.law(stale)


class DraftKVEngine(ReferenceEngine):
    """The reference loop (a draft model, an i.i.d. chain of 3, token-level verification) whose
    drafts come from a draft KV cache that is ``stale`` or not; it declares the fresh draft law
    and the ``token_chain`` rule either way."""

    def __init__(self, sampling: Sampling, stale: bool) -> None:
        target = engine_target()
        self.fresh = draft_model(target)
        drafter: Any = (lambda step: _StaleLM(self.fresh, step)) if stale else self.fresh
        super().__init__(target, drafter, "iid_chain", "token", CHAIN3, sampling)
        # what the engine believes it drafts from: the draft model after the true context
        self.draft_law = self._fresh_law
        self.acceptance_rule = {"rule": "token_chain", "drafts": len(CHAIN3) - 1}

    def _fresh_law(self, context: Sequence[int]) -> Sequence[float]:
        return [float(v) for v in self.fresh.law(tuple(int(x) for x in context))]


def builders() -> dict[str, Planted]:
    """The planted fault and its correct twin, for the registry."""
    return planted(
        Planted(
            "mutant.stale_draft_kv",
            Verdict.ACCEPTANCE_LOW,
            "the draft KV cache misses the last committed token: drafts from a context one token stale, "
            "the verifier told their true law (the law holds), fewer accepted than the fresh draft law "
            "predicts",
            functools.partial(DraftKVEngine, stale=True),
        ),
        Planted(
            "alternative.fresh_draft_kv",
            Verdict.PASS,
            "the same loop with the draft KV cache up to date: acceptance as its draft law predicts",
            functools.partial(DraftKVEngine, stale=False),
        ),
    )
