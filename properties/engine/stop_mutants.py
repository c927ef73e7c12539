"""Stop conditions handled once per step instead of once per token: the public bug classes, each
a loop that checks where its output ends at the wrong place, and the loop that checks it right.

A speculative step emits a block of tokens (the accepted drafts and the verifier's own token).
The output must end at the first token that ends it (an ``eos``, the token whose text completes a
stop string: :meth:`~specproof.reference.sampling.Sampling.end`), wherever in the block that
token lies, and nothing after it may be returned (proofs_notes/stops.md). The faults here
(:data:`FAULTS`) are what engines shipped:

* ``past_block``: the stop is seen, but only once the block is emitted: the block's tokens after
  the stop are returned with it;
* ``tail_only``: only the block's tail is scanned (does the text end with a stop string?), so a
  stop completed inside an accepted block is missed and generation goes on past it;
* ``length_past_block``: ``max_new_tokens`` is checked once per step, so when the M-th token lies
  inside an accepted block the block's tokens after it are returned too (more than asked).

Each runs the reference loop (reference/decode.py: a draft model, an i.i.d. chain of 3,
token-level verification) with the stop strings taken out of the request, then cuts the tokens
as its rule says, block by block. That is the same thing as stopping: a loop's tokens before it
stops do not depend on whether it will stop. With the right rule (``alternative.stops``) the cut
is :meth:`Sampling.end`'s, and the engine passes.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from specproof.properties.engine.contract import Sampling, Seq
from specproof.properties.engine.loops import CHAIN3, ReferenceEngine, engine_target
from specproof.properties.verdicts import Planted, Verdict, planted
from specproof.reference.proposers.draft_model import draft_model

#: the engine target's 8 tokens as text
TEXTS = tuple("abcdefgh")
#: two stop strings: one a single token's text, one that spans two tokens
STOPS = Sampling(1.0, stop=("c", "ab"), texts=TEXTS)
STOPS_EOS = Sampling(0.7, eos=7, stop=("c", "ab"), texts=TEXTS)


def cut(sampling: Sampling, tokens: Seq, blocks: Seq, fault: str) -> int:
    """How many of ``tokens`` (emitted in ``blocks`` of these sizes) a loop with ``fault``
    returns (module docstring); ``"none"`` is :meth:`Sampling.end`'s cut."""
    end = sampling.end(tokens)
    if fault == "none":
        return len(tokens) if end is None else end
    done = 0
    for size in blocks:
        block_end = done + size
        if fault == "past_block" and end is not None and end <= block_end:
            return min(block_end, len(tokens))
        if fault == "tail_only":
            text = "".join(sampling.texts[x] for x in tokens[:block_end])
            if (sampling.eos is not None and tokens[block_end - 1] == sampling.eos) or any(
                text.endswith(t) for t in sampling.stop
            ):
                return min(block_end, len(tokens))
        done = block_end
        if done >= len(tokens):
            break
    return len(tokens)


class StopEngine(ReferenceEngine):
    """The reference loop whose output is cut where ``fault`` says (module docstring)."""

    def __init__(self, sampling: Sampling, fault: str) -> None:
        target = engine_target()
        super().__init__(target, draft_model(target), "iid_chain", "token", CHAIN3, sampling)
        self.fault = fault

    def run(self, prompt: Seq, max_new_tokens: int, rng: np.random.Generator) -> list[int]:
        full = self.sampling
        self.sampling = replace(full, stop=(), eos=None)  # the loop runs on; the cut decides
        # a length checked per step: the loop runs a whole step past M, the cut keeps its block
        extra = len(CHAIN3) - 1 if self.fault == "length_past_block" else 0
        try:
            tokens = super().run(prompt, max_new_tokens + extra, rng)
        finally:
            self.sampling = full
        if extra:
            k = cut(full, tuple(tokens), tuple(self.last_steps), "none")
            if k > max_new_tokens:  # no stop before M: the block holding token M is returned whole
                ends = np.cumsum(self.last_steps)
                k = min(int(ends[np.searchsorted(ends, max_new_tokens)]), len(tokens))
        else:
            k = cut(full, tuple(tokens), tuple(self.last_steps), self.fault)
        steps, left = [], k
        for size in self.last_steps:
            if left <= 0:
                break
            steps.append(min(size, left))
            left -= size
        self.last_steps = steps
        return tokens[:k]


#: registered name -> (fault, what it models)
FAULTS: dict[str, tuple[str, str]] = {
    "mutant.stop_past_block": (
        "past_block",
        "a stop inside an accepted block is seen once the block is emitted: the block's tokens after it "
        "are returned too",
    ),
    "mutant.stop_tail_only": (
        "tail_only",
        "only the tail of each block is scanned for a stop string: a stop completed inside an accepted "
        "block is missed and generation goes on",
    ),
    "mutant.length_past_block": (
        "length_past_block",
        "max_new_tokens is checked once per step: when the M-th token lies inside an accepted block, the "
        "block's tokens after it are returned too",
    ),
}


def builders() -> dict[str, Planted]:
    """The planted faults of this module and the correct loop, for the registry."""
    out = [
        Planted(
            name,
            Verdict.CONTRACT_VIOLATION,
            doc,
            functools.partial(StopEngine, fault=fault),
            (STOPS, STOPS_EOS),
        )
        for name, (fault, doc) in FAULTS.items()
    ]
    out.append(
        Planted(
            "alternative.stops",
            Verdict.PASS,
            "the reference loop ending its output at the first eos or stop string, wherever in a block "
            "it lies",
            functools.partial(StopEngine, fault="none"),
            (STOPS, STOPS_EOS),
        )
    )
    return planted(*out)
