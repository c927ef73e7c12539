"""Tree buffers and the KV commit, batched (reference: ``reference/tree.py``).

``tree_buffers(parents [B, N], prefix_len)`` returns :class:`TreeBuffers`: the packed ancestor
mask, depths, position ids ``prefix_len + depth`` and the leaf paths (one root path per leaf,
in leaf order, -1 padded to the batch's widest tree). ``unpack_mask`` expands the packed mask
to ``[B, N, N]`` booleans. ``commit_kv(cache, accepted, prefix_len)`` keeps only the accepted
root path's KV, compacted right behind the prefix, as the reference's ``kv_commit_plan`` moves
do. Equal to the reference on hypothesis-drawn trees (``tests/test_optimized_buffers.py``);
proofs: proofs_notes/tree_attention.md, tree_positions.md, kv_commit.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specproof.reference.errors import ShapeError
from specproof.reference.validate import check_tree_parents

from ._device import kernel_device, on_kernel_device
from .kernels.tree_buffers import gather_rows_kernel, tree_buffers_kernel


@dataclass
class TreeBuffers:
    mask: torch.Tensor  # [B, N, W] int32, packed ancestor bits
    depth: torch.Tensor  # [B, N] int64
    position_ids: torch.Tensor  # [B, N] int64
    leaf_paths: torch.Tensor  # [B, L, D+1] int64, -1 padded (L: most leaves in a row)
    n_leaves: torch.Tensor  # [B] int64


def words_for(n: int) -> int:
    return max(1, -(-n // 32))


def _prefix(prefix_len: int | torch.Tensor, B: int, device: torch.device) -> torch.Tensor:
    if isinstance(prefix_len, int) and not isinstance(prefix_len, bool):
        if prefix_len < 0:
            raise ShapeError("prefix_len", f"must be >= 0, got {prefix_len}")
        return torch.full((B,), prefix_len, dtype=torch.int64, device=device)
    if not isinstance(prefix_len, torch.Tensor) or tuple(prefix_len.shape) != (B,):
        raise ShapeError("prefix_len", f"expected an int or a [{B}] tensor")
    if prefix_len.dtype.is_floating_point or bool((prefix_len < 0).any()):
        raise ShapeError("prefix_len", "expected nonnegative integer lengths")
    return prefix_len.to(device, torch.int64)


def unpack_mask(mask: torch.Tensor, n: int) -> torch.Tensor:
    """``[B, N, W]`` packed words to ``[B, N, n]`` booleans."""
    j = torch.arange(n, device=mask.device)
    words = mask[..., j // 32].to(torch.int64) & 0xFFFFFFFF
    return ((words >> (j % 32)) & 1).bool()


@on_kernel_device
def tree_buffers(parents: torch.Tensor, prefix_len: int | torch.Tensor = 0) -> TreeBuffers:
    B, N = check_tree_parents(parents)
    device = parents.device
    pre = _prefix(prefix_len, B, device)
    W = words_for(N)
    mask = torch.zeros(B, N, W, dtype=torch.int32, device=device)
    depth = torch.zeros(B, N, dtype=torch.int64, device=device)
    par = parents.to(torch.int64).contiguous()
    if B:
        tree_buffers_kernel[(B,)](par, mask, depth, N, W=W)
    anc = unpack_mask(mask, N)  # [B, i, j]
    # path[b, i, d] = the ancestor of i at depth d (unique), -1 past i's depth
    width = int(depth.max()) + 1 if B else 1
    d = torch.arange(width, device=device)
    at = anc[:, :, :, None] & (depth[:, None, :, None] == d)  # [B, i, j, d]
    j = torch.arange(N, device=device)[None, None, :, None]
    path = torch.where(at.any(2), (at * j).sum(2), -1)
    is_leaf = torch.ones(B, N, dtype=torch.bool, device=device)
    if N > 1:
        is_leaf.scatter_(1, par[:, 1:], False)
    n_leaves = is_leaf.sum(1)
    L = int(n_leaves.max()) if B else 0
    order = torch.sort(torch.where(is_leaf, j[0, 0, :, 0], N), dim=1).values[:, :L]  # leaves first
    leaf_paths = torch.full((B, L, width), -1, dtype=torch.int64, device=device)
    valid = order < N
    rows = path.gather(1, order.clamp(max=N - 1)[:, :, None].expand(B, L, width))
    leaf_paths = torch.where(valid[:, :, None], rows, leaf_paths)
    return TreeBuffers(mask, depth, pre[:, None] + depth, leaf_paths, n_leaves)


def commit_kv(cache: torch.Tensor, accepted: torch.Tensor, prefix_len: int | torch.Tensor) -> torch.Tensor:
    """Compact the accepted path's KV in place: ``cache [B, H, S, D]`` held node i at slot
    ``prefix_len + i``; afterwards slot ``prefix_len + j`` holds accepted node ``a_j``. Returns
    the new lengths ``prefix_len + len(accepted path)`` [B]."""
    if not isinstance(cache, torch.Tensor) or cache.dim() != 4:
        raise ShapeError("cache", "expected a [B, H, S, D] tensor")
    B, H, S, D = cache.shape
    if not isinstance(accepted, torch.Tensor) or accepted.dim() != 2 or accepted.shape[0] != B:
        raise ShapeError("accepted", f"expected a [{B}, N] tensor of accepted nodes, -1 padded")
    N = accepted.shape[1]
    dev = kernel_device()
    if dev is not None and cache.device.type == "cpu":  # compact on the GPU, then copy back
        work = cache.to(dev)
        pre = prefix_len.to(dev) if isinstance(prefix_len, torch.Tensor) else prefix_len
        lengths = commit_kv(work, accepted.to(dev), pre)
        cache.copy_(work.cpu())
        return lengths.cpu()
    pre = _prefix(prefix_len, B, cache.device)
    acc = accepted.to(cache.device, torch.int64)
    length = (acc >= 0).sum(1)
    if bool((acc[:, 0] != 0).any()) if N else False:
        raise ShapeError("accepted", "every accepted path starts at node 0")
    if bool(((pre + N) > S).any()):
        raise ShapeError("cache", f"has {S} slots; the tree needs prefix_len + {N}")
    j = torch.arange(N, device=cache.device)
    src = torch.where(acc >= 0, pre[:, None] + acc, -1).contiguous()
    dst = torch.where(acc >= 0, pre[:, None] + j, -1).contiguous()
    tmp = torch.empty_like(cache)
    if B and H and N:
        DB = max(1, 1 << (D - 1).bit_length())
        gather_rows_kernel[(B * H, N)](cache, src, tmp, dst, H, S, N, D, DB=DB)  # gather out of place
        gather_rows_kernel[(B * H, N)](tmp, dst, cache, dst, H, S, N, D, DB=DB)  # then write back
    return pre + length
