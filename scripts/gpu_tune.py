"""Chunk, block and warp counts of the split token path on a GPU (CUDA-graph replay, B=256, K=8).

Usage: python3 scripts/gpu_tune.py OUT.md   (run by scripts/gpu_check.sh on a CUDA machine)
"""

from __future__ import annotations

import functools
import sys

import torch

from specproof.optimized import token
from specproof.properties.bench.kernels import _time, chain_inputs, copy_bandwidth, floor_bytes, graphed


def main(path: str) -> None:
    bw = copy_bandwidth("cuda")
    lines = [
        f"copy bandwidth {bw / 1e9:.0f} GB/s; B=256, K=8; "
        "CUDA-graph replay of token(path='split', validate=False)",
        "",
        "| V | dtype | chunk | block | warps | us / call | time / floor time |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    configs = [
        (2048, 1024, 4),
        (2048, 1024, 8),
        (4096, 1024, 4),
        (4096, 1024, 8),
        (4096, 2048, 8),
        (8192, 2048, 8),
    ]
    for V in (128256,):
        for dtype in (torch.float32, torch.bfloat16):
            x, dp, tp = chain_inputs(256, 8, V, dtype, "cuda")
            ua = torch.rand(256, 9, dtype=torch.float64, device="cuda")
            uf = torch.rand(256, dtype=torch.float64, device="cuda")
            out = token(x, dp, tp, ua, uf)
            fb = floor_bytes(out, 8, V, tp.element_size(), True)
            for chunk, block, warps in configs:
                fn = functools.partial(
                    token, path="split", chunk=chunk, block=block, validate=False, num_warps=warps
                )
                sec, _ = _time(graphed(fn, (x, dp, tp, ua, uf)), 10, 0.3, torch.cuda.synchronize)
                name = str(dtype).split(".")[-1]
                cells = [V, name, chunk, block, warps, f"{sec * 1e6:.1f}", f"{sec / (fb / bw):.2f}x"]
                row = "| " + " | ".join(map(str, cells)) + " |"
                print(row, flush=True)
                lines.append(row)
            del x, dp, tp
            torch.cuda.empty_cache()
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
