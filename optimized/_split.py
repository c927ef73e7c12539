"""What the split paths share on the host: chunk sizes, the check-in counters, the launch options.

A split path spreads each row's pass over ``C = cdiv(V, chunk)`` programs; the last program of
a row to check in on its counter draws (:mod:`.kernels.split`). The counters start at 0 and the
last program resets its row's counter, so one zeroed buffer serves every call: on a GPU it is
kept per device and stream (no memset launch per call, and a CUDA graph that captures a call
replays it correctly); under the interpreter a fresh one is made per call.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton

from specproof.reference.errors import BadParameterError

from ._device import interpreted

SPLIT_MIN_V = 8192  # on a GPU, rows at least this long take the split path
CHUNK_BYTES = 8192  # per law row and chunk: 2048 float32 or 4096 bfloat16 entries (the fastest
# of the chunk sizes timed on an H200, docs/measurements/tune-split-h200.md)
BLOCK = 128  # entries per inner step under the interpreter
BLOCK_GPU = 1024

# No fused multiply-add: every product is rounded as the reference rounds it.
LAUNCH: dict[str, Any] = {"enable_fp_fusion": False}

_COUNTERS: dict[tuple[int | None, int], torch.Tensor] = {}


def choose_path(path: str, V: int) -> str:
    if path not in ("auto", "row", "split"):
        raise BadParameterError("path", f"must be 'auto', 'row' or 'split', got {path!r}")
    if path == "auto":
        return "split" if not interpreted() and V >= SPLIT_MIN_V else "row"
    return path


def block_size(block: int | None) -> int:
    return block or (BLOCK if interpreted() else BLOCK_GPU)


def chunking(V: int, element_size: int, block: int, chunk: int | None) -> tuple[int, int, int]:
    """``(chunk, C, CB)``: entries per chunk (a multiple of ``block``), chunks per row, and
    the power of two at least C (the pick's vector of chunk sums)."""
    chunk = chunk or max(block, CHUNK_BYTES // element_size)
    if chunk <= 0 or chunk % block:
        raise BadParameterError("chunk", f"must be a positive multiple of block ({block}), got {chunk}")
    C = triton.cdiv(V, chunk)
    return chunk, C, max(1, triton.next_power_of_2(C))


def counters(n: int, device: torch.device) -> torch.Tensor:
    """``n`` int32 check-in counters, all 0 (the kernels leave them 0 again)."""
    if device.type != "cuda":
        return torch.zeros(n, dtype=torch.int32, device=device)
    key = (device.index, torch.cuda.current_stream(device).cuda_stream)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
        _COUNTERS[key] = buf
    return buf


def tree_shapes(parents: torch.Tensor) -> list[tuple[int, ...]]:
    """The distinct parent arrays of a [B, N] batch (usually one: a static tree)."""
    return [tuple(r) for r in torch.unique(parents.detach().to("cpu", torch.int64), dim=0).tolist()]


@functools.lru_cache(maxsize=256)
def depth(parents: tuple[int, ...]) -> int:
    """The tree's largest node depth (0 for the root alone)."""
    d = [0] * len(parents)
    for c in range(1, len(parents)):
        d[c] = d[parents[c]] + 1
    return max(d)


@functools.lru_cache(maxsize=256)
def multi_draft_passes(parents: tuple[int, ...]) -> int:
    """The most full-row passes a multi-draft walk can need on this tree: one per rejected child
    (its residual's mass), one for the final law when the walk ends by an acceptance at a leaf,
    and one spare after the last rejection for the fallback when a residual has no mass.
    ``g(v) = max(n_v + 1, max_j (j + g(child_j)))``, a leaf's g being 1."""
    N = len(parents)
    kids: list[list[int]] = [[] for _ in range(N)]
    for c in range(1, N):
        kids[parents[c]].append(c)
    g = [1] * N
    for v in range(N - 1, -1, -1):
        g[v] = max([len(kids[v]) + 1] + [j + g[c] for j, c in enumerate(kids[v])])
    return g[0]
