"""What crosses the wire between the driver and its workers, packed.

Down, per shard: the case (prompt, setting, horizon: a few dozen bytes) and the shard's seeds
(8 bytes each, a ``uint64`` array) for an engine; the case and (seed, call, rows) for a verifier.

Up, per shard, the samples in index order, packed as the smallest integer arrays that hold them:

* engine: the tokens, ``[n, M]`` in ``uint8`` for V <= 256 (``uint16`` to 65,536, ``uint32``
  above), and each counter the engine reports (drafted, accepted, target forwards, prompt tokens
  served from a cache) as one small
  integer per sample, ``-1`` where it said nothing, left out when it never says; per sample
  ``M x (1, 2 or 4)`` bytes plus 1 to 2 bytes per counter;
* verifier: each call's completed sequences (``[rows, M]``, the same dtypes) and the emitted
  lengths (``uint8``); the sub-case of each row is not sent (a function of the row's index).

These are what the driver's tests need in the order they need it: the law test's cells and
per-position counts are binned at each look from the sequences (the cells of a look are fixed by
the law and the look's sample count, so a worker cannot bin before the driver tests), and the
first sample the law cannot emit is the witness, found by index. A call whose completion hit
such a token (a hard failure, which ends its case) comes back whole, tensors and all, so the
driver names the same row of the same call as a local run.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from specproof.properties.engine.contract import Generation

COUNTERS = ("drafted", "accepted", "forwards", "cached")


def id_dtype(vocab: int) -> np.dtype:
    """The smallest unsigned dtype that holds ids in ``[0, vocab)``."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if vocab - 1 <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.int64)


def _small(values: list[int]) -> np.ndarray:
    """Non-negative counts with -1 for none, in the smallest signed dtype that holds them."""
    top = max(values, default=0)
    for dt in (np.int8, np.int16, np.int32):
        if top <= np.iinfo(dt).max:
            return np.asarray(values, dtype=dt)
    return np.asarray(values, dtype=np.int64)


def pack_generations(gens: Sequence[Generation], vocab: int, tokens: int) -> tuple[Any, ...]:
    """A shard of engine samples as one byte string of small arrays (module docstring):
    ``(n, M, token dtype, counters "name:dtype,...", bytes, reported or None)``."""
    parts = [np.asarray([g.tokens for g in gens], dtype=id_dtype(vocab)).reshape(len(gens), tokens)]
    which = []
    for name in COUNTERS:
        values = [getattr(g, name) for g in gens]
        if any(v is not None for v in values):
            arr = _small([-1 if v is None else int(v) for v in values])
            parts.append(arr)
            which.append(f"{name}:{arr.dtype.str}")
    if any(g.steps is not None for g in gens):  # per sample: how many steps, then every step's size
        counts = _small([-1 if g.steps is None else len(g.steps) for g in gens])
        flat = _small([x for g in gens for x in (g.steps or ())])
        parts += [counts, flat]
        which.append(f"steps:{counts.dtype.str}:{flat.dtype.str}:{len(flat)}")
    # reported probabilities come only with report=True, which the drawer never asks for
    reported = [g.reported for g in gens] if any(g.reported is not None for g in gens) else None
    blob = b"".join(a.tobytes() for a in parts)
    return (len(gens), tokens, parts[0].dtype.str, ",".join(which), blob, reported)


def unpack_generations(packed: tuple[Any, ...]) -> list[Generation]:
    n, m, tok, which, blob, reported = packed
    toks = np.frombuffer(blob, dtype=np.dtype(tok), count=n * m).reshape(n, m)
    at = toks.nbytes
    counters: dict[str, list[int | None]] = {name: [None] * n for name in COUNTERS}
    steps: list[tuple[int, ...] | None] = [None] * n
    for item in filter(None, which.split(",")):
        name, dt, *more = item.split(":")
        arr = np.frombuffer(blob, dtype=np.dtype(dt), count=n, offset=at)
        at += arr.nbytes
        if name == "steps":
            flat = np.frombuffer(blob, dtype=np.dtype(more[0]), count=int(more[1]), offset=at).tolist()
            at += int(more[1]) * np.dtype(more[0]).itemsize
            ends = np.cumsum(np.maximum(arr, 0)).tolist()
            starts = [0, *ends[:-1]]
            steps = [None if k < 0 else tuple(flat[a:b]) for k, a, b in zip(arr.tolist(), starts, ends)]
            continue
        counters[name] = [None if v < 0 else int(v) for v in arr.tolist()]
    reported = reported or [None] * n
    return [
        Generation(
            tuple(row),
            counters["drafted"][i],
            counters["accepted"][i],
            counters["forwards"][i],
            reported[i],
            steps[i],
            cached=counters["cached"][i],
        )
        for i, row in enumerate(toks.tolist())
    ]


def pack_call(inputs: Any, emitted: Any, lens: torch.Tensor, comp: Any, vocab: int) -> dict[str, Any]:
    """One verifier call (module docstring): whole when it holds a hard failure."""
    if comp.zero_row is not None:
        return {"whole": (inputs, emitted, lens, comp)}
    return {
        "completed": comp.completed.numpy().astype(id_dtype(vocab)),
        "lengths": lens.numpy().astype(np.uint8 if int(lens.numpy().max(initial=0)) < 256 else np.int32),
        "lengths_dtype": str(lens.dtype).removeprefix("torch."),
    }


class SubOnly:
    """The part of a call's inputs the driver reads when the call held no hard failure."""

    def __init__(self, sub: torch.Tensor) -> None:
        self.sub = sub


def unpack_call(packed: dict[str, Any], paired: bool) -> tuple[Any, Any, torch.Tensor, Any]:
    from specproof.properties.audit.battery import Completion

    if "whole" in packed:
        return packed["whole"]
    completed = torch.from_numpy(packed["completed"].astype(np.int64))
    rows = completed.shape[0]
    # battery.sample_inputs: rows alternate the two model pairs of a paired case, else pair 0
    sub = (torch.arange(rows) % 2) if paired else torch.zeros(rows, dtype=torch.int64)
    lens = torch.from_numpy(packed["lengths"].astype(np.int64)).to(getattr(torch, packed["lengths_dtype"]))
    return SubOnly(sub), None, lens, Completion(completed, None, None)


def payload_bytes(obj: Any) -> int:
    """Bytes of ``obj`` as pickled for the wire (protocol 5, as Ray's serializer for these)."""
    return len(pickle.dumps(obj, protocol=5))
