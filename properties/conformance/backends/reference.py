"""The reference rules behind the black-box contracts, one row at a time.

``reference.<rule>`` runs :mod:`specproof.reference.rules` on each row: it validates the row
with :func:`specproof.reference.make_step` and draws through a :class:`Sampler` seeded from the
``generator``. It is slow (pure Python) and exists as the specification made callable: the
audit of a reference backend is budget-limited and says which power it reached.

Rows are first restricted to the ids that carry mass in some law of the row (plus the drafted
ids), in increasing order. Every rule is equivariant under an order-preserving relabelling of
the vocabulary and ignores ids without mass, so this changes nothing but the speed on large
vocabularies.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from specproof.properties.conformance.backends.torch_chain import check_chain_inputs
from specproof.properties.conformance.contracts import draw_seeds
from specproof.reference.choices import Sampler
from specproof.reference.errors import TokenOutOfRangeError
from specproof.reference.rules import Rule
from specproof.reference.step import make_step
from specproof.reference.tree import DraftTree


def _row(
    rule: Rule,
    rng: np.random.Generator,
    parents: list[int],
    tokens: np.ndarray,
    draft: torch.Tensor | None,
    target: torch.Tensor,
) -> tuple[tuple[int, ...], int]:
    """One row: laws ``[N, V]`` as tensors in their own dtype; only the used ids are widened."""
    V = target.shape[1]
    for i, t in enumerate(tokens[1:], start=1):
        if not 0 <= t < V:
            raise TokenOutOfRangeError(f"tokens[{i}]", f"is {int(t)}, outside [0, {V})")
    used = (target != 0).any(dim=0)
    if draft is not None:
        used |= (draft != 0).any(dim=0)
    used[torch.from_numpy(np.asarray(tokens[1:], dtype=np.int64))] = True
    ids_t = used.nonzero().squeeze(1)
    ids = ids_t.numpy()
    local = np.full(V, -1)
    local[ids] = np.arange(len(ids))
    step = make_step(
        parents,
        [0] + [int(local[t]) for t in tokens[1:]],
        None if draft is None else draft[:, ids_t].double().tolist(),
        target[:, ids_t].double().tolist(),
    )
    outcome = rule(Sampler(rng), step)
    return outcome.accepted, int(ids[outcome.next_token])


def chain_backend(rule: Rule) -> Callable[..., torch.Tensor]:
    def verify(
        draft_token_ids: torch.Tensor,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        generator: torch.Generator,
    ) -> torch.Tensor:
        B, K, V = check_chain_inputs(draft_token_ids, draft_probs, target_probs)
        rng = np.random.default_rng(draw_seeds(generator)[0])
        x = draft_token_ids.long().numpy()
        tp, dp = target_probs, draft_probs
        parents = list(range(-1, K))
        out = np.full((B, K + 1), -1, dtype=np.int64)
        for b in range(B):
            tokens = np.concatenate([[0], x[b]])
            # the leaf has no children: its draft law is never read; give it the target's
            draft = None if dp is None else torch.cat([dp[b], tp[b, K:]])
            accepted, y = _row(rule, rng, parents, tokens, draft, tp[b])
            L = len(accepted) - 1
            out[b, :L] = x[b, :L]
            out[b, L] = y
        return torch.from_numpy(out)

    verify.__name__ = f"reference_{rule.name}_chain"
    return verify


def tree_backend(rule: Rule) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    def verify(
        parents: torch.Tensor,
        tokens: torch.Tensor,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        B, N = parents.shape
        rng = np.random.default_rng(draw_seeds(generator)[0])
        par = parents.long().numpy()
        tok = tokens.long().numpy()
        tp, dp = target_probs, draft_probs
        acc = np.full((B, N), -1, dtype=np.int64)
        nxt = np.zeros(B, dtype=np.int64)
        for b in range(B):
            tree = DraftTree(par[b].tolist())
            draft = None
            if dp is not None:
                draft = dp[b].clone()
                for i in range(N):  # a leaf's draft law is never read; give it a valid law
                    if not tree.children[i]:
                        draft[i] = tp[b, i]
            accepted, y = _row(rule, rng, par[b].tolist(), tok[b], draft, tp[b])
            acc[b, : len(accepted)] = accepted
            nxt[b] = y
        return torch.from_numpy(acc), torch.from_numpy(nxt)

    verify.__name__ = f"reference_{rule.name}_tree"
    return verify
