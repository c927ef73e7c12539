"""Engines: whole speculative generate loops, the black boxes of the engine audit.

A verifier that is exact in isolation still makes a lossy engine when the loop around it drafts
one way and tells the verifier another, feeds a drafter stale features, keeps a rejected
branch's KV, or applies temperature to one side only. The engine audit
(:mod:`.engine.audit`) therefore tests what a user actually runs, through two calls:

* ``generate(prompt_ids, max_new_tokens, seed) -> list[int]``: the new tokens (exactly
  ``max_new_tokens`` of them, ids in ``[0, V)``), a deterministic function of the seed;
* ``target_law(context) -> probs``: the engine's *target* as a next-token law, computed by the
  same weights without speculation, with the sampling settings the engine was built with
  (temperature, top-k, top-p; temperature 0 is greedy decoding, a one-hot law at the argmax).

An :class:`EngineSpec` says how to build an engine for each :class:`Sampling` setting, which
prompts and settings to audit it under, and what verdict its authors claim. :data:`ENGINES` holds
the registered ones (``specproof backends`` lists them, :func:`list_engines`):

* ``reference.<proposer>.<rule>``: :func:`specproof.reference.decode.decode` itself, for every
  proposer and every rule declared exact for its process (expected: pass);
* ``mutant.*``: loops with one bug each, built from the same reference pieces, and engines that
  break the contract (expected: lossy or contract_violation) -- :data:`MUTANT_DOCS`;
* ``alternative.*``: loops that look wrong but are lossless (expected: pass);
* ``hf.*``, ``vllm.*``, ``sglang.*``: third-party engines (:mod:`.backends.thirdparty.hf_engine`,
  ``vllm_engine``, ``sglang_engine``), available where their package is installed;
* ``optimized.*``: the optimized decoding loop, when :mod:`specproof.optimized.decode` exists.

The reference engines run on :func:`engine_target`, an 8-token transformer whose next-token
laws are spread (entropy 1.4 to 1.6 nats) and whose draft model agrees with it on about 60% of
the mass, so drafts are both accepted and rejected. Their drafters are untrained: the quality of a
draft never decides a verdict, only the speed (proofs_notes/engine_audit.md).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from specproof.properties._imports import import_where
from specproof.reference.choices import Sampler
from specproof.reference.decode import decode
from specproof.reference.errors import BadParameterError, SpecproofInputError, UsageError
from specproof.reference.models import LM
from specproof.reference.processes import PROCESSES, Process, Proposal
from specproof.reference.proposers import PROPOSERS, Proposer
from specproof.reference.proposers.draft_model import draft_model
from specproof.reference.proposers.mtp import MTPModules
from specproof.reference.proposers.selfdraft import BoundDraft, Drafter, DraftNet, as_drafter, target_features
from specproof.reference.rules import RULES
from specproof.reference.step import make_step
from specproof.reference.transformer import Config, KVCache, TinyTransformer, TransformerLM
from specproof.reference.tree import DraftTree

Seq = tuple[int, ...]


# --------------------------------------------------------------------------- sampling settings


@dataclass(frozen=True)
class Sampling:
    """What the engine is asked to sample from: ``softmax(logits / temperature)``, then top-k
    (keep the k largest, ties at the k-th value kept), then top-p (keep the most likely tokens
    until their mass reaches p: a token is kept when the mass ranked strictly above it is below
    p), renormalized. ``temperature == 0`` is greedy decoding (one-hot at the argmax, ties to
    the smallest id). This is HF transformers' order and semantics of its warpers."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0):
            raise BadParameterError("temperature", f"must be a number >= 0, got {self.temperature!r}")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise BadParameterError("top_k", f"must be an integer >= 1, got {self.top_k!r}")
        if self.top_p is not None and not (0 < self.top_p <= 1):
            raise BadParameterError("top_p", f"must lie in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def label(self) -> str:
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top_k={self.top_k}")
        if self.top_p is not None:
            parts.append(f"top_p={self.top_p:g}")
        return ",".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}

    def law(self, logits: Sequence[float], margin: float = 1e-5) -> list[float]:
        """The sampled law of one row of logits, in float64. A top-p cut that falls within
        ``margin`` of a cumulative mass is ambiguous in float32 (an engine may keep one token
        more or fewer): that raises ``BadParameterError`` rather than give a law the engine
        cannot be held to."""
        z = np.asarray([float(v) for v in logits], dtype=np.float64)
        if z.ndim != 1 or not np.isfinite(z).any() or np.isnan(z).any() or np.isposinf(z).any():
            raise SpecproofInputError("logits", "expected a row of finite numbers (or -inf), not all -inf")
        if self.greedy:
            out = [0.0] * len(z)
            out[int(np.argmax(z))] = 1.0
            return out
        z = z / self.temperature
        if self.top_k is not None and self.top_k < len(z):
            kth = np.sort(z)[::-1][self.top_k - 1]
            z = np.where(z < kth, -np.inf, z)
        p = np.exp(z - z.max())
        p /= p.sum()
        if self.top_p is not None and self.top_p < 1:
            order = np.argsort(-p, kind="stable")
            above = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])
            keep = above < self.top_p
            near = np.abs(above[1:] - self.top_p) < margin
            if near.any():
                raise BadParameterError(
                    "top_p",
                    f"{self.top_p:g} falls within {margin:g} of a cumulative mass of this law "
                    f"({', '.join(f'{a:.6f}' for a in above[1:][near])}): ambiguous in float32",
                )
            mask = np.zeros(len(p), dtype=bool)
            mask[order[keep]] = True
            p = np.where(mask, p, 0.0)
            p /= p.sum()
        return [float(v) for v in p]


