"""One setting of a served engine asking for n completions a request (the completions axis of
:mod:`specproof.properties.engine.completions`): :class:`CompletionsEngine`.

``generate_many`` sends its seeds by consecutive groups of ``n`` (a shorter last group asks for
fewer), one request a group seeded by the group's first seed, with the family's field for the
number of completions (:attr:`Profile.completions`: llama-server's ``n_cmpl``); the answer's
completions come back in their order, one :class:`Generation` a seed, ``choice`` its index. It
streams nothing and has no twin (the control and the streaming check run on one completion a
request); the laws are read where the setting's own engine reads them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from specproof.properties.endpoint.engine import EndpointEngine
from specproof.properties.endpoint.families.base import AnswerError
from specproof.properties.engine.contract import EngineUnavailable, Generation
from specproof.reference.errors import UsageError


class CompletionsEngine(EndpointEngine):
    """One setting, ``n`` completions a request (module docstring)."""

    def __init__(self, base: EndpointEngine, n: int) -> None:
        if base.profile.completions is None:
            raise UsageError(f"completions: profile {base.profile.name} asks for one completion a request")
        super().__init__(base.client, base.profile, base.sampling, base.vocab, None, base._laws)
        self.n, self.endpoint = n, base.endpoint
        self.batch = base.batch * n
        self.generate_stream = None
        self.submit_many = None  # type: ignore[assignment]  # its requests are groups of n seeds
        for declared in ("draft_law", "acceptance_rule"):  # what a suite declared on the setting
            if hasattr(base, declared):
                setattr(self, declared, getattr(base, declared))

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        return self._one_of_many(prompt_ids, max_new_tokens, seed)

    def generate_many(
        self, prompt_ids: list[int], max_new_tokens: int, seeds: Sequence[int], report: bool = False
    ) -> list[Generation]:
        groups = [list(seeds[i : i + self.n]) for i in range(0, len(seeds), self.n)]
        requests = [self._generation(prompt_ids, max_new_tokens, g[0], report) for g in groups]
        if not requests:
            return []
        bodies = [self.profile.completions_body(body, len(g)) for (_, body), g in zip(requests, groups)]
        try:
            answers = self.client.post_many(requests[0][0], bodies)
        except EngineUnavailable as e:
            done = [x for a, g in zip(e.done, groups) for x in self._completions(a, len(g), report)]
            raise EngineUnavailable(e.detail, done) from e
        return [x for a, g in zip(answers, groups) for x in self._completions(a, len(g), report)]

    def _completions(self, answer: Any, n: int, report: bool) -> list[Generation]:
        got = self.profile.read_completions(answer, report)
        if len(got) != n:
            raise AnswerError(f"asked for {n} completions, the answer has {len(got)}: {str(answer)[:200]}")
        out = []
        for j, g in enumerate(got):
            if report and g.reported is not None and len(g.reported) > len(g.tokens):
                g = dataclasses.replace(g, reported=g.reported[: len(g.tokens)])
            out.append(dataclasses.replace(g, choice=j))
        return out

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "completions": self.n}
