"""Tree attention over a flattened draft tree (reference: attention computed path by path).

``tree_attention(q, k_tree, v_tree, k_prefix, v_prefix, parents, prefix_len, rope_base=None)``:
``q, k_tree, v_tree [B, H, N, D]`` are the tree nodes' projections, ``k_prefix, v_prefix
[B, H, S, D]`` the committed cache (slots ``< prefix_len[b]`` valid; keys already rotated).
With ``rope_base`` the tree's queries and keys are rotated at their position ids
``prefix_len + depth`` (not their flattened index). Node i attends to the prefix and to its own
ancestors and itself, never a sibling branch. ``reference_attention`` computes the same thing
one root path at a time with a plain causal softmax in float64; they agree within 1e-5
(``tests/test_optimized_buffers.py``; proofs_notes/tree_attention.md, tree_positions.md).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from specproof.reference.errors import ShapeError
from specproof.reference.transformer import rope
from specproof.reference.tree import DraftTree

from ._device import on_kernel_device
from .kernels.tree_attention import tree_attention_kernel
from .tree_buffers import _prefix, tree_buffers


def _check(name: str, t: torch.Tensor, shape: tuple[int | None, ...]) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() != len(shape):
        raise ShapeError(name, f"expected a {len(shape)}-d tensor")
    for got, want in zip(t.shape, shape):
        if want is not None and got != want:
            raise ShapeError(name, f"has shape {tuple(t.shape)}, expected {tuple(shape)} (None: any)")
    if not t.dtype.is_floating_point:
        raise ShapeError(name, f"expected a float tensor, got {t.dtype}")
    if not bool(torch.isfinite(t).all()):
        raise ShapeError(name, "holds a non-finite value")


@on_kernel_device
def tree_attention(
    q: torch.Tensor,
    k_tree: torch.Tensor,
    v_tree: torch.Tensor,
    k_prefix: torch.Tensor,
    v_prefix: torch.Tensor,
    parents: torch.Tensor,
    prefix_len: int | torch.Tensor,
    rope_base: float | None = None,
) -> torch.Tensor:
    _check("q", q, (None, None, None, None))
    B, H, N, D = q.shape
    _check("k_tree", k_tree, (B, H, N, D))
    _check("v_tree", v_tree, (B, H, N, D))
    _check("k_prefix", k_prefix, (B, H, None, D))
    S = k_prefix.shape[2]
    _check("v_prefix", v_prefix, (B, H, S, D))
    if tuple(parents.shape) != (B, N):
        raise ShapeError("parents", f"has shape {tuple(parents.shape)}, expected {(B, N)}")
    pre = _prefix(prefix_len, B, q.device)
    if bool((pre > S).any()):
        raise ShapeError("prefix_len", f"exceeds the prefix cache's {S} slots")
    buf = tree_buffers(parents, pre)
    if rope_base is not None:
        q = rope(q, buf.position_ids, rope_base)
        k_tree = rope(k_tree, buf.position_ids, rope_base)
    out = torch.empty(B, H, N, D, dtype=torch.float32, device=q.device)
    if B * H * N == 0:
        return out
    tree_attention_kernel[(B * H, N)](
        q.contiguous(),
        k_tree.contiguous(),
        v_tree.contiguous(),
        k_prefix.contiguous(),
        v_prefix.contiguous(),
        pre.contiguous(),
        buf.mask,
        out,
        H,
        N,
        S,
        D,
        1.0 / math.sqrt(D),
        W=buf.mask.shape[2],
        DB=max(1, 1 << (D - 1).bit_length()),
        BS=32,
        NB=max(1, 1 << (N - 1).bit_length()),
    )
    return out


def reference_attention(q, k_tree, v_tree, k_prefix, v_prefix, parents, prefix_len, rope_base=None):
    """Node by node: the ordinary causal forward over the node's root path, in float64."""
    B, H, N, D = q.shape
    out = torch.empty(B, H, N, D, dtype=torch.float64)
    for b in range(B):
        tree = DraftTree(parents[b].tolist())
        P = int(prefix_len if isinstance(prefix_len, int) else prefix_len[b])
        for i in range(N):
            path = list(tree.ancestors(i))
            pos = torch.arange(P, P + len(path))[None, :]  # consecutive, as in a plain sequence
            qi = q[b : b + 1, :, path].double()
            ki = k_tree[b : b + 1, :, path].double()
            if rope_base is not None:
                qi, ki = rope(qi, pos, rope_base), rope(ki, pos, rope_base)
            keys = torch.cat([k_prefix[b : b + 1, :, :P].double(), ki], 2)[0]
            vals = torch.cat([v_prefix[b : b + 1, :, :P].double(), v_tree[b : b + 1, :, path].double()], 2)[0]
            w = torch.softmax(keys @ qi[0, :, -1, :, None] / math.sqrt(D), dim=1)  # [H, P+len, 1]
            out[b, :, i] = (w * vals).sum(1)
    return out


def compile_specs() -> list[tuple[str, Any, dict[str, str], dict[str, Any]]]:
    """The kernel's signature for :mod:`specproof.properties.bench.compile_check`."""
    consts = {"W": 1, "DB": 64, "BS": 32, "NB": 16}
    sig = {
        **{n: "*fp32" for n in ("q_ptr", "kt_ptr", "vt_ptr", "kp_ptr", "vp_ptr")},
        "pre_ptr": "*i64",
        "mask_ptr": "*i32",
        "out_ptr": "*fp32",
        "H": "i32",
        "N": "i32",
        "S": "i32",
        "D": "i32",
        "scale": "fp32",
        **dict.fromkeys(consts, "constexpr"),
    }
    from .paged_kv import compile_specs as paged_specs  # the decoding loop's paged kernels
    from .strict import compile_specs as strict_specs

    return [("tree_attention[fp32]", tree_attention_kernel, sig, consts), *paged_specs(), *strict_specs()]
