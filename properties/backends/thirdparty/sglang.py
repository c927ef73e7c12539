"""SGLang: the pure-Triton chain sampler and greedy tree verifier.

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

``verify_tree_greedy_triton`` (``spec_tree.py``; the Triton implementation SGLang runs on XPU,
CUDA builds use a CUDA kernel of the same contract) walks the tree by first-child and
next-sibling links, accepting the child whose token is the target's argmax at the accepted node,
and writes that argmax after the last accepted node. The caller supplies the argmaxes
(``target_predict``); the adapter takes them from the target laws (first maximum). Its module
imports SGLang's platform layer at load time; the adapter loads it with stand-ins for the three
names it reads there (platform checks all false, so no compiled kernel is imported) and calls
the Triton function directly. It preserves greedy decoding: expected pass for the greedy law.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from types import ModuleType

import torch

from ..torch_chain import check_chain_inputs

FILE = "sglang/kernels/ops/speculative/reject_sampling.py"


def _load(file: str, name: str) -> ModuleType:
    """Execute one file of the installed sglang distribution as module ``name``."""
    import specproof.optimized  # noqa: F401  (the Triton interpreter when CUDA is absent)

    path = importlib.metadata.distribution("sglang").locate_file(file)
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:  # pragma: no cover - an incomplete install
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _kernels() -> ModuleType:
    return _load(FILE, "specproof_sglang_reject_sampling")


TREE_FILE = "sglang/kernels/ops/speculative/spec_tree.py"


@functools.cache
def _tree_kernels() -> ModuleType:
    import sys

    stand_ins = {
        "sglang.srt.platforms": ModuleType("sglang.srt.platforms"),
        "sglang.srt.platforms.interface": ModuleType("sglang.srt.platforms.interface"),
        "sglang.srt.utils": ModuleType("sglang.srt.utils"),
    }
    stand_ins["sglang.srt.platforms"].current_platform = None  # type: ignore[attr-defined]

    def reject(*args: object, **kwargs: object) -> None:
        raise RuntimeError("spec_tree: platform dispatch is not used by the adapter")

    stand_ins["sglang.srt.platforms.interface"].reject_out_of_tree_path = reject  # type: ignore[attr-defined]
    for name in ("is_cpu", "is_cuda", "is_hip", "is_musa", "is_npu", "is_xpu"):
        setattr(stand_ins["sglang.srt.utils"], name, lambda: False)
    saved = {k: sys.modules.get(k) for k in stand_ins}
    sys.modules.update(stand_ins)
    try:
        return _load(TREE_FILE, "specproof_sglang_spec_tree")
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def verify_tree_greedy(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    from specproof.optimized._device import kernel_device
    from specproof.reference.tree import DraftTree

    B, N = parents.shape
    dev = kernel_device() or torch.device("cpu")
    first_child = torch.full((B, N), -1, dtype=torch.long)
    next_sibling = torch.full((B, N), -1, dtype=torch.long)
    depth = 0
    for b in range(B):
        tree = DraftTree(parents[b].tolist())
        depth = max(depth, tree.max_depth)
        for i, kids in enumerate(tree.children):
            if kids:
                first_child[b, i] = kids[0]
            for a, c in zip(kids, kids[1:]):
                next_sibling[b, a] = c
    S = depth + 1
    predicts = torch.full((B * N,), -1, dtype=torch.int32, device=dev)
    accept_index = torch.full((B, S), -1, dtype=torch.int32, device=dev)
    accept_num = torch.zeros(B, dtype=torch.int32, device=dev)
    retrieve = torch.arange(B * N, dtype=torch.long).reshape(B, N)
    target_predict = target_probs.double().argmax(-1).reshape(-1)
    _tree_kernels().verify_tree_greedy_triton(
        predicts,
        accept_index,
        accept_num,
        tokens.long().to(dev),
        retrieve.to(dev),
        first_child.to(dev),
        next_sibling.to(dev),
        target_predict.to(dev),
    )
    n = accept_num.cpu().long()
    acc = accept_index.cpu().long()
    out = torch.full((B, N), -1, dtype=torch.long)
    nxt = torch.zeros(B, dtype=torch.long)
    pred = predicts.cpu().long()
    for b in range(B):
        path = acc[b, : int(n[b]) + 1]
        out[b, : len(path)] = path - b * N
        nxt[b] = pred[int(path[-1])]
    return out, nxt


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
            name="sglang.verify_tree_greedy",
            kind="tree",
            fn=verify_tree_greedy,
            processes=("onehot_siblings",),
            expect="pass",
            law="greedy",
            doc="sglang spec_tree.verify_tree_greedy_triton (greedy tree verification)",
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
