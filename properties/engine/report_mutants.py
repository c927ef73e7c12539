"""An in-process engine that reports the probability of each token it emits, correct and with one
planted fault, for the reports check (:mod:`.reporting`) and the report of a ``misreported``
engine audit.

``alternative.target_reports``: the reference loop (a draft model, an i.i.d. chain of 3,
token-level verification) whose ``generate_many(..., report=True)`` gives, for each emitted
token, its probability under the target's law at its own prefix, as a server's ``logprobs`` do.
``mutant.draft_reports``: the same loop reporting, for each accepted draft, the draft model's
probability of it instead (the class of a server that reports the probabilities the drafter
computed for tokens the verifier kept, PR#27196's); the corrected and bonus tokens, drawn from the
target, are reported right. The emitted tokens keep the target's law either way, so the law tests
pass both; the reports check calls the mutant ``misreported``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from specproof.properties.engine.contract import Generation, Sampling
from specproof.properties.engine.loops import CHAIN3, ReferenceEngine, engine_target
from specproof.properties.verdicts import Planted, Verdict, planted
from specproof.reference.proposers.draft_model import draft_model


class ReportingEngine(ReferenceEngine):
    """The reference loop that reports its tokens' probabilities (module docstring); with
    ``draft_reports`` an accepted draft is reported with the draft model's probability."""

    reports_probabilities = True

    def __init__(self, sampling: Sampling, draft_reports: bool) -> None:
        target = engine_target()
        super().__init__(target, draft_model(target), "iid_chain", "token", CHAIN3, sampling)
        self.draft_reports = draft_reports

    def generate_many(
        self, prompt_ids: list[int], max_new_tokens: int, seeds: Sequence[int], report: bool = False
    ) -> list[Generation]:
        out = []
        for seed in seeds:
            tokens = self.generate(prompt_ids, max_new_tokens, seed)
            steps = tuple(self.last_steps)
            counters = dict(self.last_counters)
            reported = self._reported(prompt_ids, tokens, steps) if report else None
            out.append(
                Generation(
                    tuple(tokens),
                    counters.get("drafted"),
                    counters.get("accepted"),
                    len(steps),
                    reported,
                    steps,
                )
            )
        return out

    def _reported(self, prompt: list[int], tokens: list[int], steps: Sequence[int]) -> tuple[float, ...]:
        """Each emitted token's probability: the target's at its prefix, or (``draft_reports``)
        the draft model's for a token that was an accepted draft (every token of a step but its
        last, the one the target drew)."""
        drafted = np.zeros(len(tokens), dtype=bool)
        at = 0
        for n in steps:
            drafted[at : at + n - 1] = True
            at += n
        out = []
        for d, x in enumerate(tokens):
            context = list(prompt) + list(tokens[:d])
            if self.draft_reports and drafted[d]:
                out.append(float(self._draft_law(context)[x]))  # bug: the drafter's probability
            else:
                out.append(float(self.target_law(context)[x]))
        return tuple(out)


def builders() -> dict[str, Planted]:
    """The planted fault and its correct twin, for the registry."""
    return planted(
        Planted(
            "mutant.draft_reports",
            Verdict.MISREPORTED,
            "reports the draft model's probability for each accepted draft (the probabilities the "
            "drafter computed for tokens the verifier kept, PR#27196's class): the law holds, the "
            "reported probabilities do not",
            functools.partial(ReportingEngine, draft_reports=True),
        ),
        Planted(
            "alternative.target_reports",
            Verdict.PASS,
            "the same loop reporting each token's probability under the target's law at its prefix",
            functools.partial(ReportingEngine, draft_reports=False),
        ),
    )
