"""The optimized decoding loop: batched proposers, tree attention on a paged KV cache and the
verification kernels, over many requests at once (reference: ``reference/decode.py``).

Each :meth:`OptimizedDecoder.step` advances every live request by one speculative step:

1. **draft** - the batched drafter (:mod:`specproof.optimized.proposers`) grows every
   request's tree at once, depth by depth (static shapes, or EAGLE-2's dynamic tree, whose
   shape differs per request);
2. **target forward** - one forward of the target over all the flattened trees
   (:class:`~specproof.optimized.transformer.PagedTransformer`): masks and position ids from the
   optimized ``tree_buffers``, K/V written to each request's blocks, the paged tree attention
   kernel reading them back;
3. **verify** - the chosen rule's kernel (``token``, ``block``, ``mss``, ``rrs``,
   ``target_only``, ``greedy``, ``strict`` or ``typical``), one launch per tree size present in
   the batch;
4. **commit** - each accepted path compacted behind its request's prefix by the paged commit
   kernel (only slots whose node is not in place move), blocks past the new length freed, the
   accepted nodes' hidden states handed to the drafter; each request emits its accepted drafts
   and the next token (ragged: 1 to depth + 1 tokens per request).

Requests join (:meth:`OptimizedDecoder.admit`: their prompts are prefilled together at the
next step) and leave (after ``steps`` steps or ``max_new_tokens`` tokens, truncated to it) at
any step; the batch is whatever is live.

**Randomness** is a tape of uniforms per request and step in the reference's layout
(:class:`StepUniforms`): ``draft[s]`` is site ``("draft", s)`` of shape node s, ``node[c]`` the
rule's site of tree node c (``("accept", c)`` for token, mss, rrs; ``("eta", c)`` for block;
``("coin", c)`` for target_only; ``("y", c)`` for strict), ``final`` site ``("final", 0)``. A
request's uniforms come from its own seed (:class:`SeededUniforms`), so its tokens do not depend
on what else is in the batch, or from a given tape (:class:`TapeUniforms`).

**Coupling** (proofs_notes/optimized_decode.md; tests/test_optimized_decode.py): fed the same
tape, :func:`reference_decode_on_tape` runs the reference loop ``reference.decode.decode`` on
it, and in float64 the optimized loop emits the same tokens step for step.

:class:`OptimizedEngine` is the engine contract of the engine audit: ``generate(prompt_ids,
max_new_tokens, seed)`` and ``target_law(context)``.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from specproof.reference.choices import TapeReader
from specproof.reference.decode import Decoded, e2e_models
from specproof.reference.dynamic_tree import DynamicTree
from specproof.reference.errors import (
    BadParameterError,
    InternalError,
    NotAChainError,
    ShapeError,
    TokenOutOfRangeError,
)
from specproof.reference.processes import Process
from specproof.reference.proposers import PROPOSERS, Proposer
from specproof.reference.rules import RULES
from specproof.reference.transformer import TinyTransformer
from specproof.reference.tree import DraftTree

from ._device import kernel_device
from .block import block as block_kernel
from .greedy import greedy as greedy_kernel
from .mss import mss as mss_kernel
from .paged_kv import QueryBatch, commit, tree_rows
from .proposers import BatchedDrafter, RowProposal, propose, twin
from .rrs import rrs as rrs_kernel
from .strict import strict as strict_kernel
from .target_only import target_only as target_only_kernel
from .token import token as token_kernel
from .transformer import PagedTransformer
from .typical import typical as typical_kernel

#: the tape site each rule reads per tree node (None: the rule reads no per-node uniform)
NODE_SITE: dict[str, str | None] = {
    "token": "accept",
    "block": "eta",
    "mss": "accept",
    "rrs": "accept",
    "target_only": "coin",
    "greedy": None,
    "typical": None,
    "strict": "y",
}
#: rules verified by a kernel of this package; the reference's traversal has none
KERNEL_RULES = tuple(NODE_SITE)
CHAIN_RULES = ("token", "block")
PHASES = ("prefill", "draft", "target", "verify", "commit")


@dataclass
class StepUniforms:
    """One request's uniforms for one step (module doc): ``draft [S]``, ``node [N]``, ``final``."""

    draft: torch.Tensor
    node: torch.Tensor
    final: float


