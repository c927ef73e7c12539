"""Which ids end a generation at its next token: the stopping event the token test scores.

A request with stop strings ends its output at the first token whose text completes one
(reference/sampling.py: ``Sampling.end``). Under a lossless engine the output stops after
``out`` with the target's probability of the ids that would end it there, so the indicator of
stopping less that probability has mean 0 given the past, like the end of sequence's
(proofs_notes/token_audit.md, claim 5). Reading those ids token by token over the vocabulary would
cost a string search per id and position; :class:`Endings` reads them from an index built once per
setting:

* the ids whose own text holds a stop string;
* for each split of a stop string into a head and a tail (both non-empty), the ids whose text
  starts with the tail: they end the output where the text so far ends with the head.

No stop string occurs in the text before the next token (the output would have ended), so a
match the next token makes ends inside its text: one of the two kinds above. The end of
sequence, where the setting has one, ends it too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specproof.reference.sampling import Sampling

#: the most tails whose ending ids are kept at once
MEMO_TAILS = 4096


class Endings:
    """The ids that end an output of ``setting`` at its next token (module docstring)."""

    def __init__(self, setting: Sampling) -> None:
        self.eos = setting.eos
        self.texts = setting.texts
        self.longest = max((len(t) for t in setting.stop), default=0)
        inside = {i for i, text in enumerate(self.texts) if any(t in text for t in setting.stop)}
        self.inside = frozenset(inside)
        #: (head, the ids whose text starts with the tail that completes it)
        self.after: list[tuple[str, frozenset[int]]] = []
        for t in setting.stop:
            for cut in range(1, len(t)):
                head, tail = t[:cut], t[cut:]
                ids = frozenset(i for i, text in enumerate(self.texts) if text.startswith(tail))
                if ids:
                    self.after.append((head, ids))
        self._memo: dict[str, np.ndarray] = {}

    def after_output(self, out: Sequence[int]) -> list[np.ndarray]:
        """For each position ``d`` of ``out``, the ids (sorted) that end the output at token ``d``
        given ``out[:d]`` (which has not ended)."""
        found: list[np.ndarray] = []
        text = ""
        for x in out:
            found.append(self._after_tail(text[-(self.longest - 1) :] if self.longest > 1 else ""))
            text += self.texts[x] if 0 <= x < len(self.texts) else ""
        return found

    def _after_tail(self, tail: str) -> np.ndarray:
        """The ending ids after a text that ends with ``tail`` (its last ``longest - 1``
        characters: all a match can take from it), memoized by the tail."""
        got = self._memo.get(tail)
        if got is None:
            ids = set(self.inside)
            for head, more in self.after:
                if tail.endswith(head):
                    ids |= more
            if self.eos is not None:
                ids.add(self.eos)
            got = np.fromiter(sorted(ids), dtype=np.int64, count=len(ids))
            got.flags.writeable = False
            if len(self._memo) >= MEMO_TAILS:
                self._memo.clear()  # bounded: the tails seen last are read again soonest
            self._memo[tail] = got
        return got
