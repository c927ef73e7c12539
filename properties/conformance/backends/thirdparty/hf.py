"""HF transformers: ``transformers.generation.utils._speculative_sampling`` as a chain verifier.

The function verifies one request: ``candidate_logits [1, K, V]`` (the assistant's),
``new_logits [1, K + 1, V]`` (the target's) and the K candidate ids; it returns the accepted
candidates plus one corrected or bonus token. It reads its randomness from torch's global RNG
(``torch.rand_like``, ``torch.multinomial``), so the adapter seeds that RNG from the contract's
generator inside ``torch.random.fork_rng`` (the caller's global state is left untouched). Laws
become logits as ``log p`` (``-inf`` where p = 0), which the function's softmax maps back to p;
one-hot drafts (``draft_probs=None``) become one-hot assistant laws.

``assistant_ensemble_weight`` (a relaxation the function documents as biased) is adapted too,
as ``hf.speculative_sampling[ensemble=0.5]``: it must be flagged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch

from specproof.properties.conformance.backends.torch_chain import check_chain_inputs
from specproof.properties.conformance.contracts import draw_seeds


def speculative_sampling(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
    ensemble: float | None = None,
) -> torch.Tensor:
    from transformers.generation.utils import _speculative_sampling

    B, K, V = check_chain_inputs(draft_token_ids, draft_probs, target_probs)
    ids = draft_token_ids.long()
    q = draft_probs if draft_probs is not None else torch.nn.functional.one_hot(ids, V)
    q_logits = torch.log(q.double()).float()
    p_logits = torch.log(target_probs.double()).float()
    out = torch.full((B, K + 1), -1, dtype=torch.long)
    for b in range(B):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(draw_seeds(generator)[0])
            kwargs = {} if ensemble is None else {"assistant_ensemble_weight": ensemble}
            tokens, _ = _speculative_sampling(ids[b][None], q_logits[b][None], K, p_logits[b][None], **kwargs)
        row = tokens.reshape(-1)
        out[b, : len(row)] = row
    return out


def speculative_sampling_ensemble(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    return speculative_sampling(draft_token_ids, draft_probs, target_probs, generator, ensemble=0.5)


def backends() -> list[dict[str, object]]:
    chains = ("iid_chain", "onehot_chain")
    return [
        dict(
            name="hf.speculative_sampling",
            kind="chain",
            fn=speculative_sampling,
            processes=chains,
            expect="pass",
            doc="transformers.generation.utils._speculative_sampling (one request per call)",
        ),
        dict(
            name="hf.speculative_sampling[ensemble=0.5]",
            kind="chain",
            fn=speculative_sampling_ensemble,
            processes=chains,
            expect="lossy",
            doc="the same with assistant_ensemble_weight=0.5 (documented as biased)",
        ),
    ]


class PromptLookupDraft:
    """HF's ``PromptLookupCandidateGenerator`` bound to a step's committed tokens, as a reference
    draft model: one-hot at the k-th candidate it proposes after the prefix; past its
    candidates (or with none), one-hot at the context's last token, as specproof's ``ngram``."""

    def __init__(self, vocab: int, prefix: tuple[int, ...], k: int) -> None:
        from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

        gen = PromptLookupCandidateGenerator(num_output_tokens=k, max_matching_ngram_size=2, max_length=10**6)
        # HF annotates a LongTensor; torch.tensor of Python ints is int64, typed as a plain Tensor
        ids, _ = gen.get_candidates(cast(torch.LongTensor, torch.tensor([prefix])))
        self.vocab, self.prefix = vocab, prefix
        self.candidates = [int(v) for v in ids[0, len(prefix) :]]

    def law(self, context: tuple[int, ...]) -> tuple[float, ...]:
        d = len(context) - len(self.prefix)
        x = self.candidates[d] if d < len(self.candidates) else context[-1]
        return tuple(1.0 if i == x else 0.0 for i in range(self.vocab))


def prompt_lookup_drafter(vocab: int, k: int = 3) -> Callable[[tuple[int, ...]], PromptLookupDraft]:
    memo: dict[tuple[int, ...], PromptLookupDraft] = {}

    def at(prefix: tuple[int, ...]) -> PromptLookupDraft:
        if prefix not in memo:
            memo[prefix] = PromptLookupDraft(vocab, prefix, k)
        return memo[prefix]

    return at


def proposers() -> list[dict[str, object]]:
    return [
        dict(
            name="hf.prompt_lookup",
            drafter=prompt_lookup_drafter,
            process="onehot_chain",
            doc="transformers' PromptLookupCandidateGenerator (n-gram lookup) as a proposer",
        )
    ]
