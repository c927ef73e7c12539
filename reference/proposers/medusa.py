"""Medusa (Cai et al. 2024, "Medusa: Simple LLM Inference Acceleration Framework with Multiple
Decoding Heads", sec. 2.1): k extra heads on the target's last hidden state, head j predicting
the token j + 1 positions ahead, drafted as a static sparse tree of top-k tokens.

Head ``j`` (j = 1..K) is one residual block and a linear map to the vocabulary:
``p_j = softmax(U_j (h + SiLU(W_j h)))``, with ``h`` the target's final-normed top hidden state
at the last position it has processed (the token before node 0: the target's own head there
predicted node 0). Medusa-1 keeps the backbone frozen and initializes ``W_j = 0`` and ``U_j`` to
the target's output head. In a draft tree every node at depth ``d`` drafts its children from
head ``d + 1``; the law does not depend on the draft path, only on its length.

The tree comes from a *choices list* (Medusa's "medusa_choices"): each entry is a path of ranks,
``(r_1, .., r_d)`` meaning "the r_1-th token of head 1, then the r_2-th of head 2, ...".
:func:`choices_to_shape` turns it into the shape of the ``topk_siblings`` / ``onehot_siblings``
processes (the i-th child of a node takes the i-th most likely token). Medusa's own sampling
rule, typical acceptance, is not lossless (proofs_notes/typical.md); the default here is RRS on
the one-hot drafts, exact because the tree is a deterministic function of the context
(proofs_notes/processes.md).

Its declared process, and why: proofs_notes/proposers.md (tests/test_proposers.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from specproof.reference.errors import UsageError

from ..transformer import TinyTransformer, random_param, rms_norm
from .selfdraft import DraftNet


def choices_to_shape(choices: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The parents of the tree a choices list describes (node 0 the root, nodes ordered by
    depth, then by path). The list must be prefix-closed and, under each node, use ranks
    ``0..k-1`` exactly once each."""
    paths = sorted({tuple(c) for c in choices}, key=lambda c: (len(c), c))
    if len(paths) != len(choices):
        raise UsageError("choices: a path is listed twice")
    index: dict[tuple[int, ...], int] = {(): 0}
    parents = [-1]
    for path in paths:
        if not path or any(r < 0 for r in path):
            raise UsageError(f"choices: {path} is not a non-empty path of ranks >= 0")
        if path[:-1] not in index:
            raise UsageError(f"choices: {path} is listed without its parent {path[:-1]}")
        index[path] = len(parents)
        parents.append(index[path[:-1]])
    for path in paths:
        if path[-1] > 0 and path[:-1] + (path[-1] - 1,) not in index:
            raise UsageError(f"choices: {path} skips rank {path[-1] - 1} under the same parent")
    return tuple(parents)


class MedusaHeads(DraftNet):
    def __init__(self, target: TinyTransformer, heads: int = 3, seed: int | None = None) -> None:
        """Medusa-1's initialization (``W_j = 0``), or Gaussian ``W_j`` drawn from ``seed``."""
        super().__init__(target)
        if heads < 1:
            raise UsageError(f"heads: must be >= 1, got {heads}")
        W = target.config.width
        self.max_depth = heads
        if seed is None:
            self.res = torch.nn.Parameter(torch.zeros(heads, W, W, dtype=torch.float64))
        else:
            self.res = random_param(torch.Generator().manual_seed(seed), heads, W, W, scale=1 / math.sqrt(W))
        lm_head = target.embed.detach().T / math.sqrt(W)
        self.out = torch.nn.Parameter(lm_head.expand(heads, -1, -1).clone())

    def draft_logits(
        self, target: TinyTransformer, hidden: list[torch.Tensor], tokens: torch.Tensor, n: int
    ) -> torch.Tensor:
        j = len(tokens) - n  # depth of the node; its children come from head j + 1 (index j)
        h = rms_norm(hidden[-1][n - 2], target.norm)
        return (h + torch.nn.functional.silu(h @ self.res[j])) @ self.out[j]


#: The tree ``specproof e2e`` uses: 2 + 2 + 1 drafts, depth 3.
E2E_CHOICES = ((0,), (1,), (0, 0), (1, 0), (0, 0, 0))
