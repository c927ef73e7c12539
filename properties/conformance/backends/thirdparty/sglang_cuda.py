"""SGLang's CUDA tree sampler ``tree_speculative_sampling_target_only`` as a tree verifier.

The kernel (``sglang.kernels.ops.speculative.sampling``, JIT-compiled CUDA) walks the tree by
the links of :func:`.sglang.tree_links` with one coin per visited node: child j of the current
node is accepted when the coin falls below the target mass of children 1..j (with both
thresholds at 1), and each rejected child's target probability is written into the caller's
``draft_probs`` buffer (zeros), so the final token is drawn from ``relu(p - draft_probs)``: p
without the rejected children. That is the reference's ``target_only`` rule, exact for distinct
siblings; the adapter claims it under the tree processes whose siblings are distinct.

Inputs as SGLang's DFlash and EAGLE workers build them: ``candidates [B, N]`` (int64),
``retrive_index`` the global slots ``b * N + node``, coins ``[B, N]`` and ``[B]`` (float32)
from the contract's generator, ``target_probs [B, N, V]``. Needs CUDA; like the FlashInfer
adapter it has not been run against the real kernel by the session that wrote it (no CUDA
device was available). Its plumbing (links, coins, reading the paths back) is tested on CPU
against a stand-in written from the kernel's source (tests/test_cuda_adapters.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from specproof.properties.conformance.backends.thirdparty.sglang import accepted_paths, tree_links


def _kernel() -> Callable[..., Any]:
    from sglang.kernels.ops.speculative.sampling import tree_speculative_sampling_target_only

    return tree_speculative_sampling_target_only


def tree_sampling_target_only(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    B, N = parents.shape
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    first_child, next_sibling, depth = tree_links(parents)
    S = depth + 1
    coins = torch.rand(B, N, generator=generator, dtype=torch.float64).float()
    final = torch.rand(B, generator=generator, dtype=torch.float64).float()
    predicts = torch.full((B * N,), -1, dtype=torch.int32, device=dev)
    accept_index = torch.full((B, S), -1, dtype=torch.int32, device=dev)
    accept_num = torch.zeros(B, dtype=torch.int32, device=dev)
    p = target_probs.float().contiguous().to(dev)
    _kernel()(
        predicts=predicts,
        accept_index=accept_index,
        accept_token_num=accept_num,
        candidates=tokens.long().to(dev),
        retrive_index=torch.arange(B * N, dtype=torch.long).reshape(B, N).to(dev),
        retrive_next_token=first_child.to(dev),
        retrive_next_sibling=next_sibling.to(dev),
        uniform_samples=coins.to(dev),
        uniform_samples_for_final_sampling=final.to(dev),
        target_probs=p,
        draft_probs=torch.zeros_like(p),
        threshold_single=1.0,
        threshold_acc=1.0,
        deterministic=True,
    )
    return accepted_paths(accept_index, accept_num, predicts, N)


def backends() -> list[dict[str, object]]:
    return [
        dict(
            name="sglang.tree_speculative_sampling_target_only",
            kind="tree",
            fn=tree_sampling_target_only,
            processes=("onehot_siblings", "topk_siblings", "wor_siblings"),
            expect="pass",
            doc="sglang sampling.tree_speculative_sampling_target_only (CUDA), thresholds 1",
        )
    ]
