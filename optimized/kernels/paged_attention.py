"""Attention over a paged KV cache with a tree mask, and the in-place commit of an accepted path.

The cache of one layer is ``[blocks, H, BSZ, D]``: fixed-size blocks of ``BSZ`` slots, each
request owning a list of blocks (its row of ``table``); slot ``s`` of a request lives in block
``table[b, s // BSZ]`` at offset ``s % BSZ``. Nothing outside a request's own table is read.

``paged_attention_kernel``: one program per tile of ``QB`` (token, head) queries of the
flattened batch, whatever rows they belong to: query r is token ``r // H`` at head ``r % H``
of row ``row[r // H]``, and reads keys through that row's block table. A query token sees the
slots ``[0, vis)`` (its committed prefix, or the causal prefix of a chain) and the slots
``base + j`` of its row's tree region whose bit ``j`` is set in its packed mask row (its tree
ancestors and itself). Online softmax over tiles of ``KT`` prefix slots (one cache block on a
GPU; every block at once under the interpreter, whose cost is per operation), then over the
tree slots;
accumulates in ``ACC`` (float64 for float64 inputs, float32 otherwise).

``paged_commit_kernel``: one program per ``RB`` rows, every layer and head at once. After a
tree forward wrote node i at slot ``base + i``, the accepted root path ``(0, a_1, .., a_k)`` is
compacted behind the prefix by copying slot ``base + a_j`` to ``base + j`` for each j with
``a_j != j``, in increasing j; safe in place since ``a_j >= j`` (proofs_notes/kv_commit.md).
Only those rows move.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def paged_attention_kernel(
    q_ptr,  # [T, H, D] float: the batch's query tokens, rows after one another
    k_ptr,  # [blocks, H, BSZ, D] float: this layer's cached keys
    v_ptr,  # [blocks, H, BSZ, D] float: this layer's cached values
    out_ptr,  # [T, H, D] float: the output
    table_ptr,  # [B, MAXB] int64: each row's block table (-1 padded)
    row_ptr,  # [T] int64: each token's row
    base_ptr,  # [B] int64: the first slot of each row's tree region
    ntree_ptr,  # [B] int64: the slots in each row's tree region
    vis_ptr,  # [T] int64: each token sees slots [0, vis) in full
    mask_ptr,  # [T, W] int32: each token's packed bits over its row's tree region
    R,  # queries, T * H
    H,  # heads
    D,  # head dimension
    MAXB,  # the block table's width
    scale,  # float32: 1 / sqrt(D)
    W: tl.constexpr,  # 32-bit words per mask row
    DB: tl.constexpr,  # a power of two >= D
    QB: tl.constexpr,  # queries per program
    BSZ: tl.constexpr,  # slots per cache block
    KT: tl.constexpr,  # prefix slots per tile
    NB: tl.constexpr,  # a power of two >= the largest tree region
    ACC: tl.constexpr,  # the accumulator's dtype (float64 for float64 inputs, else float32)
):
    rs = tl.program_id(0).to(tl.int64) * QB + tl.arange(0, QB)
    rmask = rs < R
    tok = rs // H
    hd = rs % H
    ds = tl.arange(0, DB)
    dmask = ds < D
    js = tl.arange(0, NB)
    row = tl.load(row_ptr + tok, mask=rmask, other=0).to(tl.int64)
    base = tl.load(base_ptr + row, mask=rmask, other=0).to(tl.int64)
    ntree = tl.load(ntree_ptr + row, mask=rmask, other=0).to(tl.int64)
    vis = tl.load(vis_ptr + tok, mask=rmask, other=0).to(tl.int64)
    qoff = (tok * H + hd)[:, None] * D + ds[None, :]
    qm = rmask[:, None] & dmask[None, :]
    q = tl.load(q_ptr + qoff, mask=qm, other=0.0).to(ACC)
    m = tl.full((QB,), float("-inf"), ACC)
    den = tl.zeros((QB,), ACC)
    acc = tl.zeros((QB, DB), ACC)
    top = tl.max(vis, 0)
    offs_k = tl.arange(0, KT)
    for s0 in range(0, top, KT):
        slot = s0 + offs_k  # [KT] a tile of KT slots, over one or more cache blocks
        seen = (slot[None, :] < vis[:, None]) & rmask[:, None]  # [QB, KT]
        blk = tl.load(table_ptr + row[:, None] * MAXB + slot[None, :] // BSZ, mask=seen, other=0).to(tl.int64)
        rows = (blk * H + hd[:, None]) * BSZ + (slot % BSZ)[None, :]
        kvm = seen[:, :, None] & dmask[None, None, :]
        k = tl.load(k_ptr + rows[:, :, None] * D + ds[None, None, :], mask=kvm, other=0.0).to(ACC)
        s = tl.sum(q[:, None, :] * k, 2) * scale
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        p = tl.exp(s - m_safe[:, None])
        v = tl.load(v_ptr + rows[:, :, None] * D + ds[None, None, :], mask=kvm, other=0.0).to(ACC)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v, 1)
        den = den * alpha + tl.sum(p, 1)
        m = m_new
    # the tree region: slots base + j whose bit j is set in the query token's mask row
    jm = rmask[:, None] & (js[None, :] < ntree[:, None])  # [QB, NB]
    words = tl.load(mask_ptr + tok[:, None] * W + js[None, :] // 32, mask=jm, other=0)
    seen = (((words >> (js[None, :] % 32)) & 1) != 0) & jm
    slot = base[:, None] + js[None, :]
    blk = tl.load(table_ptr + row[:, None] * MAXB + slot // BSZ, mask=seen, other=0).to(tl.int64)
    rows = (blk * H + hd[:, None]) * BSZ + slot % BSZ  # [QB, NB]
    kvm = seen[:, :, None] & dmask[None, None, :]
    k = tl.load(k_ptr + rows[:, :, None] * D + ds[None, None, :], mask=kvm, other=0.0).to(ACC)
    s = tl.sum(q[:, None, :] * k, 2) * scale
    s = tl.where(seen, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m - m_safe)
    p = tl.exp(s - m_safe[:, None])
    v = tl.load(v_ptr + rows[:, :, None] * D + ds[None, None, :], mask=kvm, other=0.0).to(ACC)
    acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v, 1)
    den = den * alpha + tl.sum(p, 1)
    # every query sees at least itself, so den > 0 on the stored rows
    out = acc / tl.where(den > 0, den, 1.0)[:, None]
    tl.store(out_ptr + qoff, out, mask=qm)


@triton.jit
def paged_commit_kernel(
    k_ptr,  # [layers, NBLK, H, BSZ, D] float: every layer's cached keys
    v_ptr,  # [layers, NBLK, H, BSZ, D] float: every layer's cached values
    table_ptr,  # [B, MAXB] int64: each row's block table (-1 padded)
    base_ptr,  # [B] int64: the first slot of each row's tree region
    acc_ptr,  # [B, N] int64: each row's accepted path (0, a_1, ..), -1 padded
    B,  # rows
    N,  # the accepted paths' width
    LH,  # layers * heads
    H,  # heads
    NBLK,  # blocks per layer
    MAXB,  # the block table's width
    D,  # head dimension
    RB: tl.constexpr,  # rows per program
    LHB: tl.constexpr,  # a power of two >= LH
    DB: tl.constexpr,  # a power of two >= D
    BSZ: tl.constexpr,  # slots per cache block
):
    bs = tl.program_id(0).to(tl.int64) * RB + tl.arange(0, RB)  # [RB] rows
    bmask = bs < B
    lh = tl.arange(0, LHB).to(tl.int64)
    layer = lh // H
    hd = lh % H
    ds = tl.arange(0, DB)
    live = bmask[:, None, None] & (lh < LH)[None, :, None] & (ds < D)[None, None, :]  # [RB, LHB, DB]
    base = tl.load(base_ptr + bs, mask=bmask, other=0).to(tl.int64)
    for j in range(1, N):
        a = tl.load(acc_ptr + bs * N + j, mask=bmask, other=-1).to(tl.int64)
        move = bmask & (a >= 0) & (a != j)
        src = base + a
        dst = base + j
        sblk = tl.load(table_ptr + bs * MAXB + src // BSZ, mask=move, other=0).to(tl.int64)
        dblk = tl.load(table_ptr + bs * MAXB + dst // BSZ, mask=move, other=0).to(tl.int64)
        s_row = (((layer[None, :] * NBLK + sblk[:, None]) * H + hd[None, :]) * BSZ + (src % BSZ)[:, None]) * D
        d_row = (((layer[None, :] * NBLK + dblk[:, None]) * H + hd[None, :]) * BSZ + (dst % BSZ)[:, None]) * D
        m = live & move[:, None, None]
        s_off = s_row[:, :, None] + ds[None, None, :]
        d_off = d_row[:, :, None] + ds[None, None, :]
        tl.store(k_ptr + d_off, tl.load(k_ptr + s_off, mask=m), mask=m)
        tl.store(v_ptr + d_off, tl.load(v_ptr + s_off, mask=m), mask=m)
        tl.debug_barrier()
