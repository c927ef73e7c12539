"""The engine audit's own engines: the reference decoding loop, and loops with one bug each.

* :class:`ReferenceEngine`: :func:`specproof.reference.decode.decode` as an engine, for a
  proposer, a process and a rule; :class:`DirectEngine`: no speculation at all (the baseline the
  audit's false-alarm rate is measured on).
* The mutant loops (:data:`MUTANT_DOCS`), built from the same reference pieces with one fault
  each (a draft law that is not the one the drafts came from, stale features, no KV rollback,
  temperature on one side), the engines that break the contract, and the alternatives that look
  wrong but are lossless.

They run on :func:`engine_target`, an 8-token transformer whose next-token laws are spread
(entropy 1.4 to 1.6 nats) and whose draft model agrees with it on about 60% of the mass, so
drafts are both accepted and rejected. Their drafters are untrained: the quality of a draft
never decides a verdict, only the speed (proofs_notes/engine_audit.md).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from specproof.properties.engine.contract import Sampling, Seq
from specproof.properties.verdicts import Planted, Verdict, planted
from specproof.reference.choices import Sampler
from specproof.reference.decode import NodeLaw, decode
from specproof.reference.errors import BadParameterError
from specproof.reference.models import LM
from specproof.reference.processes import PROCESSES, Process, Proposal
from specproof.reference.proposers import Proposer
from specproof.reference.proposers.draft_model import draft_model
from specproof.reference.proposers.mtp import MTPModules
from specproof.reference.proposers.selfdraft import BoundDraft, Drafter, DraftNet, as_drafter, target_features
from specproof.reference.rules import RULES
from specproof.reference.sampling import ProcessedLM
from specproof.reference.step import make_step
from specproof.reference.transformer import Config, KVCache, TinyTransformer, TransformerLM
from specproof.reference.tree import DraftTree


@functools.cache
def engine_target() -> TinyTransformer:
    """The reference engines' target: 8 tokens, width 16, 2 layers (module docstring)."""
    return TinyTransformer(Config(vocab=8, width=16, layers=2, heads=2, mlp=32), seed=0)


PASS, LOSSY, VIOLATION = Verdict.PASS, Verdict.LOSSY, Verdict.CONTRACT_VIOLATION
#: the rules whose correctness holds node by node (proofs_notes: token, strict, greedy, rrs, mss,
#: target_only): each emitted token's law given the engine's whole past is the target's
SEQUENTIAL_RULES = frozenset({"token", "strict", "greedy", "rrs", "mss", "target_only"})

#: Two prompts: a plain one, and a repeated pattern on which n-gram lookup finds matches.
REFERENCE_PROMPTS: tuple[Seq, ...] = ((0, 6), (5, 2, 5, 2))


