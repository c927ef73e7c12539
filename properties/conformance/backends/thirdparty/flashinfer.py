"""FlashInfer: ``flashinfer.sampling.chain_speculative_sampling`` as a chain verifier (CUDA only).

The function takes ``draft_probs [B, K, V]``, ``draft_token_ids [B, K]`` and ``target_probs
[B, K + 1, V]`` on a CUDA device and returns the emitted tokens padded with -1, plus two counts:
``output_accepted_token_num`` (drafts that would pass their test taken one by one, a metric) and
``output_emitted_draft_token_num`` (drafts emitted). One-hot drafts are passed as one-hot laws.
Its Philox stream is seeded from a CUDA ``torch.Generator`` that the adapter seeds from the
contract's generator. The adapter also checks that the emitted count agrees with the emitted
row (a real bug class: an accepted count that kept counting after the first rejection) and
raises a contract violation otherwise.

FlashInfer's kernels are compiled for CUDA; without a CUDA device the adapter reports itself
unavailable (:func:`specproof.properties.conformance.backends.thirdparty.availability`). In this project's
development no CUDA device was available to the session that wrote it, so this adapter has not
been run against the real kernel yet (docs/conformance.md); its
plumbing is tested on CPU against a stand-in with the documented semantics
(tests/test_cuda_adapters.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from specproof.properties.conformance.backends.torch_chain import check_chain_inputs
from specproof.properties.conformance.contracts import ContractViolation, draw_seeds


def _kernel() -> Callable[..., Any]:
    import flashinfer.sampling

    return flashinfer.sampling.chain_speculative_sampling


def chain_speculative_sampling(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    B, K, V = check_chain_inputs(draft_token_ids, draft_probs, target_probs)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ids = draft_token_ids.long()
    q = draft_probs if draft_probs is not None else torch.nn.functional.one_hot(ids, V)
    (seed,) = draw_seeds(generator)
    cuda_gen = torch.Generator(device=dev).manual_seed(seed)
    out, _, emitted = _kernel()(
        q.float().contiguous().to(dev),
        ids.to(dev, torch.int32),
        target_probs.float().contiguous().to(dev),
        generator=cuda_gen,
    )
    rows = out.cpu().long()
    lengths = (rows >= 0).sum(1)
    bad = (emitted.cpu().long() + 1) != lengths
    if bad.any():
        b = int(bad.nonzero()[0])
        raise ContractViolation(
            "count",
            f"output_emitted_draft_token_num is {int(emitted[b])} but the row emits {int(lengths[b])} tokens",
            row=b,
        )
    return rows


def backends() -> list[dict[str, object]]:
    return [
        dict(
            name="flashinfer.chain_speculative_sampling",
            kind="chain",
            fn=chain_speculative_sampling,
            processes=("iid_chain", "onehot_chain"),
            expect="pass",
            doc="flashinfer.sampling.chain_speculative_sampling (CUDA)",
        )
    ]
