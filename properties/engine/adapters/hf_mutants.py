"""Bugs planted in HF transformers' own assisted-decoding loop (real-code mutants): the loop is
transformers' as installed, with one change made while a ``generate`` call runs, so the audit is
shown catching the bug a user's patch or a fork could bring, in the code it would be in.

* **shared uniform** (:func:`shared_uniform`): ``_speculative_sampling`` draws its acceptance
  uniforms with one ``torch.rand_like`` over the step's drafts; the mutant makes that one uniform
  repeated at every draft position. Each draft's acceptance probability is still right on its
  own, so each position's marginal law given the step's start is not what breaks; the joint law
  of a step's tokens is (acceptances are positively dependent: a draft accepted makes the next
  one likelier to be). engine ``hf.assisted[shared_uniform]``, proofs_notes/thirdparty.md.
* **stale context** (:func:`stale_context`): the verification calls the logits processors at
  candidate position ``i`` on the context up to the step's start instead of up to position
  ``i`` (``candidate_input_ids[:, :cur_len]`` for ``[:, :cur_len + i]``). Position 0 of every
  step is right; a draft position's law is processed as if the drafts before it were not there,
  which changes the law of every option that reads the context (penalties, n-gram bans,
  sequence bias, length-based options, lefthash watermark) and no other. The
  ``hf.assisted[stale]+...`` engines of :mod:`.hf_options` are required lossy under every such
  option, and pass under the others.

Both act only inside the engine's own ``generate`` (patched on entry, restored on exit), so
nothing else in the process sees them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from specproof.properties.engine.adapters import hf


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    real = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, real)


def _one_uniform(real: Any) -> Any:
    """``torch.rand_like`` that draws one uniform and repeats it over the tensor's shape."""

    def rand_like(t: torch.Tensor, **kw: Any) -> torch.Tensor:
        return real(t.reshape(-1)[:1], **kw).expand_as(t).clone()

    return rand_like


class SharedUniform(hf.HFEngine):
    """:class:`.hf.HFEngine` whose ``_speculative_sampling`` shares one uniform over a step."""

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        from transformers.generation import utils

        real = utils._speculative_sampling

        def mutant(*args: Any, **kwargs: Any) -> Any:
            with _patched(torch, "rand_like", _one_uniform(torch.rand_like)):
                return real(*args, **kwargs)

        with _patched(utils, "_speculative_sampling", mutant):
            return super().generate(prompt_ids, max_new_tokens, seed)


def shared_uniform(engine: hf.HFEngine) -> hf.HFEngine:
    """``engine`` (an assisted path that samples) with the shared-uniform bug planted."""
    engine.__class__ = SharedUniform
    return engine


class _Step:
    """Where the loop is: the context length at the current step's start, and whether the
    candidate generator is drafting (its own processor calls are not the verification's)."""

    start = 0
    drafting = False


def stale_context(engine: hf.HFEngine) -> hf.HFEngine:
    """``engine`` with the stale-context bug planted in its verification: the candidate
    generator's ``get_candidates`` records the context length it is called at; the processor
    list the loop verifies with then cuts every context it is given to that length."""
    from transformers import LogitsProcessorList

    step = _Step()

    class StaleList(LogitsProcessorList):
        def __call__(self, input_ids: Any, scores: torch.Tensor, **kw: Any) -> Any:
            if not step.drafting:
                input_ids = input_ids[:, : step.start]  # the bug: the context from before the drafts
            return super().__call__(input_ids, scores, **kw)

    spied = engine.target._get_candidate_generator

    def candidate_generator(*args: Any, **kwargs: Any) -> Any:
        cg = spied(*args, **kwargs)
        processors = kwargs.get("logits_processor")
        if isinstance(processors, LogitsProcessorList):
            processors.__class__ = StaleList
        real_get = cg.get_candidates

        def get_candidates(input_ids: torch.Tensor, *a: Any, **k: Any) -> Any:
            step.start, step.drafting = input_ids.shape[1], True
            try:
                return real_get(input_ids, *a, **k)
            finally:
                step.drafting = False

        cg.get_candidates = get_candidates
        return cg

    engine.target._get_candidate_generator = candidate_generator
    return engine
