"""The decoding loop: proposer + rule + transformer target + KV cache, for many steps.

Each step: the proposer's process grows a draft tree from the context (drawing through the
choice interface); the target runs one forward over the flattened tree on its KV cache (node 0,
the last committed token, is not cached yet); the rule verifies with the target's laws at every
node; the cache keeps only the accepted path (:meth:`KVCache.commit`); the emitted tokens extend
the context. One target forward per step, so the mean number of emitted tokens per step is the
speed-up in target forwards.

The law this loop emits over several steps is checked exactly by
:func:`specproof.properties.exact.multi_step_check` (which runs the same process and rule on
:class:`TransformerLM` laws), and the loop itself is checked against those laws in
tests/test_decode.py (the tree forward's laws equal the path forward's within 1e-10).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .choices import Sampler
from .models import LM
from .processes import PROCESSES
from .rules import RULES
from .step import make_step
from .transformer import Config, KVCache, TinyTransformer
from .tree import DraftTree


@dataclass
class Decoded:
    tokens: list[int]  # the prompt, then every emitted token
    emitted_per_step: list[int] = field(default_factory=list)

    @property
    def target_forwards(self) -> int:
        return len(self.emitted_per_step)

    @property
    def mean_emitted(self) -> float:
        return sum(self.emitted_per_step) / max(1, len(self.emitted_per_step))


def decode(
    target: TinyTransformer,
    draft: LM,
    process: str,
    rule: str,
    shape: tuple[int, ...],
    prompt: tuple[int, ...],
    steps: int,
    rng: np.random.Generator,
    temperature: float = 1.0,
) -> Decoded:
    """Run ``steps`` speculative steps after ``prompt`` (at least one token)."""
    if not prompt:
        raise ValueError("prompt: needs at least one token")
    if steps < 0:
        raise ValueError(f"steps: must be >= 0, got {steps}")
    proc, verify = PROCESSES[process], RULES[rule]
    tree_shape = DraftTree(shape, "shape")
    cache = KVCache()
    if len(prompt) > 1:
        target.forward(torch.tensor(prompt[:-1]), cache)
    out = Decoded(list(prompt))
    for _ in range(steps):
        ctx = tuple(out.tokens)
        ch = Sampler(rng)
        proposal = proc.propose(ch, tree_shape, ctx, draft)
        tree = DraftTree(proposal.parents)
        prefix_len = len(cache)
        logits, _ = target.forward_tree(tree, torch.tensor(proposal.tokens), cache)
        laws = target.next_token_probs(logits, temperature)
        laws = laws / laws.sum(-1, keepdim=True)
        step = make_step(
            proposal.parents,
            proposal.tokens,
            proc.draft_probs(ctx, proposal, draft),
            [[float(v) for v in row] for row in laws],
        )
        outcome = verify(Sampler(rng), step)
        cache.commit(tree, outcome.accepted, prefix_len)
        emitted = outcome.emitted(step)
        out.tokens.extend(emitted)
        out.emitted_per_step.append(len(emitted))
        # the new last token (node 0 of the next tree) is not cached; the accepted path is
        if len(cache) != len(out.tokens) - 1:  # pragma: no cover - an invariant of commit
            raise RuntimeError(f"cache holds {len(cache)} tokens, expected {len(out.tokens) - 1}")
    return out


def e2e_models() -> tuple[TinyTransformer, TinyTransformer]:
    """The two targets of ``specproof e2e``: a 4-token one, small enough to enumerate the law of
    several steps exactly, and a 16-token one for the sampled loop."""
    small = TinyTransformer(Config(vocab=4, width=16, layers=2, heads=2, mlp=32), seed=11)
    big = TinyTransformer(Config(vocab=16, width=32, layers=2, heads=4, mlp=64), seed=3)
    return small, big