T1, T07 = Sampling(1.0), Sampling(0.7)
GREEDY = Sampling(0.0)


# --------------------------------------------------------------------------- the contract


@runtime_checkable
class Engine(Protocol):
    """What the engine audit calls (module docstring)."""

    vocab: int

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]: ...

    def target_law(self, context: Sequence[int]) -> Sequence[float]: ...


def _always() -> tuple[bool, str]:
    return True, ""


@dataclass(frozen=True)
class EngineSpec:
    """A registered engine: how to build it per sampling setting, and how to audit it."""

    name: str
    group: str  # reference, mutant, alternative, hf, vllm, sglang, optimized, user
    doc: str
    build: Callable[[Sampling], Engine]
    vocab: int
    prompts: tuple[Seq, ...]
    samplings: tuple[Sampling, ...] = (T1, T07)
    expect: str = "pass"  # the verdict its authors claim: pass, lossy, contract_violation
    tokens: int = 4  # the default horizon M
    available: Callable[[], tuple[bool, str]] = _always
    notes: str = ""  # what the audit table should say about it (options, cost, caveats)

    def to_json(self) -> dict[str, Any]:
        ok, why = self.available()
        return {
            "name": self.name,
            "group": self.group,
            "doc": self.doc,
            "expect": self.expect,
            "vocab": self.vocab,
            "prompts": [list(p) for p in self.prompts],
            "samplings": [s.label for s in self.samplings],
            "tokens": self.tokens,
            "available": ok,
            "reason": why,
        }


ENGINES: dict[str, EngineSpec] = {}


def register(spec: EngineSpec) -> EngineSpec:
    if spec.name in ENGINES:
        raise UsageError(f"engine {spec.name!r} registered twice")
    ENGINES[spec.name] = spec
    return spec


def list_engines() -> list[dict[str, Any]]:
    """Every registered engine with its group, claim and availability (``specproof backends``)."""
    _ensure_registered()
    return [s.to_json() for s in ENGINES.values()]


# --------------------------------------------------------------------------- the reference loop


@functools.cache
def engine_target() -> TinyTransformer:
    """The reference engines' target: 8 tokens, width 16, 2 layers (module docstring)."""
    return TinyTransformer(Config(vocab=8, width=16, layers=2, heads=2, mlp=32), seed=0)


#: Two prompts: a plain one, and a repeated pattern on which n-gram lookup finds matches.
REFERENCE_PROMPTS: tuple[Seq, ...] = ((0, 6), (5, 2, 5, 2))


