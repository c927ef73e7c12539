"""Shared helpers of the optimized-engine tests: random laws in a given dtype."""

from __future__ import annotations

import os

import numpy as np
import torch

#: ``tox -e gpu`` sets this on a CUDA machine: the coupled tests then add full-size vocabularies.
FULL = os.environ.get("SPECPROOF_FULL_SIZE") == "1"
BIG_VOCABS = [32000, 128256, 152064] if FULL else []

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
STYLES = ["random", "ties", "onehot", "tiny"]


def laws(rng: np.random.Generator, shape: tuple[int, ...], dtype: torch.dtype, style: str) -> torch.Tensor:
    """Laws of ``shape`` (last axis V) stored in ``dtype``, normalized as well as it allows."""
    V = shape[-1]
    if style == "random":
        w = rng.random(shape) ** 3
        w[rng.random(shape) < 0.3] = 0
    elif style == "ties":
        w = rng.integers(1, 3, shape).astype(float)
    elif style == "onehot":
        w = np.zeros(shape)
        idx = rng.integers(0, V, shape[:-1])
        np.put_along_axis(w, idx[..., None], 1.0, axis=-1)
    else:  # tiny masses next to large ones
        w = np.where(rng.random(shape) < 0.5, 1e-6, rng.random(shape))
    w[..., int(rng.integers(V))] += 1e-3  # never an all-zero row
    t = torch.tensor(w / w.sum(-1, keepdims=True), dtype=torch.float64).to(dtype)
    return (t.double() / t.double().sum(-1, keepdim=True)).to(dtype)
