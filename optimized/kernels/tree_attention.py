"""Tree attention: each draft node's query over the committed prefix KV and the tree's own KV,
honoring the packed ancestor mask; one program per (batch row, head, node), online softmax.

Keys past ``prefix_len[b]`` in the prefix cache and tree nodes outside the node's ancestor set
get no weight. Accumulates in float32.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tree_attention_kernel(
    q_ptr,  # [B, H, N, D] float: the tree nodes' queries
    kt_ptr,  # [B, H, N, D] float: the tree nodes' keys
    vt_ptr,  # [B, H, N, D] float: the tree nodes' values
    kp_ptr,  # [B, H, S, D] float: the prefix cache's keys
    vp_ptr,  # [B, H, S, D] float: the prefix cache's values
    pre_ptr,  # [B] int64: prefix_len, the valid prefix slots of each row
    mask_ptr,  # [B, N, W] int32: the packed ancestor-or-self bits
    out_ptr,  # [B, H, N, D] float32: the output
    H,  # heads
    N,  # nodes per tree
    S,  # prefix cache slots
    D,  # head dimension
    scale,  # float32: 1 / sqrt(D)
    W: tl.constexpr,  # 32-bit words per mask row
    DB: tl.constexpr,  # a power of two >= D
    BS: tl.constexpr,  # prefix slots per step
    NB: tl.constexpr,  # a power of two >= N
):
    bh = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1).to(tl.int64)
    b = bh // H
    ds = tl.arange(0, DB)
    dmask = ds < D
    q = tl.load(q_ptr + (bh * N + i) * D + ds, mask=dmask, other=0.0).to(tl.float32)
    m = tl.full((), float("-inf"), tl.float32)
    den = tl.zeros((), dtype=tl.float32)
    acc = tl.zeros((DB,), dtype=tl.float32)
    plen = tl.load(pre_ptr + b).to(tl.int64)
    for start in range(0, S, BS):
        ss = start + tl.arange(0, BS)
        smask = ss < plen
        k = tl.load(
            kp_ptr + (bh * S + ss[:, None]) * D + ds[None, :], mask=smask[:, None] & dmask[None, :], other=0.0
        )
        s = tl.sum(k.to(tl.float32) * q[None, :], 1) * scale
        s = tl.where(smask, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        p = tl.exp(s - m_safe)
        v = tl.load(
            vp_ptr + (bh * S + ss[:, None]) * D + ds[None, :], mask=smask[:, None] & dmask[None, :], other=0.0
        )
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
        den = den * alpha + tl.sum(p, 0)
        m = m_new
    js = tl.arange(0, NB)
    jmask = js < N
    words = tl.load(mask_ptr + (b * N + i) * W + js // 32, mask=jmask, other=0)
    visible = jmask & (((words >> (js % 32)) & 1) != 0)
    k = tl.load(
        kt_ptr + (bh * N + js[:, None]) * D + ds[None, :], mask=visible[:, None] & dmask[None, :], other=0.0
    )
    s = tl.sum(k.to(tl.float32) * q[None, :], 1) * scale
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 0))  # node i always sees itself: m_new is finite
    alpha = tl.exp(m - m_new)
    p = tl.exp(s - m_new)
    v = tl.load(
        vt_ptr + (bh * N + js[:, None]) * D + ds[None, :], mask=visible[:, None] & dmask[None, :], other=0.0
    )
    acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
    den = den * alpha + tl.sum(p, 0)
    tl.store(out_ptr + (bh * N + i) * D + ds, acc / den, mask=dmask)
