"""The model a stand-in server serves (:mod:`.standin`): the project's tiny transformer, its laws,
the ``draft`` proposer's drafter and the reference loops, with the hooks the planted bugs use
(another request's draft rows, drafts after a stale context)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from specproof.properties.engine.contract import Sampling, Seq
from specproof.properties.engine.loops import ReferenceEngine, engine_target
from specproof.reference.choices import Sampler
from specproof.reference.memo import Memo
from specproof.reference.processes import node_contexts
from specproof.reference.proposers import PROPOSERS
from specproof.reference.rules import RULES
from specproof.reference.sampling import warp
from specproof.reference.step import make_step
from specproof.reference.transformer import KVCache, TinyTransformer, TransformerLM
from specproof.reference.tree import DraftTree


class ServedModel:
    """The model a stand-in serves: the target, its laws (the most recent logits memoized), the
    ``draft`` proposer's drafter and the reference loops. Not thread-safe: :class:`StandIn` calls it from
    one worker thread."""

    def __init__(self, seed: int = 0, vocab: int = 8) -> None:
        base = engine_target()
        if (seed, vocab) == (0, base.vocab):
            self.target = base
        else:
            self.target = TinyTransformer(dataclasses.replace(base.config, vocab=vocab), seed=seed)
        self.seed, self.vocab = seed, vocab
        self.proposer = PROPOSERS["draft"]
        self.drafter = self.proposer.make_drafter(self.target, trained=False)
        self.name = f"tiny-transformer-seed{seed}-v{vocab}"
        self.params = sum(p.numel() for p in self.target.parameters())
        self._logits: Memo[Seq, np.ndarray] = Memo()
        self._loops: dict[tuple[float, str], ReferenceEngine] = {}
        self._lms: dict[float, TransformerLM] = {}
        self.last_steps: list[int] = []  # tokens emitted per step by the last laws_loop

    def logits(self, context: Seq) -> np.ndarray:
        def last() -> np.ndarray:
            with torch.no_grad():
                out, _ = self.target.forward(torch.tensor(context), KVCache())
            return out[-1].to(torch.float64).numpy().copy()

        return self._logits.get(context, last)

    def adapter_bias(self, adapter: int) -> np.ndarray:
        """What LoRA adapter ``adapter`` adds to the logits at scale 1 (a fixed vector of the model
        and the id: the stand-in's adapters are biases of the output, a rank-one change of it)."""
        rng = np.random.default_rng([self.seed, 3, adapter])
        return 1.2 * rng.standard_normal(self.vocab)

    def law(
        self, context: Seq, s: Sampling, joint: bool = False, adapter: tuple[tuple[int, float], ...] = ()
    ) -> np.ndarray:
        """The law after ``context`` under ``s`` with the LoRA ``adapter`` scales: HF's order of the
        cut-offs, or SGLang's (top-k and top-p jointly on the tempered law, then min-p) with
        ``joint``."""
        return self.law_of(self.logits(context), s, joint, adapter)

    def law_of(
        self, z: np.ndarray, s: Sampling, joint: bool = False, adapter: tuple[tuple[int, float], ...] = ()
    ) -> np.ndarray:
        """:meth:`law` from a row of logits ``z`` (one of :meth:`logits_along`'s, say)."""
        for i, scale in adapter:
            if scale:
                z = z + scale * self.adapter_bias(i)
        if joint and s.truncated and not s.greedy:
            return np.asarray(warp(z, s, order="sglang"))
        return np.asarray(s.law(list(z)))

    def logits_along(self, prompt: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """The logits after ``prompt + tokens[:d]`` for each d < len(tokens) (``[len(tokens), V]``),
        from one causal forward over ``prompt + tokens[:-1]``, as a server reads the laws along a
        path it has: the same model, the same numbers up to rounding (a row of a longer forward may
        differ from the shorter forward's last row in the last bits), and a function of the path
        alone."""
        path = tuple(prompt) + tuple(tokens)[:-1]
        with torch.no_grad():
            out, _ = self.target.forward(torch.tensor(path), KVCache())
        return out[len(prompt) - 1 :].to(torch.float64).numpy().copy()

    def decode(
        self, prompt: Seq, start: Sequence[int], n: int, law: Callable[[np.ndarray], np.ndarray], draw: Any
    ) -> list[int]:
        """Plain decoding after ``prompt`` of the tokens ``start`` then more, to ``n`` in all: each
        next token is ``draw(law(row))`` of the logits row after the tokens so far, read on a KV
        cache (one forward of the prompt and ``start``, then one token's forward per token, as a
        server decodes: the same numbers as :meth:`logits` up to rounding, a function of the path
        alone)."""
        out = list(start)
        if len(out) >= n:
            return out[:n]
        cache = KVCache()
        with torch.no_grad():
            rows, _ = self.target.forward(torch.tensor(tuple(prompt) + tuple(out)), cache)
            while True:
                out.append(draw(law(rows[-1].to(torch.float64).numpy())))
                if len(out) == n:
                    return out
                rows, _ = self.target.forward(torch.tensor(out[-1:]), cache)

    def draft_prob(self, context: Seq, token: int) -> float:
        """The draft model's probability of ``token`` after ``context`` (its law at T = 1)."""
        return float(self.drafter(context).law(context)[token])

    def loop(self, temperature: float, rule: str) -> ReferenceEngine:
        """The reference loop (KV cache, tree forward) at ``temperature`` verified by ``rule``."""
        key = (temperature, rule)
        if key not in self._loops:
            p = self.proposer
            self._loops[key] = ReferenceEngine(
                self.target, self.drafter, p.process, rule, p.shape, Sampling(temperature)
            )
        return self._loops[key]

    def tempered(self, temperature: float) -> Callable[[Seq], Sequence[float]]:
        """The target's law at ``temperature`` as the reference loop computes it (memoized)."""
        if temperature not in self._lms:
            self._lms[temperature] = TransformerLM(self.target, temperature)
        return self._lms[temperature].law

    def laws_loop(
        self,
        context: Seq,
        n: int,
        rng: np.random.Generator,
        law: Callable[[Seq], Sequence[float]],
        rule: str,
        rows_from: Seq | None = None,
        stale: bool = False,
    ) -> tuple[list[int], int, int]:
        """The reference loop's steps on the target laws ``law`` (no KV cache): the same process,
        rule and draws from ``rng`` as :func:`specproof.reference.decode.decode` (with
        :meth:`tempered` laws, the same tokens). Returns the first ``n`` tokens and the drafted
        and accepted counts. ``rows_from`` (the ``batch_rows`` bug): the verifier is told the
        draft laws after that context (another request's), not after the step's own.
        ``stale`` (the ``stale_after_hit`` bug): the drafts are drawn after the context's first
        token alone (a draft cache never filled), and the verifier is told their law (consistent:
        the law holds)."""
        proc, verify = self.proposer.process, RULES[rule]
        shape = DraftTree(self.proposer.shape, "shape")
        tokens, drafted, accepted = list(context), 0, 0
        self.last_steps = []
        while len(tokens) - len(context) < n:
            ctx = tuple(tokens)
            draft = self.drafter(ctx)
            if stale:
                draft = _Elsewhere(self.drafter(ctx[:1]), ctx, ctx[:1])
            proposal = proc.propose(Sampler(rng), shape, ctx, draft)
            laws = [law(c) for c in node_contexts(ctx, proposal)]
            told = ctx if rows_from is None else tuple(rows_from)
            q = proc.draft_probs(told, proposal, draft if rows_from is None else self.drafter(told))
            step = make_step(proposal.parents, proposal.tokens, q, laws)
            emitted = verify(Sampler(rng), step).emitted(step)
            tokens.extend(emitted)
            self.last_steps.append(len(emitted))
            drafted += len(proposal.tokens) - 1
            accepted += len(emitted) - 1
        return tokens[len(context) :][:n], drafted, accepted


class _Elsewhere:
    """A draft model read after another context: its law after ``here`` + drafts is the model's
    after ``there`` + the same drafts."""

    def __init__(self, lm: Any, here: Seq, there: Seq) -> None:
        self.lm, self.here, self.there, self.vocab = lm, here, there, lm.vocab

    def law(self, context: Seq) -> tuple[Any, ...]:
        return tuple(self.lm.law(self.there + tuple(context[len(self.here) :])))
