"""The decoding loop: proposer + rule + transformer target + KV cache, for many steps.

Each step: the proposer's process grows a draft tree from the context (drawing through the
choice interface); the target runs one forward over the flattened tree on its KV cache (node 0,
the last committed token, is not cached yet); the rule verifies with the target's laws at every
node; the cache keeps only the accepted path (:meth:`KVCache.commit`); the emitted tokens extend
the context. One target forward per step, so the mean number of emitted tokens per step is the
speed-up in target forwards.

The law this loop emits over several steps is checked exactly by
:func:`specproof.properties.oracle.exact.multi_step_check` (which runs the same process and rule on
:class:`TransformerLM` laws), and the loop itself is checked against those laws in
tests/test_decode.py (the tree forward's laws equal the path forward's within 1e-10).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from specproof.reference.errors import InternalError, UsageError

from .choices import Sampler
from .models import LM
from .processes import PROCESSES, Process
from .rules import RULES
from .sampling import ProcessedLM, Sampling
from .step import Step, make_step
from .transformer import Config, KVCache, TinyTransformer
from .tree import DraftTree

Drafter = Callable[[tuple[int, ...]], LM]


@dataclass
class Decoded:
    tokens: list[int]  # the prompt, then every emitted token
    emitted_per_step: list[int] = field(default_factory=list)
    drafted_per_step: list[int] = field(default_factory=list)  # draft nodes proposed per step
    #: sum_x min(p, q)(x) at every inner node of every step's tree: the acceptance probability
    #: of its first draft under token-level verification (q one-hot for deterministic drafts)
    overlaps: list[float] = field(default_factory=list)

    @property
    def target_forwards(self) -> int:
        return len(self.emitted_per_step)

    @property
    def mean_emitted(self) -> float:
        return sum(self.emitted_per_step) / max(1, len(self.emitted_per_step))


def decode(
    target: TinyTransformer,
    draft: LM | Drafter,
    process: str | Process,
    rule: str,
    shape: tuple[int, ...],
    prompt: tuple[int, ...],
    steps: int,
    rng: np.random.Generator,
    temperature: float = 1.0,
    until: int | None = None,
    sampling: Sampling | None = None,
    node_law: NodeLaw | None = None,
) -> Decoded:
    """Run ``steps`` speculative steps after ``prompt`` (at least one token). ``draft`` is a
    draft model, or a drafter giving each step's draft model from its committed tokens (the
    self-drafting proposers, :mod:`.proposers.selfdraft`). With ``until``, stop early once that
    many tokens have been emitted.

    ``sampling`` (:mod:`.sampling`; else ``temperature`` alone) is applied at every node of every
    step with that node's own context: the committed tokens and the drafts on its path, the
    prompt being the first ``len(prompt)`` of them. The drafts are drawn from the draft model's
    laws processed the same way, and that processed law is what the verifier is told
    (proofs_notes/sampling_params.md). The output's end (an ``eos``, a stop string:
    :meth:`~.sampling.Sampling.end`) ends the loop: the tokens stop at the token that ended it,
    wherever in a step's accepted block it lies (proofs_notes/stops.md). ``node_law`` replaces
    how a node's law is computed (a defect's model; the engine audit's mutants use it)."""
    from .proposers.selfdraft import as_drafter

    if not prompt:
        raise UsageError("prompt: needs at least one token")
    if steps < 0:
        raise UsageError(f"steps: must be >= 0, got {steps}")
    proc = PROCESSES[process] if isinstance(process, str) else process
    verify, drafter = RULES[rule], as_drafter(draft)
    tree_shape = DraftTree(shape, "shape")
    cache = KVCache()
    if len(prompt) > 1:
        target.forward(torch.tensor(prompt[:-1]), cache)
    out = Decoded(list(prompt))
    for _ in range(steps):
        if until is not None and len(out.tokens) - len(prompt) >= until:
            break
        ctx = tuple(out.tokens)
        ch = Sampler(rng)
        draft = drafter(ctx)
        if sampling is not None:
            draft = ProcessedLM(draft, sampling, len(prompt))
        proposal = proc.propose(ch, tree_shape, ctx, draft)
        tree = DraftTree(proposal.parents)
        prefix_len = len(cache)
        logits, _ = target.forward_tree(tree, torch.tensor(proposal.tokens), cache)
        step = make_step(
            proposal.parents,
            proposal.tokens,
            proc.draft_probs(ctx, proposal, draft),
            node_laws(
                target, logits, tree, proposal.tokens, ctx, temperature, sampling, len(prompt), node_law
            ),
        )
        out.overlaps.extend(_first_child_overlaps(step))
        outcome = verify(Sampler(rng), step)
        cache.commit(tree, outcome.accepted, prefix_len)
        emitted = _until_end(sampling, out.tokens[len(prompt) :], outcome.emitted(step))
        out.tokens.extend(emitted)
        out.emitted_per_step.append(len(emitted))
        out.drafted_per_step.append(len(proposal.tokens) - 1)
        if sampling is not None and sampling.ends and sampling.end(out.tokens[len(prompt) :]) is not None:
            break  # the end is absorbing: the output stops at the token that ended it, and so does the loop
        # the new last token (node 0 of the next tree) is not cached; the accepted path is
        if len(cache) != len(out.tokens) - 1:  # pragma: no cover - an invariant of commit
            raise InternalError(f"cache holds {len(cache)} tokens, expected {len(out.tokens) - 1}")
    return out