class ReferenceEngine:
    """:func:`specproof.reference.decode.decode` as an engine: ``proposer`` drafts by
    ``process`` on ``shape``, ``rule`` verifies, the target's KV cache keeps the accepted path.
    ``generate`` runs steps until ``max_new_tokens`` tokens are emitted (or end of sequence) and
    returns the first ``max_new_tokens`` (the last step may emit more; the first M tokens of a
    lossless stream are the target's M-token law). Every request parameter of ``sampling``
    applies at every node with the node's own context (reference/sampling.py). ``last_steps``
    holds the tokens emitted per target forward of the last call."""

    def __init__(
        self,
        target: TinyTransformer,
        drafter: LM | Drafter,
        process: str | Process,
        rule: str,
        shape: Seq,
        sampling: Sampling,
    ) -> None:
        self.target, self.drafter, self.process = target, drafter, process
        self.rule, self.shape, self.sampling = rule, shape, sampling
        self.vocab = target.vocab
        self.eos_id = sampling.eos
        self._law = TransformerLM(target, sampling.temperature)
        self._raw = TransformerLM(target, 1.0)
        self.last_steps: list[int] = []
        self.last_counters: dict[str, int] = {}
        #: node by node, the rule's emitted token has the target's law given all before it
        self.sequential_verification = True if rule in SEQUENTIAL_RULES else None
        if hasattr(drafter, "law") and sampling.plain:  # an independent draft model: its law is a law
            self.draft_law = self._draft_law
            if process == "iid_chain" and rule == "token" and not sampling.greedy:
                #: the acceptance oracle's rule (properties/engine/acceptance.py): a chain of
                #: len(shape) - 1 drafts from draft_law, verified token by token
                self.acceptance_rule = {"rule": "token_chain", "drafts": len(shape) - 1}

    def _draft_law(self, context: Sequence[int]) -> Sequence[float]:
        """The law the drafts after ``context`` are drawn from: the draft model's own, as the
        loop draws them under a plain request at any temperature (the verifier is told the same
        law; a draft model built at the request's temperature is tempered already)."""
        q = self.drafter.law(tuple(int(x) for x in context))  # type: ignore[union-attr]
        return [float(v) for v in q]

    def node_law(self, prompt: Seq) -> NodeLaw | None:
        """The loop's hook into how a node's target law is computed (``decode``'s ``node_law``):
        ``None``, the reference's own; a defective loop returns its one-line change."""
        return None

    def run(self, prompt: Seq, max_new_tokens: int, rng: np.random.Generator) -> list[int]:
        node_law = self.node_law(prompt)
        plain = self.sampling.plain and not self.sampling.ends and node_law is None
        out = decode(
            self.target,
            self.drafter,
            self.process,
            self.rule,
            self.shape,
            prompt,
            max_new_tokens,
            rng,
            temperature=self.sampling.temperature,
            until=max_new_tokens,
            sampling=None if plain else self.sampling,
            node_law=node_law,
        )
        self.last_steps = list(out.emitted_per_step)
        self.last_counters = {
            "drafted": sum(out.drafted_per_step),
            "accepted": sum(n - 1 for n in out.emitted_per_step),
        }
        return out.tokens[len(prompt) :][:max_new_tokens]

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        return self.run(tuple(prompt_ids), max_new_tokens, np.random.default_rng(seed))

    def target_law(self, context: Sequence[int], prompt_len: int | None = None) -> Sequence[float]:
        return target_law(self._law, self._raw, self.sampling, context, prompt_len)


def target_law(
    plain: LM, raw: LM, sampling: Sampling, context: Sequence[int], prompt_len: int | None
) -> Sequence[float]:
    """The processed law after ``context`` (its first ``prompt_len`` tokens the prompt): the
    temperature law itself when nothing else is asked, else every parameter applied to the raw
    logits (``raw``, at temperature 1)."""
    ctx = tuple(int(x) for x in context)
    if sampling.plain and not sampling.ends:
        return plain.law(ctx)
    return ProcessedLM(raw, sampling, len(ctx) if prompt_len is None else prompt_len).law(ctx)


class DirectEngine:
    """No speculation: each new token drawn from the target's own law (processed by
    ``sampling`` when given, with the true context) by inverse CDF on a uniform of
    ``numpy.random.default_rng(seed)``; end of sequence ends it. Exact by construction: the
    baseline the engine audit's false-alarm rate is measured on."""

    def __init__(self, lm: LM, sampling: Sampling | None = None, raw: LM | None = None) -> None:
        self.vocab = lm.vocab
        self._law, self._raw = lm, raw or lm
        self.sampling = sampling or Sampling(getattr(lm, "temperature", 1.0))
        self.eos_id = self.sampling.eos

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        rng = np.random.default_rng(seed)
        ctx = tuple(prompt_ids)
        out: list[int] = []
        for _ in range(max_new_tokens):
            law = self.target_law(ctx + tuple(out), len(ctx))
            cdf = np.cumsum([float(v) for v in law])
            out.append(int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), self.vocab - 1)))
            if out[-1] == self.eos_id or (self.sampling.ends and self.sampling.end(out) is not None):
                break
        return out

    def target_law(self, context: Sequence[int], prompt_len: int | None = None) -> Sequence[float]:
        if self._raw is self._law:
            return [float(v) for v in self._law.law(tuple(int(x) for x in context))]
        return [float(v) for v in target_law(self._law, self._raw, self.sampling, context, prompt_len)]


