"""Tree buffers from a batch of parent arrays, one program per row (reference: ``tree.py``).

Node i's ancestor set is its parent's plus itself, and its depth its parent's plus one; parents
come before children, so one pass over i = 1..N-1 fills both. The attention mask is packed: bit
``j % 32`` of word ``j // 32`` of row i is set iff node j is an ancestor of i or i itself.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tree_buffers_kernel(
    par_ptr,  # [B, N] int64: the trees' parents (-1 at the root)
    mask_ptr,  # [B, N, W] int32: the packed ancestor-or-self bits (written)
    depth_ptr,  # [B, N] int64: the nodes' depths (written)
    N,  # nodes per tree
    W: tl.constexpr,  # 32-bit words per mask row
):
    b = tl.program_id(0).to(tl.int64)
    ws = tl.arange(0, W)
    tl.store(mask_ptr + (b * N) * W + ws, tl.where(ws == 0, 1, 0).to(tl.int32))
    tl.store(depth_ptr + b * N, 0)
    tl.debug_barrier()
    for i in range(1, N):
        p = tl.load(par_ptr + b * N + i).to(tl.int64)
        words = tl.load(mask_ptr + (b * N + p) * W + ws)
        own = tl.where(ws == i // 32, (tl.full((), 1, tl.uint32) << (i % 32)).to(tl.int32), 0)
        tl.store(mask_ptr + (b * N + i) * W + ws, words | own)
        tl.store(depth_ptr + b * N + i, tl.load(depth_ptr + b * N + p) + 1)
        tl.debug_barrier()


@triton.jit
def gather_rows_kernel(
    src_ptr,  # [B, H, S, D] float: the rows read
    src_slot_ptr,  # [B, N] int64: the slot read for each j (-1: none)
    dst_ptr,  # [B, H, S, D] float: the rows written (not aliasing src)
    dst_slot_ptr,  # [B, N] int64: the slot written for each j (-1: none)
    H,  # heads
    S,  # slots per row
    N,  # copies per row (the grid's second axis)
    D,  # head dimension
    DB: tl.constexpr,  # a power of two >= D
):
    """Copy row ``src[b, h, src_slot[b, j]]`` to ``dst[b, h, dst_slot[b, j]]`` for every j with
    both slots >= 0 (one program per (b, h, j); the two tensors must not alias)."""
    bh = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1).to(tl.int64)
    b = bh // H
    s = tl.load(src_slot_ptr + b * N + j).to(tl.int64)
    d = tl.load(dst_slot_ptr + b * N + j).to(tl.int64)
    if (s >= 0) & (d >= 0):
        offs = tl.arange(0, DB)
        row = tl.load(src_ptr + (bh * S + s) * D + offs, mask=offs < D)
        tl.store(dst_ptr + (bh * S + d) * D + offs, row, mask=offs < D)