class SeededUniforms:
    """A request's uniforms from its own ``torch.Generator``: per step, ``S + N + 1`` float64
    uniforms in ``[0, 1)``, laid out as draft, node, final."""

    def __init__(self, seed: int) -> None:
        self.g = torch.Generator().manual_seed(int(seed))

    def next(self, S: int, N: int) -> StepUniforms:
        u = torch.rand(S + N + 1, generator=self.g, dtype=torch.float64)
        return StepUniforms(u[:S], u[S : S + N], float(u[-1]))


class TapeUniforms:
    """A given tape: ``draft [steps, S]``, ``node [steps, N]``, ``final [steps]``."""

    def __init__(self, draft: Any, node: Any, final: Any) -> None:
        self.draft = torch.as_tensor(np.asarray(draft), dtype=torch.float64)
        self.node = torch.as_tensor(np.asarray(node), dtype=torch.float64)
        self.final = torch.as_tensor(np.asarray(final), dtype=torch.float64)
        self.step = 0

    @classmethod
    def random(cls, rng: np.random.Generator, steps: int, S: int, N: int) -> TapeUniforms:
        return cls(rng.random((steps, S)), rng.random((steps, N)), rng.random(steps))

    def next(self, S: int, N: int) -> StepUniforms:
        t = self.step
        if t >= len(self.final):
            raise ShapeError("tape", f"has {len(self.final)} steps; step {t + 1} was asked for")
        if self.draft.shape[1] < S or self.node.shape[1] < N:
            raise ShapeError("tape", f"needs {S} draft and {N} node uniforms per step")
        self.step += 1
        return StepUniforms(self.draft[t, :S], self.node[t, :N], float(self.final[t]))


Uniforms = SeededUniforms | TapeUniforms


@dataclass
class Request:
    rid: Hashable
    tokens: list[int]
    prompt_len: int
    uniforms: Uniforms
    max_new_tokens: int | None
    steps: int | None
    out: Decoded = field(init=False)
    prefilled: bool = False
    done: bool = False

    def __post_init__(self) -> None:
        self.out = Decoded(list(self.tokens))

    @property
    def emitted(self) -> int:
        return len(self.tokens) - self.prompt_len


@dataclass
class Verified:
    path: list[int]
    next_token: int


