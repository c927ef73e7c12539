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
* **Medusa-2** (:class:`JointRecipe`): the backbone, a copy of the target, fine-tuned together
  with the heads on the same corpus, with a self-distillation term keeping it near the original.
* **Cache.** The trained weights are stored under ``$SPECPROOF_CACHE`` (default
  ``~/.cache/specproof``), keyed by a hash of the target's weights, the network's class and
  initial weights, the recipe and :data:`VERSION`; a second call loads them. Writes are atomic,
  so parallel test workers may race safely.

Training quality never decides a correctness verdict: every rule's exactness holds for any
weights (tests/test_proposers.py checks the proposers with untrained nets as well).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..transformer import KVCache, TinyTransformer, rms_norm
from .medusa import MedusaHeads
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


# --- Medusa-2: the backbone fine-tuned together with the heads ------------------------------

#: Bump when the joint objective changes (its cache entries are keyed apart from the above).
JOINT_VERSION = 1


@dataclass(frozen=True)
class JointRecipe:
    """Joint fine-tuning of a backbone (a copy of the target) and its draft heads, on the corpus
    of :class:`Recipe` (the original target's own samples). Per corpus sequence the loss is

    * the backbone's: ``KL(original || backbone)`` of the next-token law, averaged over the
      sequence's positions (self-distillation: the original model's law is the label, so the
      backbone is pulled back towards it);
    * plus ``heads_weight`` times the heads': the KL of :class:`Recipe`'s objective, the head
      of draft depth d weighted by ``head_decay ** d``, with the backbone's features and
      gradients flowing into the backbone.

    The backbone learns at ``lr_backbone``, the heads at ``lr_heads`` (a smaller rate for the
    backbone, as Medusa-2 does: with Adam, even the near-zero gradients of the self-distillation
    term at the original weights make lr-sized steps). On the e2e targets the values here keep
    the heads at least as close to the fine-tuned target as Medusa-1's are to the original
    (held-out KL), while the backbone moves measurably (tests/test_medusa2.py)."""

    sequences: int = 48
    length: int = 10
    steps: int = 100
    batch: int = 8
    lr_heads: float = 0.005  # they start from Medusa-1's distilled heads
    lr_backbone: float = 0.0005
    heads_weight: float = 1.0
    head_decay: float = 0.8
    depth: int = 3
    seed: int = 0


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch single-threaded inside, the previous setting restored after: these tensors are tiny,
    and on a loaded machine intra-op threads cost far more than they give (the joint fine-tuning
    measured 5 to 10 times slower with 2 threads than with 1 on a shared 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _forward_with_grad(model: TinyTransformer, seq: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The causal forward of ``seq`` from an empty cache, with gradients (``forward`` runs
    without); the same computation as :meth:`TinyTransformer.forward`."""
    T = len(seq)
    return model._run(seq, KVCache(), torch.arange(T), torch.ones(T, T, dtype=torch.bool).tril())


def head_logits(
    heads: MedusaHeads, backbone: TinyTransformer, top: torch.Tensor, length: int, depth: int
) -> list[torch.Tensor]:
    """Medusa's draft logits for every cut of a sequence at once: entry d holds, for the cuts
    ``n = 2 .. length - 1 - d``, the logits :meth:`MedusaHeads.draft_logits` gives the draft at
    depth d below node 0 (head d on the feature at position n - 2); ``top`` is the backbone's
    top-layer hidden states. Equal to the per-cut call (tests/test_medusa2.py)."""
    h = rms_norm(top, backbone.norm)
    out = []
    for d in range(depth):
        x = h[: length - 2 - d]
        out.append((x + torch.nn.functional.silu(x @ heads.res[d])) @ heads.out[d])
    return out


def finetune_jointly(
    backbone: TinyTransformer,
    heads: MedusaHeads,
    original: TinyTransformer,
    recipe: JointRecipe = JointRecipe(),
) -> list[float]:
    """Train ``backbone`` (a copy of ``original``) and ``heads`` in place by ``recipe``; returns
    each step's mean loss (nats). ``original`` is not changed."""
    seqs = corpus(original, recipe.sequences, recipe.length, recipe.seed)
    with torch.no_grad():
        teacher = [torch.log_softmax(original.forward(s, KVCache())[0], -1) for s in seqs]
    depth = min(recipe.depth, heads.max_depth or recipe.depth)
    cases = sum(recipe.length - 2 - d for d in range(depth))  # (cut n, depth d) with n + d < length
    backbone.requires_grad_(True)
    heads.requires_grad_(True)
    opt = torch.optim.Adam(
        [
            {"params": list(backbone.parameters()), "lr": recipe.lr_backbone},
            {"params": list(heads.parameters()), "lr": recipe.lr_heads},
        ]
    )
    rng = np.random.default_rng(recipe.seed + 1)
    losses = []
    for _ in range(recipe.steps):
        opt.zero_grad()
        loss = torch.zeros((), dtype=torch.float64)
        for i in rng.choice(len(seqs), size=recipe.batch, replace=False):
            s, logp = seqs[int(i)], teacher[int(i)]
            logits, hidden = _forward_with_grad(backbone, s)
            lm = (logp.exp() * (logp - torch.log_softmax(logits, -1))).sum(-1).mean()
            head_loss = torch.zeros((), dtype=torch.float64)
            for d, q in enumerate(head_logits(heads, backbone, hidden[-1], recipe.length, depth)):
                t = logp[d + 1 : recipe.length - 1]  # the law of s[n + d] given s[:n + d], n = 2 ..
                kl = (t.exp() * (t - torch.log_softmax(q, -1))).sum()
                head_loss = head_loss + recipe.head_decay**d * kl
            loss = loss + lm + recipe.heads_weight * head_loss / cases
        loss = loss / recipe.batch
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    backbone.requires_grad_(False)
    heads.requires_grad_(False)
    return losses


def joint_cache_path(heads: MedusaHeads, original: TinyTransformer, recipe: JointRecipe) -> Path:
    key = hashlib.sha256(
        repr((JOINT_VERSION, "joint", type(heads).__name__, heads.max_depth, recipe)).encode()
        + _fingerprint(*original.parameters()).encode()
        + _fingerprint(*heads.parameters()).encode()
    ).hexdigest()[:20]
    root = Path(os.environ.get("SPECPROOF_CACHE", Path.home() / ".cache" / "specproof"))
    return root / "proposers" / f"joint-{type(heads).__name__}-{key}.pt"


def trained_jointly(
    heads: MedusaHeads, original: TinyTransformer, recipe: JointRecipe = JointRecipe()
) -> tuple[TinyTransformer, MedusaHeads]:
    """A fine-tuned copy of ``original`` and ``heads`` trained with it by ``recipe`` (``heads``
    is trained in place, from the weights it holds), from the cache when it holds them."""
    path = joint_cache_path(heads, original, recipe)
    backbone = copy.deepcopy(original)
    if path.exists():
        state = torch.load(path, weights_only=True)
        backbone.load_state_dict(state["backbone"])
        heads.load_state_dict(state["heads"])
        heads.requires_grad_(False)
        return backbone, heads
    with one_thread():
        finetune_jointly(backbone, heads, original, recipe)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
        torch.save({"backbone": backbone.state_dict(), "heads": heads.state_dict()}, f)
    os.replace(f.name, path)
    return backbone, heads
