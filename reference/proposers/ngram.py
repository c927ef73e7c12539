"""Prompt lookup / n-gram drafting: continue the context the way its tail continued before.

The draft "law" after a context is one-hot at the token that followed the most recent earlier
occurrence of the context's last ``n`` tokens (trying n = max_n down to 1); with no earlier
occurrence, at the context's last token. It is deterministic, so its chains are one-hot drafts
(process ``onehot_chain``): token-level verification with q = one-hot is exact for them
(proofs_notes/token.md, processes.md).

Its declared process, and why: proofs_notes/proposers.md (tests/test_proposers.py).
"""

from __future__ import annotations

from specproof.reference.errors import UsageError


class NgramLM:
    """A deterministic draft model over ``vocab`` tokens (a reference ``LM``)."""

    def __init__(self, vocab: int, max_n: int = 3) -> None:
        if max_n < 1:
            raise UsageError(f"max_n: must be >= 1, got {max_n}")
        self.vocab = vocab
        self.max_n = max_n

    def lookup(self, context: tuple[int, ...]) -> int:
        """The token after the last earlier match of the context's tail (longest tail first)."""
        for n in range(min(self.max_n, len(context) - 1), 0, -1):
            tail = context[-n:]
            for start in range(len(context) - n - 1, -1, -1):
                if context[start : start + n] == tail:
                    return context[start + n]
        return context[-1]

    def law(self, context: tuple[int, ...]) -> tuple[float, ...]:
        if not context:
            raise UsageError("context: needs at least the last committed token")
        x = self.lookup(context)
        return tuple(1.0 if i == x else 0.0 for i in range(self.vocab))
