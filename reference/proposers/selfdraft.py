"""What every self-drafting proposer shares: a small network reading the target's hidden states.

Medusa, EAGLE-1/2/3, MTP and DFlash draft from the *target's own features*: the hidden states
the target computed over the committed context. In the decoding loop (reference/decode.py) the
last committed token (tree node 0) is not run through the target yet, so the features available
when a step drafts are those of the committed tokens *before* it: with committed tokens
``x_0 .. x_{n-1}``, the hidden states at positions ``0 .. n-2`` (every layer's). A self-drafting
proposer needs at least two committed tokens.

A network gives, for the committed prefix and a draft path below node 0, the logits of the next
draft token (:meth:`DraftNet.draft_logits`). Bound to a prefix it is an ordinary draft model
(:class:`BoundDraft`, a reference ``LM`` over contexts that extend the prefix), so the proposal
processes and the exact oracle run on it unchanged: a step's draft model depends on the step's
committed prefix (a :data:`Drafter`), which is the only difference from an independent draft
model.

Its declared process, and why: proofs_notes/proposers.md (tests/test_proposers.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

import torch

from ..errors import ShapeError
from ..models import LM
from ..transformer import KVCache, TinyTransformer, rms_norm

Seq = tuple[int, ...]

#: A step's draft model as a function of the step's committed prefix (ending with node 0).
Drafter = Callable[[Seq], LM]


def as_drafter(draft: LM | Drafter) -> Drafter:
    """A drafter as is; an LM (an independent draft model, n-gram lookup) is the same draft
    model at every step."""
    if callable(draft) and not hasattr(draft, "law"):
        return draft
    lm = cast(LM, draft)
    return lambda prefix: lm


def target_features(target: TinyTransformer, prefix: Seq) -> list[torch.Tensor]:
    """Every layer's hidden states ``[n - 1, width]`` over the committed tokens before node 0
    (entry 0: the embeddings, entry L: the top layer, before the final norm)."""
    if len(prefix) < 2:
        raise ShapeError(
            "prefix", "a self-drafting proposer needs at least two committed tokens (features of the first)"
        )
    _, hidden = target.forward(torch.tensor(prefix[:-1]), KVCache())
    return hidden


class DraftNet(torch.nn.Module):
    """A draft network over a target; subclasses implement :meth:`draft_logits`.

    ``max_depth``: how many drafts below node 0 it can propose (Medusa's heads, MTP's modules,
    DFlash's block size); ``None`` for unlimited (EAGLE's autoregressive draft)."""

    max_depth: int | None = None

    def __init__(self, target: TinyTransformer) -> None:
        super().__init__()
        self.target_config = target.config

    def draft_logits(
        self, target: TinyTransformer, hidden: list[torch.Tensor], tokens: torch.Tensor, n: int
    ) -> torch.Tensor:
        """Logits ``[V]`` of the draft token after ``tokens`` = the committed prefix (``n``
        tokens, ``hidden`` its features) followed by a draft path (``len(tokens) - n``)."""
        raise NotImplementedError

    def check_depth(self, depth: int) -> None:
        if self.max_depth is not None and depth >= self.max_depth:
            raise ShapeError(
                "shape",
                f"{type(self).__name__} proposes at most {self.max_depth} drafts in a row; "
                f"a node at depth {depth} asks for one more",
            )

    def drafter(self, target: TinyTransformer, temperature: float = 1.0) -> Drafter:
        """Bind to a target: a step's draft model given its committed prefix."""
        cache: dict[Seq, BoundDraft] = {}

        def at(prefix: Seq) -> LM:
            if prefix not in cache:
                cache[prefix] = BoundDraft(self, target, prefix, temperature)
            return cache[prefix]

        return at


class BoundDraft:
    """A :class:`DraftNet` bound to one step's committed prefix: a reference LM whose law after
    ``prefix + path`` is ``softmax(draft_logits / temperature)`` (memoized, float64)."""

    def __init__(self, net: DraftNet, target: TinyTransformer, prefix: Seq, temperature: float) -> None:
        self.net, self.target, self.prefix = net, target, prefix
        self.vocab = target.vocab
        self.temperature = temperature
        self.hidden = target_features(target, prefix)
        self._laws: dict[Seq, tuple[float, ...]] = {}

    def law(self, context: Seq) -> tuple[float, ...]:
        n = len(self.prefix)
        if context[:n] != self.prefix:
            raise ShapeError("context", f"must extend the step's committed prefix {self.prefix}")
        if context not in self._laws:
            self.net.check_depth(len(context) - n)
            with torch.no_grad():
                logits = self.net.draft_logits(self.target, self.hidden, torch.tensor(context), n)
            self._laws[context] = self.target.law_from_logits(logits, self.temperature)
        return self._laws[context]


def fused_features(hidden: list[torch.Tensor]) -> torch.Tensor:
    """Low, middle and high features side by side ``[T, 3 * width]``: hidden states 0 (the
    embeddings), L // 2 and L (the top layer), as EAGLE-3 and DFlash fuse them."""
    L = len(hidden) - 1
    return torch.cat([hidden[0], hidden[L // 2], hidden[L]], -1)


class OwnHead(torch.nn.Module):
    """A draft network's own output head (EAGLE-3, DFlash): RMSNorm, then a linear map to the
    vocabulary, initialized from the target's tied head."""

    def __init__(self, target: TinyTransformer) -> None:
        super().__init__()
        W = target.config.width
        self.norm = torch.nn.Parameter(torch.ones(W, dtype=torch.float64))
        self.weight = torch.nn.Parameter(target.embed.detach().T.clone() / math.sqrt(W))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.norm) @ self.weight


def causal(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril()