class ReferenceEngine:
    """:func:`specproof.reference.decode.decode` as an engine: ``proposer`` drafts by
    ``process`` on ``shape``, ``rule`` verifies, the target's KV cache keeps the accepted path.
    ``generate`` runs steps until ``max_new_tokens`` tokens are emitted and returns the first
    ``max_new_tokens`` (the last step may emit more; the first M tokens of a lossless stream are
    the target's M-token law). ``last_steps`` holds the tokens emitted per target forward of the
    last call."""

    def __init__(
        self,
        target: TinyTransformer,
        drafter: LM | Drafter,
        process: str | Process,
        rule: str,
        shape: Seq,
        sampling: Sampling,
    ) -> None:
        if sampling.top_k is not None or sampling.top_p is not None:
            raise BadParameterError("sampling", "the reference loop samples with a temperature only")
        self.target, self.drafter, self.process = target, drafter, process
        self.rule, self.shape, self.sampling = rule, shape, sampling
        self.vocab = target.vocab
        self._law = TransformerLM(target, sampling.temperature)
        self.last_steps: list[int] = []

    def run(self, prompt: Seq, max_new_tokens: int, rng: np.random.Generator) -> list[int]:
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
        )
        self.last_steps = list(out.emitted_per_step)
        return out.tokens[len(prompt) :][:max_new_tokens]

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        return self.run(tuple(prompt_ids), max_new_tokens, np.random.default_rng(seed))

    def target_law(self, context: Sequence[int]) -> Sequence[float]:
        return self._law.law(tuple(int(x) for x in context))


class DirectEngine:
    """No speculation: each new token drawn from the target's own law by inverse CDF on a
    uniform of ``numpy.random.default_rng(seed)``. Exact by construction: the baseline the engine
    audit's false-alarm rate is measured on."""

    def __init__(self, lm: LM) -> None:
        self.vocab = lm.vocab
        self._law = lm

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        rng = np.random.default_rng(seed)
        ctx = tuple(prompt_ids)
        out: list[int] = []
        for _ in range(max_new_tokens):
            cdf = np.cumsum([float(v) for v in self._law.law(ctx + tuple(out))])
            out.append(int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), self.vocab - 1)))
        return out

    def target_law(self, context: Sequence[int]) -> Sequence[float]:
        return [float(v) for v in self._law.law(tuple(int(x) for x in context))]


def direct_engine(sampling: Sampling) -> DirectEngine:
    if sampling.top_k is not None or sampling.top_p is not None:
        raise BadParameterError("sampling", "the direct sampler samples with a temperature only")
    return DirectEngine(TransformerLM(engine_target(), sampling.temperature))


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


def _register_reference() -> None:
    from specproof.properties.e2e.check import applicable_rules

    register(
        EngineSpec(
            "reference.direct",
            "reference",
            "no speculation: every token drawn from the target's law (the calibration baseline)",
            direct_engine,
            engine_target().vocab,
            REFERENCE_PROMPTS,
            (T1, T07),
        )
    )
    for p in PROPOSERS.values():
        for rule in applicable_rules(p):
            greedy = RULES[rule].preserves == "greedy"
            register(
                EngineSpec(
                    f"reference.{p.name}.{rule}",
                    "reference",
                    f"reference/decode.py: {p.name} ({p.process.name}, shape {p.shape}) verified by {rule}",
                    functools.partial(reference_engine, p, rule),
                    engine_target().vocab,
                    REFERENCE_PROMPTS,
                    (GREEDY,) if greedy else (T1, T07),
                )
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
) -> list[int]:
    """The reference loop (reference/decode.py) step for step, except that with ``rollback``
    False the target's KV cache keeps every drafted node after verification instead of only the
    accepted path (the next step then attends to rejected drafts, at shifted positions). With
    ``rollback`` True it draws and emits exactly what :func:`decode` does (tests/test_engine_audit.py
    checks that, token for token)."""
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


