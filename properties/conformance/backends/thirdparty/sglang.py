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

``sgl_build_tree_kernel_triton`` (``spec_tree.py``; the Triton twin of the CUDA
``build_tree_kernel_efficient``) is a tree builder whose input is not a tree but EAGLE-2's
selection: ``spec_steps`` drafting steps of ``topk`` beams, the candidates of step 0 at flat
slots ``0..topk-1`` and those of step i >= 1 (``topk`` children under each of that step's
``topk`` beams) at ``topk + topk^2 (i - 1) + beam * topk + child``; ``parent_list`` the slots of
each step's beams (``[-1, 0..topk-1]`` for step 0, then ``topk`` slots per step, the last step
omitted); ``top_scores_index`` the sorted slots of the N - 1 selected nodes. Its outputs are a
full mask (a row of ``seq_len + N`` per node, prefix columns filled by the caller), positions
``seq_len + depth`` and first-child / next-sibling links. :func:`encode_selection` writes any
tree in that encoding (``topk`` is the larger of the widest node and the most internal nodes on
one level; a step's beams are its internal nodes, padded with unused slots); the adapter reads
the mask's tree columns, the positions minus ``seq_len``, and the root-to-leaf paths the links
spell, back in our numbering, and reports a prefix column it did not leave set as a mask
violation.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from types import ModuleType

import torch

from specproof.properties.conformance.backends.torch_chain import check_chain_inputs
from specproof.properties.conformance.buffers import BufferViolation, TreeBuffers
from specproof.reference.errors import InternalError

FILE = "sglang/kernels/ops/speculative/reject_sampling.py"


def _load(file: str, name: str) -> ModuleType:
    """Execute one file of the installed sglang distribution as module ``name``."""
    from specproof._triton import own_kernels

    path = importlib.metadata.distribution("sglang").locate_file(file)
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:  # pragma: no cover - an incomplete install
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    # decorated under the interpreter when CUDA is absent; SGLang's own compile options otherwise
    with own_kernels(fp_fusion=True):
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
        raise InternalError("spec_tree: platform dispatch is not used by the adapter")

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


def tree_links(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """SGLang's tree layout: ``(retrive_next_token [B, N], retrive_next_sibling [B, N], depth)``,
    first child and next sibling in child order (-1 for none), and the deepest node's depth."""
    from specproof.reference.tree import DraftTree

    B, N = parents.shape
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
    return first_child, next_sibling, depth


def accepted_paths(
    accept_index: torch.Tensor, accept_num: torch.Tensor, predicts: torch.Tensor, N: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang's outputs as the tree contract's: accepted nodes (root first, -1 padded) and the
    token written after the last one. ``accept_index`` holds global slots ``b * N + node``."""
    B = accept_index.shape[0]
    n = accept_num.cpu().long()
    acc = accept_index.cpu().long()
    pred = predicts.cpu().long()
    out = torch.full((B, N), -1, dtype=torch.long)
    nxt = torch.zeros(B, dtype=torch.long)
    for b in range(B):
        path = acc[b, : int(n[b]) + 1]
        out[b, : len(path)] = path - b * N
        nxt[b] = pred[int(path[-1])]
    return out, nxt


def verify_tree_greedy(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    from specproof.optimized._device import kernel_device

    B, N = parents.shape
    dev = kernel_device() or torch.device("cpu")
    first_child, next_sibling, depth = tree_links(parents)
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
    return accepted_paths(accept_index, accept_num, predicts, N)


def encode_selection(parents: tuple[int, ...]) -> tuple[list[int], list[int], int, int, list[int]]:
    """A tree as EAGLE-2's selection: ``(parent_list, top_scores_index, topk, spec_steps, order)``,
    with ``order[k]`` our node at SGLang's index k (the root, then the nodes by slot)."""
    from specproof.reference.tree import DraftTree

    tree = DraftTree(parents)
    D = tree.max_depth
    levels = [[i for i in range(tree.n) if tree.depth[i] == d] for d in range(D + 1)]
    internal = [[i for i in lvl if tree.children[i]] for lvl in levels]
    topk = max([1] + [len(c) for c in tree.children] + [len(x) for x in internal[1:]])
    slot = {0: -1}
    beams = {c: b for b, c in enumerate(tree.children[0])}  # step 0: every root child is a beam
    for b, c in enumerate(tree.children[0]):
        slot[c] = b
    parent_list = [-1, *range(topk)]
    for step in range(1, D):  # nodes at depth step + 1, under the beams of step - 1
        base = topk + topk * topk * (step - 1)
        for u in levels[step]:
            for c_i, c in enumerate(tree.children[u]):
                slot[c] = base + beams[u] * topk + c_i
        if step < D - 1:  # this step's beams: its internal nodes, padded with other slots
            chosen = [slot[u] for u in internal[step + 1]]
            spare = (v for v in range(base, base + topk * topk) if v not in chosen)
            chosen += [next(spare) for _ in range(topk - len(chosen))]
            beams = {u: chosen.index(slot[u]) for u in internal[step + 1]}
            parent_list += chosen
    order = [0] + sorted(range(1, tree.n), key=lambda i: slot[i])
    return parent_list, [slot[i] for i in order[1:]], topk, max(D, 1), order


def build_tree(parents: tuple[int, ...]) -> TreeBuffers:
    from specproof.optimized._device import kernel_device

    N = len(parents)
    parent_list, selected, topk, steps, order = encode_selection(parents)
    dev = kernel_device() or torch.device("cpu")
    S = 5  # a prefix length: the rows' first S columns belong to the caller
    mask = torch.full((S * N + N * N,), True, dtype=torch.bool, device=dev)
    positions = torch.empty(N, dtype=torch.long, device=dev)
    links = torch.full((3, 1, N), -1, dtype=torch.long, device=dev)
    _tree_kernels().sgl_build_tree_kernel_triton(
        torch.tensor([parent_list], dtype=torch.long, device=dev),
        torch.tensor([selected], dtype=torch.long, device=dev).reshape(1, N - 1),
        torch.tensor([S], dtype=torch.long, device=dev),
        mask,
        positions,
        links[0],
        links[1],
        links[2],
        topk,
        steps,
        N,
    )
    rows = mask.cpu().reshape(N, S + N)
    if not rows[:, :S].all():
        k = int((~rows[:, :S]).nonzero()[0, 0])
        raise BufferViolation("mask", f"node {order[k]}'s row cleared a prefix column")
    if not torch.equal(links[0, 0].cpu(), torch.arange(N)):
        raise BufferViolation("leaf_paths", f"retrieve_index is {links[0, 0].tolist()}, expected 0..{N - 1}")
    perm = torch.tensor([order.index(i) for i in range(N)])  # SGLang's index of our node i
    tree_mask = rows[:, S:][perm][:, perm]
    pos = positions.cpu()[perm] - S
    first, sibling = links[1, 0].tolist(), links[2, 0].tolist()
    paths: list[list[int]] = []
    stack = [[0]]
    while stack:  # walk the links; a cycle or a link out of range is a wrong path, caught below
        path = stack.pop()
        if len(path) > N:
            raise BufferViolation("leaf_paths", "the first-child / next-sibling links loop")
        c, seen = first[path[-1]], 0
        if c < 0:
            paths.append(path)
        while 0 <= c < N and seen <= N:
            stack.append(path + [c])
            c, seen = sibling[c], seen + 1
    depth = max(len(p) for p in paths)
    leaf = torch.full((len(paths), depth), -1, dtype=torch.long)
    for r, path in enumerate(paths):
        leaf[r, : len(path)] = torch.tensor([order[k] for k in path])
    return TreeBuffers(tree_mask, pos, leaf)


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


def builders() -> list[dict[str, object]]:
    return [
        dict(
            name="sglang.build_tree_kernel_efficient",
            fn=build_tree,
            doc="sglang spec_tree.sgl_build_tree_kernel_triton (an EAGLE-2 selection in)",
        )
    ]