class OptimizedDecoder:
    """The batched loop (module doc) for one target, proposer, process, shape and rule.

    ``proposer``: a name of ``PROPOSERS`` or a reference :class:`Proposer`; ``process``: one
    of its processes by name (default its first); ``shape``: the draft tree shape (default the
    proposer's sampled-loop shape); ``dtype``: float64 (coupled to the reference) or float32;
    ``poison``: freed cache blocks are filled with NaN, so a read of one shows (tests)."""

    def __init__(
        self,
        target: TinyTransformer,
        proposer: str | Proposer,
        rule: str | None = None,
        *,
        process: str | None = None,
        shape: Sequence[int] | None = None,
        temperature: float = 1.0,
        dtype: torch.dtype = torch.float64,
        block_size: int = 16,
        num_blocks: int = 1024,
        trained: bool = True,
        poison: bool = False,
    ) -> None:
        ref = PROPOSERS[proposer] if isinstance(proposer, str) and proposer in PROPOSERS else proposer
        if not isinstance(ref, Proposer):
            raise BadParameterError("proposer", f"{proposer!r} is unknown; available: {', '.join(PROPOSERS)}")
        self.proposer = ref
        names = [p.name for p in ref.processes]
        if process is not None and process not in names:
            raise BadParameterError("process", f"{process!r} is not one of {ref.name}'s: {', '.join(names)}")
        self.process: Process = ref.processes[names.index(process) if process else 0]
        self.rule = rule or ref.default_rule
        if self.rule not in RULES:
            raise BadParameterError("rule", f"{self.rule!r} is unknown; rules: {', '.join(RULES)}")
        if self.rule not in NODE_SITE:
            raise BadParameterError(
                "rule",
                f"{self.rule!r} has no optimized kernel (kernels: {', '.join(KERNEL_RULES)}); "
                "traversal is verified by the reference loop only",
            )
        self.shape = DraftTree(ref.shape if shape is None else tuple(shape), "shape")
        if self.rule in CHAIN_RULES and not (self.shape.is_chain and self.process.chain):
            raise NotAChainError(
                "rule", f"{self.rule} verifies chains; {ref.name} drafts {self.process.name} trees"
            )
        if not temperature >= 0:
            raise BadParameterError("temperature", f"must be >= 0, got {temperature!r}")
        self.temperature = float(temperature)
        self.dtype = dtype
        #: where the engine's tensors live: the GPU when the kernels are compiled for one
        self.device = kernel_device() or torch.device("cpu")
        self.target = PagedTransformer(verifying_target(ref, target, trained), dtype, self.device)
        self.cache = self.target.new_cache(num_blocks, block_size, poison)
        self.drafter: BatchedDrafter = twin(
            ref,
            target,
            trained=trained,
            dtype=dtype,
            block_size=block_size,
            num_blocks=num_blocks,
            poison=poison,
            device=self.device,
        )
        self.dynamic = isinstance(self.process, DynamicTree)
        #: uniforms per step: draft sites (shape nodes) and tree nodes
        self.S = 0 if self.dynamic else self.shape.n
        self.N = (self.process.nodes + 1) if isinstance(self.process, DynamicTree) else self.shape.n
        self.requests: dict[Hashable, Request] = {}
        self.finished: dict[Hashable, Decoded] = {}
        self.timings: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.steps_run = 0

    # -- requests -----------------------------------------------------------------------------

    def admit(
        self,
        rid: Hashable,
        prompt: Sequence[int],
        *,
        max_new_tokens: int | None = None,
        steps: int | None = None,
        seed: int | None = None,
        tape: TapeUniforms | None = None,
    ) -> None:
        """Queue a request; its prompt is prefilled with the others' at the next step. It stops
        after ``steps`` steps or once ``max_new_tokens`` tokens are out (truncated to them)."""
        if rid in self.requests or rid in self.finished:
            raise BadParameterError("rid", f"request {rid!r} was admitted already")
        toks = [int(t) for t in prompt]
        if not toks:
            raise ShapeError("prompt", "needs at least one token")
        for i, t in enumerate(toks):
            if not 0 <= t < self.target.vocab:
                raise TokenOutOfRangeError(f"prompt[{i}]", f"is {t}, outside [0, {self.target.vocab})")
        if self.drafter.reads_features and len(toks) < 2:
            raise ShapeError("prompt", f"{self.proposer.name} needs at least two prompt tokens")
        for name, v in (("max_new_tokens", max_new_tokens), ("steps", steps)):
            if v is not None and v < 0:
                raise BadParameterError(name, f"must be >= 0, got {v}")
        if (tape is None) == (seed is None):
            raise BadParameterError("seed", "give a seed or a tape (one of them)")
        uniforms: Uniforms = tape if tape is not None else SeededUniforms(int(seed))  # type: ignore[arg-type]
        self.requests[rid] = Request(rid, toks, len(toks), uniforms, max_new_tokens, steps)
        self.cache.admit(rid)
        self.drafter.admit(rid, toks)
        self._maybe_finish(self.requests[rid])

    def cancel(self, rid: Hashable) -> Decoded:
        """Stop a live request now (as a client that goes away): its blocks are freed and what
        it emitted so far is returned."""
        if rid not in self.requests:
            raise BadParameterError("rid", f"request {rid!r} is not live")
        req = self.requests.pop(rid)
        req.done = True
        self.cache.release(rid)
        self.drafter.release(rid)
        return req.out

    def _maybe_finish(self, req: Request) -> None:
        limit = req.max_new_tokens
        if (req.steps is not None and len(req.out.emitted_per_step) >= req.steps) or (
            limit is not None and req.emitted >= limit
        ):
            if limit is not None and req.emitted > limit:
                del req.tokens[req.prompt_len + limit :]
                req.out.tokens = list(req.tokens)
            req.done = True
            self.finished[req.rid] = req.out
            del self.requests[req.rid]
            self.cache.release(req.rid)
            self.drafter.release(req.rid)

    def _prefill(self, reqs: list[Request]) -> None:
        rows = [r for r in reqs if len(r.tokens) > 1]
        if rows:
            from .paged_kv import chain_rows

            rids = [r.rid for r in rows]
            batch = QueryBatch.build(
                self.cache, rids, chain_rows([0] * len(rows), [r.tokens[:-1] for r in rows])
            )
            _, hidden = self.target.forward(batch, self.cache)
            for b, r in enumerate(rows):
                s, c = int(batch.start[b]), int(batch.count[b])
                self.cache.set_length(r.rid, c)
                if self.drafter.reads_features:
                    self.drafter.observe(r.rid, [h[s : s + c] for h in hidden])
        for r in reqs:
            r.prefilled = True

    # -- one step -----------------------------------------------------------------------------

    def step(self) -> list[Hashable]:
        """One speculative step of every live request; returns the requests it advanced."""
        reqs = list(self.requests.values())
        if not reqs:
            return []
        tp = self._clock()
        self._prefill([r for r in reqs if not r.prefilled])
        t0 = self._clock()
        rids = [r.rid for r in reqs]
        tapes = [r.uniforms.next(self.S, self.N) for r in reqs]
        u_draft = torch.stack([t.draft for t in tapes]) if self.S else torch.zeros(len(reqs), 0)
        props = propose(self.drafter, self.process, self.shape, rids, [r.tokens for r in reqs], u_draft)
        t1 = self._clock()
        prefix = [self.cache.lengths[r] for r in rids]
        rows = self._rows(reqs, prefix, props)
        batch = QueryBatch.build(self.cache, rids, rows)
        logits, hidden = self.target.forward(batch, self.cache)
        laws = self.target.laws(logits, self.temperature)
        t2 = self._clock()
        row_laws = [self._row_laws(laws, batch, b, len(p.parents)) for b, p in enumerate(props)]
        results = self.verify(props, row_laws, tapes)
        t3 = self._clock()
        self._commit(rids, [v.path for v in results], prefix)
        for b, (r, v) in enumerate(zip(reqs, results)):
            if self.drafter.reads_features:
                s = int(batch.start[b])
                idx = [s + a for a in v.path]
                self.drafter.observe(r.rid, [h[idx] for h in hidden])
            emitted = [props[b].tokens[a] for a in v.path[1:]] + [v.next_token]
            r.out.overlaps.extend(_overlaps(props[b], row_laws[b]))
            r.tokens.extend(emitted)
            r.out.tokens.extend(emitted)
            r.out.emitted_per_step.append(len(emitted))
            if self.cache.lengths[r.rid] != len(r.tokens) - 1:  # pragma: no cover - commit's invariant
                raise InternalError(f"cache of {r.rid!r} holds {self.cache.lengths[r.rid]} slots")
        t4 = self._clock()
        for r in reqs:
            self._maybe_finish(r)
        for k, dt in zip(PHASES, (t0 - tp, t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            self.timings[k] += dt
        self.steps_run += 1
        return rids

    def _clock(self) -> float:
        """Wall time for :attr:`timings`, after the device's queued work (on a GPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def run(self) -> dict[Hashable, Decoded]:
        """Step until every request has finished; returns (and keeps) the finished ones."""
        while self.requests:
            self.step()
        return self.finished

    # -- the parts a mutant overrides ---------------------------------------------------------

    def _rows(self, reqs: list[Request], prefix: list[int], props: list[RowProposal]) -> list:
        return tree_rows(prefix, [p.parents for p in props], [p.tokens for p in props])

    def _row_laws(self, laws: torch.Tensor, batch: QueryBatch, b: int, n: int) -> torch.Tensor:
        s = int(batch.start[b])
        return laws[s : s + n]

    def _commit(self, rids: list[Hashable], paths: list[list[int]], prefix: list[int]) -> None:
        commit(self.cache, rids, paths, prefix)

    # -- verification -------------------------------------------------------------------------

    def verify(
        self, props: list[RowProposal], laws: list[torch.Tensor], tapes: list[StepUniforms]
    ) -> list[Verified]:
        """The rule's kernel on every row, one launch per tree size (rows of a launch must
        have the same number of nodes; a padded node would be a draft)."""
        out: list[Verified | None] = [None] * len(props)
        groups: dict[int, list[int]] = {}
        for b, p in enumerate(props):
            groups.setdefault(len(p.parents), []).append(b)
        for n, rows in groups.items():
            for b, v in zip(rows, self._verify_group(n, [props[b] for b in rows], [laws[b] for b in rows],
                                                     [tapes[b] for b in rows])):  # fmt: skip
                out[b] = v
        return [v for v in out if v is not None]

    def _verify_group(
        self, n: int, props: list[RowProposal], laws: list[torch.Tensor], tapes: list[StepUniforms]
    ) -> list[Verified]:
        rule = self.rule
        parents = torch.tensor([p.parents for p in props], dtype=torch.int64)
        tokens = torch.tensor([p.tokens for p in props], dtype=torch.int64)
        tp = torch.stack(laws)
        dp = None if props[0].draft_laws is None else torch.stack([p.draft_laws for p in props])  # type: ignore[misc]
        # a rule that reads no per-node uniform is never given these
        u_node = torch.stack([t.node[:n] for t in tapes]) if NODE_SITE[rule] else torch.zeros(len(tapes), n)
        u_final = torch.tensor([t.final for t in tapes], dtype=torch.float64)
        if rule in CHAIN_RULES:
            kernel = token_kernel if rule == "token" else block_kernel
            q = None if dp is None else dp[:, : n - 1]
            res = kernel(tokens[:, 1:], q, tp, u_node, u_final)
            outs = []
            for row in res.tolist():
                L = sum(1 for t in row if t >= 0) - 1
                outs.append(Verified(list(range(L + 1)), int(row[L])))
            return outs
        if rule in ("mss", "rrs"):
            kern = mss_kernel if rule == "mss" else rrs_kernel
            acc, nxt = kern(parents, tokens, dp, tp, u_node, u_final)
        elif rule == "target_only":
            acc, nxt = target_only_kernel(parents, tokens, tp, u_node, u_final)
        elif rule == "strict":
            acc, nxt = strict_kernel(parents, tokens, tp, u_node)
        elif rule == "greedy":
            acc, nxt = greedy_kernel(parents, tokens, tp)
        else:
            acc, nxt = typical_kernel(parents, tokens, tp, u_final, **dict(RULES["typical"].params))
        return [Verified([a for a in row if a >= 0], int(x)) for row, x in zip(acc.tolist(), nxt.tolist())]


def verifying_target(proposer: Proposer, target: TinyTransformer, trained: bool) -> TinyTransformer:
    """The model that verifies ``proposer``'s drafts: ``target``, or the backbone a proposer
    fine-tunes with its heads (Medusa-2), as the reference proposer declares it."""
    get = getattr(proposer, "verifying_target", None)
    return target if get is None else get(target, trained)


def _overlaps(prop: RowProposal, laws: torch.Tensor) -> list[float]:
    """``sum_x min(p, q)`` at each node with children (q its draft law, or one-hot at its first
    child): that child's token-level acceptance probability (the reference loop's overlaps)."""
    out = []
    kids: dict[int, list[int]] = {}
    for c, p in enumerate(prop.parents[1:], 1):
        kids.setdefault(p, []).append(c)
    for i in range(len(prop.parents)):
        if i not in kids:
            continue
        law = laws[i].double()
        if prop.draft_laws is None:
            out.append(float(law[prop.tokens[kids[i][0]]]))
        else:
            out.append(float(torch.minimum(law, prop.draft_laws[i].double()).sum()))
    return out


# -- the engine contract ------------------------------------------------------------------------


class OptimizedEngine:
    """The optimized loop as an engine (the engine audit's contract).

    ``generate(prompt_ids, max_new_tokens, seed) -> list[int]``: the new tokens of one request
    decoded by the optimized loop, its uniforms drawn from ``seed`` alone (so a request gives
    the same tokens alone or batched: :meth:`generate_batch`). ``target_law(context)``: the law
    the engine claims to preserve for the next token after ``context``, from the same target
    weights in the same dtype without speculation: ``softmax(logits / temperature)``, or the
    one-hot law at the argmax (greedy decoding) when the rule preserves greedy decoding.
    Defaults: the 16-token target of ``specproof e2e``, the proposer's default rule."""

    def __init__(
        self,
        proposer: str | Proposer = "draft",
        rule: str | None = None,
        target: TinyTransformer | None = None,
        *,
        process: str | None = None,
        shape: Sequence[int] | None = None,
        temperature: float = 1.0,
        dtype: torch.dtype = torch.float64,
        block_size: int = 16,
        num_blocks: int = 1024,
        trained: bool = True,
    ) -> None:
        self.target_model = target if target is not None else e2e_models()[1]
        self.kwargs: dict[str, Any] = dict(
            process=process,
            shape=shape,
            temperature=temperature,
            dtype=dtype,
            block_size=block_size,
            num_blocks=num_blocks,
            trained=trained,
        )
        self.decoder = OptimizedDecoder(self.target_model, proposer, rule, **self.kwargs)
        self.rule = self.decoder.rule
        self.temperature = float(temperature)
        self.vocab = self.target_model.vocab
        self._next = 0

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, seed: int) -> list[int]:
        return self.generate_batch([prompt_ids], max_new_tokens, [seed])[0]

    def generate_batch(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, seeds: Sequence[int]
    ) -> list[list[int]]:
        """Several requests decoded together, each with its own seed."""
        if len(prompts) != len(seeds):
            raise ShapeError("seeds", f"has {len(seeds)} entries for {len(prompts)} prompts")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise BadParameterError("max_new_tokens", f"must be an int >= 0, got {max_new_tokens!r}")
        dec = self.decoder
        ids = []
        for prompt, seed in zip(prompts, seeds):
            rid = ("generate", self._next)
            self._next += 1
            dec.admit(rid, list(prompt), max_new_tokens=max_new_tokens, seed=int(seed))
            ids.append(rid)
        dec.run()
        out = []
        for rid, prompt in zip(ids, prompts):
            res = dec.finished.pop(rid)
            out.append(res.tokens[len(prompt) :])
        return out

    @torch.no_grad()
    def target_law(self, context: Sequence[int]) -> tuple[float, ...]:
        toks = [int(t) for t in context]
        if not toks:
            raise ShapeError("context", "needs at least one token")
        for i, t in enumerate(toks):
            if not 0 <= t < self.vocab:
                raise TokenOutOfRangeError(f"context[{i}]", f"is {t}, outside [0, {self.vocab})")
        from .paged_kv import chain_rows

        model = self.decoder.target
        cache = model.new_cache(-(-len(toks) // 16) + 1, 16)
        cache.admit(0)
        batch = QueryBatch.build(cache, [0], chain_rows([0], [toks]))
        logits, _ = model.forward(batch, cache)
        greedy = RULES[self.rule].preserves == "greedy"
        law = model.laws(logits[-1:], 0.0 if greedy else self.temperature)[0]
        return tuple(float(v) for v in law.double())


# -- the reference loop on a tape -----------------------------------------------------------------

_PATCH_LOCK = threading.Lock()


class _MarginReader(TapeReader):
    """A tape reader that lowers ``sink[-1]`` to the margin of every draw (see
    :func:`reference_decode_on_tape`)."""

    def __init__(self, tape: dict[str, list[float]], sink: list[float]) -> None:
        super().__init__(tape)
        self.sink = sink

    def _peek(self, site: tuple[str, int]) -> float:
        return float(self._tape[site[0]][site[1]])

    def bernoulli(self, p: Any, site: tuple[str, int]) -> bool:
        out = super().bernoulli(p, site)
        u = self._peek(site)
        self.sink[-1] = min(self.sink[-1], abs(u - float(p)))
        return out

    def categorical(self, weights: Sequence[Any], site: tuple[str, int]) -> int:
        out = super().categorical(weights, site)
        u = self._peek(site)
        w = [float(x) for x in weights]
        total, acc = sum(w), 0.0
        for x in w:
            if x > 0:
                acc += x
                if acc < total:
                    self.sink[-1] = min(self.sink[-1], abs(u - acc / total))
        return out


@contextlib.contextmanager
def _reference_samplers(factory: Callable[[Any], Any]) -> Iterator[None]:
    import specproof.reference.decode as ref

    with _PATCH_LOCK:
        original = ref.Sampler
        setattr(ref, "Sampler", factory)  # noqa: B010 - the loop looks its sampler up by name
        try:
            yield
        finally:
            setattr(ref, "Sampler", original)  # noqa: B010


def reference_decode_on_tape(
    target: TinyTransformer,
    proposer: str | Proposer,
    rule: str,
    prompt: Sequence[int],
    tape: TapeUniforms,
    steps: int,
    *,
    process: str | None = None,
    shape: Sequence[int] | None = None,
    temperature: float = 1.0,
    trained: bool = True,
    margins: list[float] | None = None,
) -> Decoded:
    """``reference.decode.decode`` itself, each step's draws read from ``tape`` (the layout of
    :class:`StepUniforms`) instead of a seeded sampler: step t's proposal reads ``("draft", s)``
    from ``draft[t, s]``, its verification reads the rule's node site c from ``node[t, c]`` and
    ``("final", 0)`` from ``final[t]``. Raises if the loop did not draw through two samplers per
    step (so a change of the reference loop cannot silently bypass the tape).

    ``margins``: if given, receives per step the smallest distance between a uniform the step
    read and the threshold it was compared with (``|u - p|`` for ``u < p``; for an inverse-CDF
    draw, ``|u - c_i / total|`` over the partial sums ``c_i`` that bound its cells): a step
    whose margin exceeds the rounding of its laws decides the same on laws rounded differently."""
    from specproof.reference.decode import decode

    ref = PROPOSERS[proposer] if isinstance(proposer, str) else proposer
    names = [p.name for p in ref.processes]
    proc = ref.processes[names.index(process) if process else 0]
    site = NODE_SITE.get(rule) or "accept"
    calls = [0]

    def sampler(rng: Any) -> TapeReader:
        t, phase = divmod(calls[0], 2)
        calls[0] += 1
        draws = {"draft": tape.draft[t].tolist()} if phase == 0 else {}
        if phase:
            draws = {site: tape.node[t].tolist(), "final": [float(tape.final[t])]}
        if margins is None:
            return TapeReader(draws)
        if phase == 0:
            margins.append(math.inf)
        return _MarginReader(draws, margins)

    with _reference_samplers(sampler):
        out = decode(
            verifying_target(ref, target, trained),
            ref.make_drafter(target, trained),
            proc,
            rule,
            ref.shape if shape is None else tuple(shape),
            tuple(prompt),
            steps,
            np.random.default_rng(0),
            temperature,
        )
    if calls[0] != 2 * len(out.emitted_per_step):
        raise InternalError(
            f"the reference loop drew through {calls[0]} samplers over {len(out.emitted_per_step)} steps, "
            "not two per step: the tape was not what it read"
        )
    return out
