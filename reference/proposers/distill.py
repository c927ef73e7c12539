"""Brief distillation of a draft network from its target, on a corpus the target generates.

So that acceptance rates are those of a draft that learned something (not of random weights),
every self-drafting network is trained for a few hundred Adam steps, on CPU, in seconds:

* **Corpus.** ``sequences`` sequences of ``length`` tokens sampled from the target itself
  (temperature 1, first token uniform), from a fixed seed. Nothing is downloaded.
* **Objective.** For a corpus sequence ``s``, a cut ``n`` (the committed prefix ``s[:n]``) and a
  depth ``d`` (the draft path ``s[n:n+d]``), the draft law of the next token is pulled towards
  the target's law of ``s[n+d]`` given ``s[:n+d]`` by the KL divergence. The network is run
  exactly as at drafting time, so nets that feed back their own outputs below node 0 (EAGLE,
  EAGLE-3) are trained through that feedback (EAGLE-3's "training-time test"), and nets whose
  laws ignore the path (Medusa, DFlash) learn the target's law averaged over it.
* **Cache.** The trained weights are stored under ``$SPECPROOF_CACHE`` (default
  ``~/.cache/specproof``), keyed by a hash of the target's weights, the network's class and
  initial weights, the recipe and :data:`VERSION`; a second call loads them. Writes are atomic,
  so parallel test workers may race safely.

Training quality never decides a correctness verdict: every rule's exactness holds for any
weights (tests/test_proposers.py checks the proposers with untrained nets as well).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..transformer import KVCache, TinyTransformer
from .selfdraft import DraftNet

#: Bump when the objective or the corpus changes, so that cached weights are not reused.
VERSION = 1


@dataclass(frozen=True)
class Recipe:
    sequences: int = 48
    length: int = 10
    steps: int = 100
    batch: int = 8
    lr: float = 0.02
    depth: int = 3  # train draft depths 0 .. depth - 1 (bounded by the net's max_depth)
    seed: int = 0


def corpus(target: TinyTransformer, sequences: int, length: int, seed: int) -> torch.Tensor:
    """``[sequences, length]`` token ids sampled from the target."""
    rng = np.random.default_rng(seed)
    out = torch.zeros(sequences, length, dtype=torch.long)
    for s in range(sequences):
        cache = KVCache()
        tok = int(rng.integers(target.vocab))
        for t in range(length):
            out[s, t] = tok
            logits, _ = target.forward(torch.tensor([tok]), cache)
            p = torch.softmax(logits[-1], -1).numpy()
            tok = int(rng.choice(target.vocab, p=p / p.sum()))
    return out


def _fingerprint(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def cache_path(net: DraftNet, target: TinyTransformer, recipe: Recipe) -> Path:
    key = hashlib.sha256(
        repr((VERSION, type(net).__name__, net.max_depth, recipe)).encode()
        + _fingerprint(*target.parameters()).encode()
        + _fingerprint(*net.parameters()).encode()
    ).hexdigest()[:20]
    root = Path(os.environ.get("SPECPROOF_CACHE", Path.home() / ".cache" / "specproof"))
    return root / "proposers" / f"{type(net).__name__}-{key}.pt"


class _Cases:
    """The (sequence, cut n, depth d) triples of a corpus, with the target's laws and features."""

    def __init__(self, net: DraftNet, target: TinyTransformer, recipe: Recipe, seed: int) -> None:
        self.net, self.target = net, target
        self.seqs = corpus(target, recipe.sequences, recipe.length, seed)
        self.teacher, self.features = [], []
        for s in self.seqs:
            logits, hidden = target.forward(s, KVCache())
            self.teacher.append(torch.log_softmax(logits, -1))
            self.features.append(hidden)
        depth = min(recipe.depth, net.max_depth or recipe.depth)
        self.cases = [
            (i, n, d)
            for i in range(len(self.seqs))
            for n in range(2, recipe.length)
            for d in range(depth)
            if n + d < recipe.length
        ]

    def kl(self, case: tuple[int, int, int]) -> torch.Tensor:
        """KL(target law || draft law) of the draft token after ``s[:n+d]``, cut at n."""
        i, n, d = case
        hidden = [h[: n - 1] for h in self.features[i]]
        logits = self.net.draft_logits(self.target, hidden, self.seqs[i][: n + d], n)
        logq, logp = torch.log_softmax(logits, -1), self.teacher[i][n + d - 1]
        return (logp.exp() * (logp - logq)).sum()


def distill(net: DraftNet, target: TinyTransformer, recipe: Recipe = Recipe()) -> list[float]:
    """Train ``net`` in place; returns the mean KL of each step's batch (nats)."""
    data = _Cases(net, target, recipe, recipe.seed)
    rng = np.random.default_rng(recipe.seed + 1)
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=recipe.lr)
    losses = []
    for _ in range(recipe.steps):
        opt.zero_grad()
        batch = rng.choice(len(data.cases), size=recipe.batch, replace=False)
        loss = sum((data.kl(data.cases[int(j)]) for j in batch), torch.zeros((), dtype=torch.float64))
        loss = loss / recipe.batch
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    net.requires_grad_(False)
    return losses


@torch.no_grad()
def heldout_kl(net: DraftNet, target: TinyTransformer, seed: int, recipe: Recipe = Recipe()) -> float:
    """The mean KL over every case of a fresh corpus drawn from ``seed`` (not the training one)."""
    data = _Cases(net, target, recipe, seed)
    return float(sum(data.kl(c) for c in data.cases) / len(data.cases))


def trained(net: DraftNet, target: TinyTransformer, recipe: Recipe = Recipe()) -> DraftNet:
    """``net`` distilled from ``target`` by ``recipe``, from the cache when it holds them."""
    path = cache_path(net, target, recipe)
    if path.exists():
        state = torch.load(path, weights_only=True)
        net.load_state_dict(state)
        net.requires_grad_(False)
        return net
    distill(net, target, recipe)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
        torch.save(net.state_dict(), f)
    os.replace(f.name, path)
    return net