def direct_engine(sampling: Sampling) -> DirectEngine:
    target = engine_target()
    return DirectEngine(TransformerLM(target, sampling.temperature), sampling, TransformerLM(target, 1.0))


def reference_engine(proposer: Proposer, rule: str, sampling: Sampling) -> ReferenceEngine:
    target = engine_target()
    greedy = RULES[rule].preserves == "greedy"
    if greedy != sampling.greedy:
        raise BadParameterError(
            "sampling",
            f"rule {rule} preserves {'greedy decoding' if greedy else 'sampling'}, not {sampling.label}",
        )
    return ReferenceEngine(
        target, proposer.make_drafter(target, trained=False), proposer.process, rule, proposer.shape, sampling
    )


# --------------------------------------------------------------------------- mutant loops


@dataclass(frozen=True)
class ReportedBy(Process):
    """A process that samples its drafts from the step's drafter but tells the verifier the
    draft laws of ``report`` (another drafter), by ``report_as``'s rule for what it gives.
    With ``report`` the same drafter and ``report_as`` the process itself, this is the process."""

    report: Drafter | None = None
    report_as: Process | None = None

    def draft_probs(self, prefix: Seq, proposal: Proposal, draft: LM) -> Any:
        how = self.report_as or self
        lm = self.report(prefix) if self.report is not None else draft
        return Process.draft_probs(how, prefix, proposal, lm)


def _as_process(base: Process, name: str, **changes: Any) -> ReportedBy:
    return ReportedBy(name, base.choose, base.gives_draft_probs, base.chain, base.doc, **changes)


class _LateFeatures(BoundDraft):
    """A self-drafting network bound to a prefix but fed every hidden state one position late:
    row i holds the features of position i - 1 (row 0 repeats itself)."""

    def __init__(self, net: DraftNet, target: TinyTransformer, prefix: Seq, temperature: float) -> None:
        super().__init__(net, target, prefix, temperature)
        fresh = target_features(target, prefix)
        self.hidden = [torch.cat([h[:1], h[:-1]]) for h in fresh]


def _late_drafter(net: DraftNet, target: TinyTransformer) -> Drafter:
    memo: dict[Seq, BoundDraft] = {}

    def at(prefix: Seq) -> LM:
        if prefix not in memo:
            memo[prefix] = _LateFeatures(net, target, prefix, 1.0)
        return memo[prefix]

    return at


def decode_without_rollback(
    target: TinyTransformer,
    drafter: LM | Drafter,
    process: Process,
    rule: str,
    shape: Seq,
    prompt: Seq,
    until: int,
    rng: np.random.Generator,
    temperature: float = 1.0,
    rollback: bool = True,
    steps: list[int] | None = None,
) -> list[int]:
    """The reference loop (reference/decode.py) step for step, except that with ``rollback``
    False the target's KV cache keeps every drafted node after verification instead of only the
    accepted path (the next step then attends to rejected drafts, at shifted positions). With
    ``rollback`` True it draws and emits exactly what :func:`decode` does (tests/test_engine_audit.py
    checks that, token for token). ``steps``, when given, receives the tokens emitted per step."""
    drafter_ = as_drafter(drafter)
    tree_shape = DraftTree(shape, "shape")
    cache = KVCache()
    if len(prompt) > 1:
        target.forward(torch.tensor(prompt[:-1]), cache)
    tokens = list(prompt)
    while len(tokens) - len(prompt) < until:
        ctx = tuple(tokens)
        draft = drafter_(ctx)
        proposal = process.propose(Sampler(rng), tree_shape, ctx, draft)
        tree = DraftTree(proposal.parents)
        prefix_len = len(cache)
        logits, _ = target.forward_tree(tree, torch.tensor(proposal.tokens), cache)
        laws = target.next_token_probs(logits, temperature)
        laws = laws / laws.sum(-1, keepdim=True)
        step = make_step(
            proposal.parents,
            proposal.tokens,
            process.draft_probs(ctx, proposal, draft),
            [[float(v) for v in row] for row in laws],
        )
        outcome = RULES[rule](Sampler(rng), step)
        if rollback:
            cache.commit(tree, outcome.accepted, prefix_len)
        # the fault: no commit, so every drafted node's K/V stays, in tree order, and the next
        # step's nodes sit after them (attending to rejected drafts, at shifted positions)
        tokens.extend(outcome.emitted(step))
        if steps is not None:
            steps.append(len(outcome.emitted(step)))
    return tokens[len(prompt) :][:until]


