"""SGLang: the pure-Triton chain sampler ``chain_speculative_sampling_triton``.

``sglang.kernels.ops.speculative.reject_sampling`` imports only Triton, but importing it through
its package pulls SGLang's server stack; the adapter loads that one file from the installed
distribution instead (``pip install --no-deps sglang`` is enough). Without CUDA it runs under
Triton's interpreter (switched on by :mod:`specproof.optimized`).

The kernel's layout: ``candidates [B, K + 1]`` (the root, then the drafts), ``retrive_index``
the global slot of each (``b * (K + 1) + s``), coins ``uniform_samples [B, K + 1]`` (draft s
reads column s - 1) and ``uniform_samples_for_final_sampling [B]``, ``target_probs
[B, K + 1, V]``, ``draft_probs [B, K, V]``. It writes, at the slot of each accepted node, the
token that follows it, so the emitted row is ``predicts.view(B, K + 1)[b, : n + 1]`` with n the
accepted count. ``block_verification=True`` switches to block verification (Sun et al. 2024).
One-hot drafts are passed as one-hot draft laws. Both variants should pass.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from types import ModuleType

import torch

from ..torch_chain import check_chain_inputs

FILE = "sglang/kernels/ops/speculative/reject_sampling.py"


@functools.cache
def _kernels() -> ModuleType:
    import specproof.optimized  # noqa: F401  (the Triton interpreter when CUDA is absent)

    path = importlib.metadata.distribution("sglang").locate_file(FILE)
    spec = importlib.util.spec_from_file_location("specproof_sglang_reject_sampling", str(path))
    if spec is None or spec.loader is None:  # pragma: no cover - an incomplete install
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def chain_sampling(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
    block_verification: bool = False,
) -> torch.Tensor:
    from specproof.optimized._device import kernel_device

    B, K, V = check_chain_inputs(draft_token_ids, draft_probs, target_probs)
    S = K + 1
    dev = kernel_device() or torch.device("cpu")
    ids = draft_token_ids.long()
    q = draft_probs if draft_probs is not None else torch.nn.functional.one_hot(ids, V)
    u = torch.rand(B, S, generator=generator, dtype=torch.float64).float()
    u_final = torch.rand(B, generator=generator, dtype=torch.float64).float()
    candidates = torch.cat([torch.zeros(B, 1, dtype=torch.long), ids], 1)
    predicts = torch.full((B * S,), -1, dtype=torch.int32, device=dev)
    accept_index = torch.full((B, S), -1, dtype=torch.int32, device=dev)
    accept_num = torch.zeros(B, dtype=torch.int32, device=dev)
    retrive = torch.arange(B * S, dtype=torch.int32).reshape(B, S)
    _kernels().chain_speculative_sampling_triton(
        predicts,
        accept_index,
        accept_num,
        candidates.to(dev, torch.int32),
        retrive.to(dev),
        None,
        None,
        u.to(dev),
        u_final.to(dev),
        target_probs.float().contiguous().to(dev),
        q.float().contiguous().to(dev),
        1.0,
        1.0,
        True,
        block_verification=block_verification,
    )
    n = accept_num.cpu().long()
    rows = predicts.cpu().long().view(B, S)
    keep = torch.arange(S)[None, :] <= n[:, None]
    return torch.where(keep, rows, torch.full_like(rows, -1))


def block_sampling(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    return chain_sampling(draft_token_ids, draft_probs, target_probs, generator, block_verification=True)


def backends() -> list[dict[str, object]]:
    chains = ("iid_chain", "onehot_chain")
    return [
        dict(
            name="sglang.chain_speculative_sampling",
            kind="chain",
            fn=chain_sampling,
            processes=chains,
            expect="pass",
            doc="sglang reject_sampling.chain_speculative_sampling_triton (token-level)",
        ),
        dict(
            name="sglang.chain_speculative_sampling[block_verification]",
            kind="chain",
            fn=block_sampling,
            processes=chains,
            expect="pass",
            doc="the same kernel with block_verification=True",
        ),
    ]