def _until_end(sampling: Sampling | None, done: Sequence[int], emitted: Sequence[int]) -> Sequence[int]:
    """A step's ``emitted`` tokens up to the one that ends the output (an eos, a stop string),
    after the ``done`` generated before it; the rest of the block is dropped."""
    if sampling is None or not sampling.ends:
        return emitted
    ended = sampling.end([*done, *emitted])
    return emitted if ended is None else emitted[: ended - len(done)]


def node_context(ctx: tuple[int, ...], tree: DraftTree, tokens: Sequence[int], i: int) -> tuple[int, ...]:
    """Node ``i``'s context: the committed tokens and the drafts on its path (node 0 is the last
    committed token, already in ``ctx``)."""
    return ctx + tuple(tokens[j] for j in tree.ancestors(i)[1:])


def node_laws(
    target: TinyTransformer,
    logits: torch.Tensor,
    tree: DraftTree,
    tokens: Sequence[int],
    ctx: tuple[int, ...],
    temperature: float,
    sampling: Sampling | None,
    prompt_len: int,
    node_law: NodeLaw | None = None,
) -> list[list[float]]:
    """The target's law at every node of the tree: ``sampling`` applied to the node's logits with
    the node's own context, or ``softmax(logits / temperature)`` without one."""
    if sampling is None:
        laws = target.next_token_probs(logits, temperature)
        laws = laws / laws.sum(-1, keepdim=True)
        return [[float(v) for v in row] for row in laws]
    if node_law is not None:
        return [node_law(i, logits[i].tolist(), ctx, tree, tokens) for i in range(len(tokens))]
    return [
        sampling.law(logits[i].tolist(), node_context(ctx, tree, tokens, i), prompt_len, margin=None)
        for i in range(len(tokens))
    ]


#: a node's law from (node, its logits, the committed context, the tree, the tree's tokens)
NodeLaw = Callable[[int, list[float], tuple[int, ...], DraftTree, Sequence[int]], list[float]]


def _first_child_overlaps(step: Step) -> list[float]:
    """``sum_x min(p, q)`` at each node with children, q the law its first child is verified
    against (the draft law, or one-hot at the child for deterministic drafts): that child's
    token-level acceptance probability."""
    out = []
    for i in range(step.tree.n):
        kids = step.tree.children[i]
        if not kids:
            continue
        p, q = step.target_probs[i], step.draft_probs[i]
        if q is None:
            out.append(float(p[step.tokens[kids[0]]]))
        else:
            out.append(float(sum(min(float(a), float(b)) for a, b in zip(p, q))))
    return out


#: the prompt of the exact multi-step checks on the small target of :func:`e2e_models`
EXACT_PREFIX = (2, 0, 3, 2)


@functools.cache
def e2e_models() -> tuple[TinyTransformer, TinyTransformer]:
    """The two targets of ``specproof e2e``: a 4-token one, small enough to enumerate the law of
    several steps exactly, and a 16-token one for the sampled loop."""
    small = TinyTransformer(Config(vocab=4, width=16, layers=2, heads=2, mlp=32), seed=11)
    big = TinyTransformer(Config(vocab=16, width=32, layers=2, heads=4, mlp=64), seed=3)
    return small, big