class LoopEngine(ReferenceEngine):
    """A reference engine whose loop is :func:`decode_without_rollback` (``rollback`` False:
    the KV-cache mutant)."""

    def __init__(self, *args: Any, rollback: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rollback = rollback

    def run(self, prompt: Seq, max_new_tokens: int, rng: np.random.Generator) -> list[int]:
        proc = PROCESSES[self.process] if isinstance(self.process, str) else self.process
        self.last_steps = []
        return decode_without_rollback(
            self.target,
            self.drafter,
            proc,
            self.rule,
            self.shape,
            prompt,
            max_new_tokens,
            rng,
            self.sampling.temperature,
            self.rollback,
            self.last_steps,
        )


CHAIN3 = (-1, 0, 1, 2)


def _draft(sampling: Sampling) -> TransformerLM:
    """The reference draft model (temperature 1, whatever the target's temperature)."""
    return draft_model(engine_target())


def greedy_draft_soft_law(sampling: Sampling) -> ReferenceEngine:
    """Drafts are the draft model's argmax chain, but the verifier is told they were sampled
    from the draft's soft law q (token-level verification then accepts x with p(x) / q(x))."""
    proc = _as_process(
        PROCESSES["onehot_chain"], "argmax chain, verifier given q", report_as=PROCESSES["iid_chain"]
    )
    return ReferenceEngine(engine_target(), _draft(sampling), proc, "token", CHAIN3, sampling)


def _mtp_net() -> MTPModules:
    return MTPModules(engine_target(), modules=3)


def late_features(sampling: Sampling) -> ReferenceEngine:
    """MTP drafts sampled with the target's hidden states one position late, while the verifier
    is given the draft laws computed from the right features."""
    target, net = engine_target(), _mtp_net()
    proc = _as_process(PROCESSES["iid_chain"], "iid chain, q from fresh features", report=net.drafter(target))
    return ReferenceEngine(target, _late_drafter(net, target), proc, "token", CHAIN3, sampling)


def late_features_consistent(sampling: Sampling) -> ReferenceEngine:
    """The same stale features for drafting and for the law given to the verifier: a worse draft,
    still lossless (the verifier needs the law the drafts were drawn from, nothing better)."""
    target, net = engine_target(), _mtp_net()
    return ReferenceEngine(target, _late_drafter(net, target), "iid_chain", "token", CHAIN3, sampling)


def no_kv_rollback(sampling: Sampling) -> LoopEngine:
    """The target's KV cache keeps the rejected drafts' keys and values after each step."""
    return LoopEngine(
        engine_target(), _draft(sampling), "iid_chain", "token", CHAIN3, sampling, rollback=False
    )


def kv_rollback(sampling: Sampling) -> LoopEngine:
    """The same hand-written loop with the rollback: lossless (and equal to reference/decode.py)."""
    return LoopEngine(
        engine_target(), _draft(sampling), "iid_chain", "token", CHAIN3, sampling, rollback=True
    )


def temperature_target_only(sampling: Sampling) -> ReferenceEngine:
    """Drafts sampled from the draft model at the user's temperature, but the draft law handed to
    the verifier is at temperature 1: the temperature reaches the target's logits only. Exact at
    T = 1, lossy at any other temperature."""
    target = engine_target()
    hot = draft_model(target, temperature=sampling.temperature or 1.0)
    raw = draft_model(target, temperature=1.0)
    proc = _as_process(PROCESSES["iid_chain"], "iid chain, q at T = 1", report=as_drafter(raw))
    return ReferenceEngine(target, hot, proc, "token", CHAIN3, sampling)


def consistent_temperature(sampling: Sampling) -> ReferenceEngine:
    """Drafts and the law given to the verifier both at the user's temperature: lossless."""
    target = engine_target()
    return ReferenceEngine(
        target, draft_model(target, temperature=sampling.temperature), "iid_chain", "token", CHAIN3, sampling
    )


class _ContractMutant:
    """The reference token engine with one contract fault (``fault``)."""

    def __init__(self, sampling: Sampling, fault: str) -> None:
        self.inner = ReferenceEngine(
            engine_target(), _draft(sampling), "iid_chain", "token", CHAIN3, sampling
        )
        self.vocab = self.inner.vocab
        self.fault = fault
        self._calls = 0

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        self._calls += 1
        if self.fault == "fixed_seed":
            seed = 1234
        elif self.fault == "global_state":
            seed = seed + self._calls  # a counter that outlives the call: not a function of the seed
        out = self.inner.generate(prompt_ids, max_new_tokens, seed)
        if self.fault == "short_output":
            return out[:-1]
        if self.fault == "out_of_range":
            return [x if x != out[0] else x + self.vocab for x in out]
        return out

    def target_law(self, context: Sequence[int]) -> Sequence[float]:
        return self.inner.target_law(context)


class SpeculationOff(DirectEngine):
    """Speculation silently switched off: every token sampled from the target's law, as plain
    decoding does, while the engine still reports its counters (nothing drafted). Its law is
    right; the audit must still never call it a pass for a speculative engine."""

    def __init__(self, sampling: Sampling) -> None:
        super().__init__(TransformerLM(engine_target(), sampling.temperature))
        self.last_counters = {"drafted": 0, "accepted": 0}


#: The mutant and alternative engines: name -> the planted fault (its builder, the verdict the
#: audit must give it, what it does).
MUTANT_DOCS: dict[str, Planted] = planted(
    Planted(
        "mutant.greedy_draft_soft_law",
        LOSSY,
        "drafts made greedily (argmax chain) but verified against the draft's soft law q",
        greedy_draft_soft_law,
    ),
    Planted(
        "mutant.late_features",
        LOSSY,
        "MTP drafter fed the target's hidden states one position late; the verifier gets q from the right"
        " ones",
        late_features,
    ),
    Planted(
        "mutant.no_kv_rollback",
        LOSSY,
        "the target's KV cache is not rolled back after a rejection (rejected drafts stay in the cache)",
        no_kv_rollback,
    ),
    Planted(
        "mutant.temperature_target_only",
        LOSSY,
        "temperature applied to the target only: drafts sampled at T, the verifier told q at T = 1",
        temperature_target_only,
    ),
    Planted(
        "mutant.fixed_seed",
        VIOLATION,
        "ignores the seed: every call decodes with one private seed",
        functools.partial(_ContractMutant, fault="fixed_seed"),
    ),
    Planted(
        "mutant.global_state",
        VIOLATION,
        "a call counter mixed into the seed: equal seeds give different tokens",
        functools.partial(_ContractMutant, fault="global_state"),
    ),
    Planted(
        "mutant.short_output",
        VIOLATION,
        "returns one token fewer than asked",
        functools.partial(_ContractMutant, fault="short_output"),
    ),
    Planted(
        "mutant.out_of_range",
        VIOLATION,
        "returns an id outside the vocabulary",
        functools.partial(_ContractMutant, fault="out_of_range"),
    ),
    Planted(
        "mutant.speculation_off",
        Verdict.NO_SPECULATION,
        "speculation silently off: plain sampling (a right law), its counters say nothing was drafted",
        SpeculationOff,
    ),
    Planted(
        "alternative.late_features_consistent",
        PASS,
        "stale features for drafting and for the verifier's q alike: a worse draft, still lossless",
        late_features_consistent,
    ),
    Planted(
        "alternative.kv_rollback",
        PASS,
        "the hand-written loop of mutant.no_kv_rollback with the rollback: equal to reference/decode.py",
        kv_rollback,
    ),
    Planted(
        "alternative.consistent_temperature",
        PASS,
        "drafts and the verifier's q both at the user's temperature",
        consistent_temperature,
    ),
)