#: The mutant and alternative engines: name -> (builder, expected verdict, what it does).
MUTANT_DOCS: dict[str, tuple[Callable[[Sampling], Engine], str, str]] = {
    "mutant.greedy_draft_soft_law": (
        greedy_draft_soft_law,
        "lossy",
        "drafts made greedily (argmax chain) but verified against the draft's soft law q",
    ),
    "mutant.late_features": (
        late_features,
        "lossy",
        "MTP drafter fed the target's hidden states one position late; the verifier gets q from the right"
        " ones",
    ),
    "mutant.no_kv_rollback": (
        no_kv_rollback,
        "lossy",
        "the target's KV cache is not rolled back after a rejection (rejected drafts stay in the cache)",
    ),
    "mutant.temperature_target_only": (
        temperature_target_only,
        "lossy",
        "temperature applied to the target only: drafts sampled at T, the verifier told q at T = 1",
    ),
    "mutant.fixed_seed": (
        functools.partial(_ContractMutant, fault="fixed_seed"),
        "contract_violation",
        "ignores the seed: every call decodes with one private seed",
    ),
    "mutant.global_state": (
        functools.partial(_ContractMutant, fault="global_state"),
        "contract_violation",
        "a call counter mixed into the seed: equal seeds give different tokens",
    ),
    "mutant.short_output": (
        functools.partial(_ContractMutant, fault="short_output"),
        "contract_violation",
        "returns one token fewer than asked",
    ),
    "mutant.out_of_range": (
        functools.partial(_ContractMutant, fault="out_of_range"),
        "contract_violation",
        "returns an id outside the vocabulary",
    ),
    "alternative.late_features_consistent": (
        late_features_consistent,
        "pass",
        "stale features for drafting and for the verifier's q alike: a worse draft, still lossless",
    ),
    "alternative.kv_rollback": (
        kv_rollback,
        "pass",
        "the hand-written loop of mutant.no_kv_rollback with the rollback: equal to reference/decode.py",
    ),
    "alternative.consistent_temperature": (
        consistent_temperature,
        "pass",
        "drafts and the verifier's q both at the user's temperature",
    ),
}


def _register_mutants() -> None:
    for name, (build, expect, doc) in MUTANT_DOCS.items():
        register(
            EngineSpec(
                name,
                name.split(".")[0],
                doc,
                build,
                engine_target().vocab,
                REFERENCE_PROMPTS,
                (T1, T07),
                expect=expect,
            )
        )


# --------------------------------------------------------------------------- other engines


def _optimized_available() -> tuple[bool, str]:
    if importlib.util.find_spec("specproof.optimized.decode") is None:
        return False, "specproof.optimized.decode does not exist"
    module = importlib.import_module("specproof.optimized.decode")
    if not hasattr(module, "OptimizedEngine"):
        return False, "specproof.optimized.decode has no OptimizedEngine"
    return True, ""


def _optimized_rules() -> tuple[str, ...]:
    """The rules with an optimized kernel (``optimized.decode.KERNEL_RULES``); the kernels'
    set as documented there when the module cannot be imported."""
    try:
        module = importlib.import_module("specproof.optimized.decode")
        return tuple(module.KERNEL_RULES)
    except Exception:
        return ("token", "block", "mss", "rrs", "target_only", "greedy", "typical")


def _optimized_engine(proposer: Proposer, rule: str, sampling: Sampling) -> Engine:
    """``optimized.decode.OptimizedEngine`` on :func:`engine_target` with untrained drafters (as
    the reference engines), in float64."""
    if sampling.top_k is not None or sampling.top_p is not None:
        raise BadParameterError("sampling", "the optimized loop samples with a temperature only")
    module = importlib.import_module("specproof.optimized.decode")
    engine: Engine = module.OptimizedEngine(
        proposer.name, rule, engine_target(), temperature=sampling.temperature or 1.0, trained=False
    )
    return engine


def _register_optimized() -> None:
    """The optimized loop (issue 15): every proposer x rule declared exact for its process that
    has an optimized kernel, audited like ``reference.*`` (imported lazily, when audited)."""
    kernels = set(_optimized_rules())  # imports optimized.decode before e2e (_ensure_registered)
    from specproof.properties.e2e.check import applicable_rules

    for p in PROPOSERS.values():
        for rule in applicable_rules(p):
            if rule not in kernels:
                continue
            greedy = RULES[rule].preserves == "greedy"
            register(
                EngineSpec(
                    f"optimized.{p.name}.{rule}",
                    "optimized",
                    f"optimized/decode.py OptimizedEngine: {p.name} ({p.process.name}) verified by {rule}",
                    functools.partial(_optimized_engine, p, rule),
                    engine_target().vocab,
                    REFERENCE_PROMPTS,
                    (GREEDY,) if greedy else (T1, T07),
                    available=_optimized_available,
                )
            )


def _register_thirdparty() -> None:
    for module in ("hf_engine", "vllm_engine", "sglang_engine"):
        name = f"specproof.properties.conformance.backends.thirdparty.{module}"
        if importlib.util.find_spec(name) is None:
            continue
        mod = importlib.import_module(name)
        for spec in mod.engines():
            register(spec)


_REGISTERED = False


def _ensure_registered() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    _REGISTERED = True
    # The optimized package first: its kernels run under Triton's interpreter only when it is
    # imported before the modules that import Triton on their own (see _register_optimized).
    _register_optimized()
    _register_reference()
    _register_mutants()
    _register_thirdparty()


# --------------------------------------------------------------------------- resolving a TARGET


class EngineTargetError(SpecproofInputError):
    """A TARGET of ``specproof audit engine`` that cannot be resolved."""

    def __init__(self, problem: str) -> None:
        super().__init__("TARGET", problem)


def _load(target: str) -> Any:
    where, _, attr = target.rpartition(":")
    module = import_where(where, EngineTargetError, "specproof_engine_")
    if not hasattr(module, attr):
        raise EngineTargetError(f"{where!r} has no attribute {attr!r}")
    return getattr(module, attr)


def _vocab_of(engine: Any, prompt: Seq) -> int:
    v = getattr(engine, "vocab", None)
    if isinstance(v, int) and v > 0:
        return v
    return len(engine.target_law(list(prompt)))


def spec_from_object(name: str, obj: Any, prompts: Sequence[Seq] = ((1, 2),), tokens: int = 4) -> EngineSpec:
    """An :class:`EngineSpec` from a user's object: a spec as is; an engine instance (audited
    under the one setting it was built with); or a factory called as ``factory(temperature=,
    top_k=, top_p=)`` per setting."""
    if isinstance(obj, EngineSpec):
        return obj
    if not prompts:
        raise EngineTargetError("a user engine needs at least one --prompt")
    if hasattr(obj, "generate") and hasattr(obj, "target_law"):
        engine = obj
        return EngineSpec(
            name,
            "user",
            f"{type(obj).__name__} instance",
            lambda s: engine,
            _vocab_of(engine, prompts[0]),
            tuple(prompts),
            (Sampling(getattr(engine, "temperature", 1.0) or 0.0),),
            tokens=tokens,
            notes="an engine instance: audited under the setting it was built with",
        )
    if callable(obj):

        def build(s: Sampling) -> Engine:
            e = obj(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)
            if not (hasattr(e, "generate") and hasattr(e, "target_law")):
                raise EngineTargetError(f"{name}(...) returned {type(e).__name__}, not an engine")
            return e

        first = build(T1)
        return EngineSpec(
            name,
            "user",
            f"{getattr(obj, '__name__', name)}(temperature=, top_k=, top_p=)",
            build,
            _vocab_of(first, prompts[0]),
            tuple(prompts),
            (T1, T07),
            tokens=tokens,
        )
    raise EngineTargetError(f"{name!r} is neither an engine, an engine factory nor an EngineSpec")


def resolve_engine(target: str) -> EngineSpec:
    """A registered name (``specproof backends``), or ``module:attr`` / ``path.py:attr``."""
    _ensure_registered()
    if target in ENGINES:
        return ENGINES[target]
    if ":" not in target:
        close = [n for n in ENGINES if target in n][:5]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise EngineTargetError(
            f"{target!r} is neither a registered engine (specproof backends) nor module:attr{hint}"
        )
    return spec_from_object(target, _load(target))


def with_options(
    spec: EngineSpec,
    prompts: Sequence[Seq] | None = None,
    samplings: Sequence[Sampling] | None = None,
    tokens: int | None = None,
) -> EngineSpec:
    """The spec with the audit's options in place of its defaults."""
    changes: dict[str, Any] = {}
    if prompts:
        changes["prompts"] = tuple(tuple(p) for p in prompts)
    if samplings:
        changes["samplings"] = tuple(samplings)
    if tokens is not None:
        changes["tokens"] = tokens
    return replace(spec, **changes) if changes else spec


__all__ = [
    "ENGINES",
    "Engine",
    "EngineSpec",
    "EngineTargetError",
    "GREEDY",
    "LoopEngine",
    "MUTANT_DOCS",
    "ReferenceEngine",
    "ReportedBy",
    "Sampling",
    "T07",
    "T1",
    "decode_without_rollback",
    "engine_target",
    "list_engines",
    "register",
    "resolve_engine",
    "spec_from_object",
    "with_options",
]
