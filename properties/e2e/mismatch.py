"""What a deployment of draft weights can get wrong, and what each mistake looks like.

The checklist of a self-drafting deployment: the target's revision, where the draft weights come
from (which target they were trained for), the feature-layer convention they read, the
vocabulary, the dtype. None of these can make an exact rule lossy: the rule verifies with the
target's own laws whatever the drafts are. What they do is collapse acceptance, or crash. So:

* **Structural mismatches are errors before decoding** (:func:`check_deployment`): a draft
  network built for another vocabulary or another hidden size, a draft model over another
  vocabulary, weights of another dtype, raise :class:`DeploymentMismatchError` naming both
  sides, instead of a shape error deep inside a matrix product or, worse, a silent result.
* **Silent mismatches are acceptance findings** (:func:`acceptance_finding`): a network trained
  for another target of the same shape, or reading the wrong feature layer, runs and stays
  lossless; it is caught as an acceptance rate far below the one measured with its own target,
  and the finding states both numbers. The function takes the two measurements
  (:class:`Acceptance`), however they were obtained, so the engine audit can call it.
* **A moved baseline is not a lossy rule** (:func:`baseline_audit`): Medusa-2 fine-tunes the
  backbone, so the verifying model is a new target. Audited against the *original* target its
  decoding differs; the finding says the baseline moved (lossless with respect to the model
  that verified, and how far that model is from the original), not that the rule is wrong
  (proofs_notes/medusa2.md).

Checked by tests/test_mismatch.py and tests/test_medusa2.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from scipy import stats

from specproof.properties.oracle.exact import ModelInstance, complete, emitted_law, reference_law
from specproof.reference.decode import decode
from specproof.reference.errors import SpecproofInputError
from specproof.reference.laws import tv_distance
from specproof.reference.models import LM
from specproof.reference.processes import Process
from specproof.reference.proposers import Proposer
from specproof.reference.proposers.distill import corpus, one_thread
from specproof.reference.proposers.selfdraft import BoundDraft, Drafter, DraftNet, as_drafter
from specproof.reference.rules import RULES
from specproof.reference.transformer import KVCache, TinyTransformer
from specproof.reference.tree import DraftTree

Seq = tuple[int, ...]
#: Kinds of mismatched deployment ``specproof e2e --mismatch`` can stage.
KINDS = ("revision", "layer", "vocab", "width")
#: The seed of "another target of the same shape" (the e2e targets use seeds 11 and 3).
REVISION_SEED = 2027


class DeploymentMismatchError(SpecproofInputError):
    """Draft weights that cannot serve this target: another vocabulary, hidden size or dtype."""


# --- structural checks, before any decoding -----------------------------------------------


def check_deployment(target: TinyTransformer, draft: DraftNet | LM) -> list[str]:
    """Raise :class:`DeploymentMismatchError` if ``draft`` (a draft network, or a draft model
    with a ``vocab``) cannot serve ``target``; return notes on what cannot be told apart from a
    correct deployment without measuring acceptance (a different layer count)."""
    if isinstance(draft, DraftNet):
        cfg, tcfg = draft.target_config, target.config
        if cfg.vocab != tcfg.vocab:
            raise DeploymentMismatchError(
                "draft",
                f"vocabulary mismatch: the {type(draft).__name__} weights were built for a "
                f"{cfg.vocab}-token vocabulary, the target has {tcfg.vocab} tokens; a draft must "
                "use the target's tokenizer",
            )
        if cfg.width != tcfg.width:
            raise DeploymentMismatchError(
                "draft",
                f"hidden-size mismatch: the {type(draft).__name__} weights read {cfg.width}-wide "
                f"features, the target's hidden states are {tcfg.width} wide; these weights "
                "were trained for another target",
            )
        dtypes = {p.dtype for p in draft.parameters()}
        if dtypes != {target.embed.dtype}:
            got = ", ".join(sorted(str(d).replace("torch.", "") for d in dtypes))
            raise DeploymentMismatchError(
                "draft",
                f"dtype mismatch: the {type(draft).__name__} weights are {got}, the target computes "
                f"in {str(target.embed.dtype).replace('torch.', '')}; cast the draft weights",
            )
        if cfg.layers != tcfg.layers:
            return [
                f"the draft weights were built for a {cfg.layers}-layer target, this one has "
                f"{tcfg.layers}: the feature layers they read may not be the ones they were "
                "trained on (only acceptance can tell)"
            ]
        return []
    vocab = getattr(draft, "vocab", None)
    if vocab != target.vocab:
        raise DeploymentMismatchError(
            "draft",
            f"vocabulary mismatch: the draft model's vocabulary has {vocab} tokens, the target's "
            f"{target.vocab}; a draft must use the target's tokenizer",
        )
    return []


def draft_of(drafter: Drafter, prompt: Seq) -> DraftNet | LM:
    """What a drafter drafts with: its network (self-drafting proposers) or its draft model."""
    lm = drafter(prompt)
    return lm.net if isinstance(lm, BoundDraft) else lm


class _WrongLayers(BoundDraft):
    """A network bound to a target but reading its hidden states under another layer convention:
    ``layer(i, L)`` gives the hidden state read where the network was trained on state ``i``
    (0: the embeddings, L: the top layer)."""

    def __init__(
        self,
        net: DraftNet,
        target: TinyTransformer,
        prefix: Seq,
        layer: Callable[[int, int], int],
    ) -> None:
        super().__init__(net, target, prefix, 1.0)
        base: list[torch.Tensor] = self.__dict__["hidden"]  # set by BoundDraft.__init__
        L = len(base) - 1
        self.hidden = [base[layer(i, L)] for i in range(L + 1)]


#: Layer conventions: hidden states counted from the output instead of from the input (the
#: top layer read where the embeddings are expected and back), and one layer too low.
CONVENTIONS: dict[str, Callable[[int, int], int]] = {
    "reversed": lambda i, L: L - i,
    "one below": lambda i, L: max(0, i - 1),
}


def wrong_feature_layer(net: DraftNet, target: TinyTransformer, convention: str = "reversed") -> Drafter:
    """``net`` deployed on ``target`` reading its features under a wrong layer convention
    (:data:`CONVENTIONS`)."""
    if convention not in CONVENTIONS:
        raise SpecproofInputError("convention", f"{convention!r} is not one of {', '.join(CONVENTIONS)}")
    layer = CONVENTIONS[convention]
    cache: dict[Seq, LM] = {}

    def at(prefix: Seq) -> LM:
        if prefix not in cache:
            cache[prefix] = _WrongLayers(net, target, prefix, layer)
        return cache[prefix]

    return at


# --- a staged deployment, for ``specproof e2e --mismatch`` --------------------------------


@dataclass
class Deployment:
    """What verifies and what drafts, on the small (exact) and the large (sampled) target."""

    small: TinyTransformer
    small_drafter: Drafter
    big: TinyTransformer
    big_drafter: Drafter
    kind: str | None = None
    doc: str = "as built: the proposer's own draft weights with its own verifying target"


def _another(target: TinyTransformer, **change: int) -> TinyTransformer:
    return TinyTransformer(replace(target.config, **change), seed=REVISION_SEED)


def deployment(
    proposer: Proposer, small: TinyTransformer, big: TinyTransformer, kind: str | None
) -> Deployment:
    """The proposer as built (``kind`` None), or deployed with one mismatch of :data:`KINDS`:

    * ``revision``: the draft weights trained for the target, deployed on another target of the
      same shape (another seed: a retrained model, same vocabulary and sizes);
    * ``layer``: the draft network reading the hidden states in reverse layer order;
    * ``vocab``, ``width``: draft weights built for a target with twice the vocabulary or twice
      the hidden size; :func:`check_deployment` refuses them (raises before decoding).
    """
    sv, bv = proposer.verifying_target(small), proposer.verifying_target(big)
    own = Deployment(sv, proposer.make_drafter(small), bv, proposer.make_drafter(big))
    if kind is None:
        for t, d in ((own.small, own.small_drafter), (own.big, own.big_drafter)):
            check_deployment(t, draft_of(d, (0, 0)))
        return own
    if kind not in KINDS:
        raise SpecproofInputError("mismatch", f"{kind!r} is not one of {', '.join(KINDS)}")
    nets = [draft_of(own.small_drafter, (0, 0)), draft_of(own.big_drafter, (0, 0))]
    if kind != "vocab" and not all(isinstance(n, DraftNet) for n in nets):
        raise SpecproofInputError(
            "mismatch",
            f"{proposer.name} drafts without a network reading the target's features: "
            f"no {kind} mismatch to stage",
        )
    if kind in ("vocab", "width"):
        for t, tv in ((small, sv), (big, bv)):
            field = "vocab" if kind == "vocab" else "width"
            other = _another(t, **{field: 2 * getattr(t.config, field)})
            check_deployment(tv, draft_of(proposer.make_drafter(other, False), (0, 0)))
        raise AssertionError("check_deployment accepted mismatched weights")  # pragma: no cover
    small_net, big_net = nets
    assert isinstance(small_net, DraftNet) and isinstance(big_net, DraftNet)
    if kind == "revision":
        rs, rb = _another(small), _another(big)
        for t, n in ((rs, small_net), (rb, big_net)):
            check_deployment(t, n)
        return Deployment(
            rs,
            small_net.drafter(rs),
            rb,
            big_net.drafter(rb),
            kind,
            f"{proposer.name}'s draft weights, trained for the target, deployed on another target of "
            f"the same shape (seed {REVISION_SEED})",
        )
    return Deployment(
        own.small,
        wrong_feature_layer(small_net, own.small),
        own.big,
        wrong_feature_layer(big_net, own.big),
        kind,
        f"{proposer.name}'s draft network reading the target's layers in reverse order (counted from "
        "the output: the top layer where it was trained on the embeddings, and back)",
    )


# --- acceptance: measured, compared -------------------------------------------------------


@dataclass(frozen=True)
class Acceptance:
    """Accepted drafts per step: a sample (one mean per independent run) or an exact value."""

    label: str
    mean: float
    run_means: tuple[float, ...] = ()
    steps: int = 0

    @property
    def exact(self) -> bool:
        return not self.run_means

    @classmethod
    def from_runs(cls, label: str, runs: Sequence[Sequence[int]]) -> Acceptance:
        """``runs[r][t]``: the drafts accepted at step t of independent run r (at least 2 runs)."""
        if len(runs) < 2 or any(len(r) == 0 for r in runs):
            raise SpecproofInputError("runs", "need at least 2 independent runs of at least one step each")
        means = tuple(float(np.mean(r)) for r in runs)
        steps = sum(len(r) for r in runs)
        return cls(label, float(sum(sum(r) for r in runs) / steps), means, steps)

    def describe(self) -> str:
        if self.exact:
            return f"{self.mean:.3f} accepted drafts per step ({self.label}, exact)"
        se = float(np.std(self.run_means, ddof=1) / math.sqrt(len(self.run_means)))
        return (
            f"{self.mean:.3f} +- {se:.3f} accepted drafts per step ({self.label}; "
            f"{self.steps} steps in {len(self.run_means)} runs)"
        )


@dataclass(frozen=True)
class AcceptanceFinding:
    own: Acceptance
    deployed: Acceptance
    ratio: float
    alpha: float
    pvalue: float | None  # one-sided, H0: deployed >= ratio * own (None for exact values)
    collapsed: bool

    def message(self) -> str:
        both = f"deployed: {self.deployed.describe()}; with its own target: {self.own.describe()}"
        if not self.collapsed:
            return f"acceptance as expected ({both})"
        how = "" if self.pvalue is None else f", one-sided p = {self.pvalue:.2g} < alpha {self.alpha:g}"
        rel = self.deployed.mean / self.own.mean if self.own.mean > 0 else 0.0
        return (
            f"ACCEPTANCE COLLAPSED: {rel:.0%} of the rate measured with the draft's own target "
            f"(below {self.ratio:.0%}{how}); {both}. The output is still the verifying target's "
            "law (exact rules stay lossless): check the draft weights' origin, the target "
            "revision and the feature-layer convention"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "own": self.own.mean,
            "deployed": self.deployed.mean,
            "own_label": self.own.label,
            "deployed_label": self.deployed.label,
            "ratio": self.ratio,
            "alpha": self.alpha,
            "pvalue": self.pvalue,
            "collapsed": self.collapsed,
            "message": self.message(),
        }


def acceptance_finding(
    own: Acceptance, deployed: Acceptance, ratio: float = 0.7, alpha: float = 1e-3
) -> AcceptanceFinding:
    """Is ``deployed`` far below ``own`` (the same draft weights with the target they were
    trained for)? Collapsed iff the deployed rate is below ``ratio`` times the own rate and, for
    sampled measurements, a one-sided Welch t-test on the run means rejects "deployed >= ratio x
    own" at ``alpha``. Exact values are compared directly."""
    if not 0 < ratio <= 1:
        raise SpecproofInputError("ratio", f"must be in (0, 1], got {ratio}")
    if own.exact != deployed.exact:
        raise SpecproofInputError("deployed", "compare two exact values or two sampled measurements")
    below = deployed.mean < ratio * own.mean
    if own.exact:
        return AcceptanceFinding(own, deployed, ratio, alpha, None, below)
    a = np.array(own.run_means) * ratio
    b = np.array(deployed.run_means)
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        p = 0.0 if a[0] > b[0] else 1.0
    else:
        p = float(stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)
    return AcceptanceFinding(own, deployed, ratio, alpha, p, bool(below and p < alpha))


def measure_acceptance(
    label: str,
    target: TinyTransformer,
    drafter: Drafter,
    process: Process,
    rule: str,
    shape: tuple[int, ...],
    prompts: Sequence[Seq],
    steps: int,
    seed: int,
) -> Acceptance:
    """Decode ``steps`` steps from each prompt (run r seeded ``[seed, r]``) and count the drafts
    accepted at every step."""
    runs = []
    with one_thread():
        for r, prompt in enumerate(prompts):
            rng = np.random.default_rng([seed, r])
            out = decode(target, drafter, process, rule, shape, prompt, steps, rng)
            runs.append([e - 1 for e in out.emitted_per_step])
    return Acceptance.from_runs(label, runs)


def prompts_from(target: TinyTransformer, runs: int, length: int, seed: int) -> list[Seq]:
    """``runs`` prompts of ``length`` tokens sampled from ``target`` (its own text)."""
    return [tuple(int(x) for x in s) for s in corpus(target, runs, length, seed)]


@dataclass(frozen=True)
class DraftLawFinding:
    """The deployed drafter's laws against the same weights bound as trained, on the same contexts."""

    contexts: int
    max_diff: float  # the largest |q_deployed - q_expected| over contexts and tokens
    where: Seq  # the context where it is largest
    tol: float

    @property
    def agree(self) -> bool:
        return self.max_diff <= self.tol

    def message(self) -> str:
        if self.agree:
            return (
                f"the deployed draft laws equal those of the weights read as trained on {self.contexts} "
                f"contexts (largest difference {self.max_diff:.2g} <= {self.tol:g})"
            )
        return (
            f"DRAFT LAWS DIFFER from those of the same weights read as trained: largest difference "
            f"{self.max_diff:.3g} (context {self.where}, {self.contexts} contexts): the deployment does "
            "not feed the draft network the features it was trained on (layer convention, target "
            "revision); exactness is unaffected, acceptance may be"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "contexts": self.contexts,
            "max_diff": self.max_diff,
            "where": list(self.where),
            "agree": self.agree,
            "message": self.message(),
        }


def compare_draft_laws(
    expected: Drafter, deployed: Drafter, contexts: Sequence[Seq], tol: float = 1e-9
) -> DraftLawFinding:
    """Each context's next-draft law from ``deployed`` against ``expected`` (the same weights
    bound to the target they were trained on, with their trained layer convention): an engine
    that exposes its draft probabilities is checked the same way."""
    if not contexts:
        raise SpecproofInputError("contexts", "need at least one context")
    worst, where = -1.0, tuple(contexts[0])
    for c in contexts:
        a, b = np.asarray(expected(c).law(c)), np.asarray(deployed(c).law(c))
        if a.shape != b.shape:
            raise DeploymentMismatchError("deployed", f"draft laws over {b.size} tokens, expected {a.size}")
        d = float(np.abs(a - b).max())
        if d > worst:
            worst, where = d, tuple(c)
    return DraftLawFinding(len(contexts), worst, where, tol)


# --- a moved baseline (Medusa-2) ----------------------------------------------------------


@dataclass(frozen=True)
class BaselineFinding:
    """One decoding's exact law against two baselines: the model that verified it and a
    reference (the original target)."""

    horizon: int
    tv_to_verifier: float
    tv_to_reference: float
    tv_models: float  # the verifying model's own law vs the reference's, same prefix and horizon
    mean_emitted: float
    greedy: bool = False  # the laws compared are greedy decoding's (point masses)
    tol: float = 1e-12

    @property
    def lossless_for_verifier(self) -> bool:
        return self.tv_to_verifier < self.tol

    @property
    def lossless_for_reference(self) -> bool:
        return self.tv_to_reference < self.tol

    @property
    def baseline_moved(self) -> bool:
        return self.tv_models >= self.tol

    def message(self, against: str = "original") -> str:
        """What the audit says against ``"original"`` (the reference), or, for ``"verifier"``,
        what the reference would say (the report of a run against the verifying model)."""
        m = self.horizon
        if not self.lossless_for_verifier:
            return (
                f"LOSSY with respect to the model that verified (TV {self.tv_to_verifier:.3g} on "
                f"{m} tokens): the rule or the decoding loop is at fault"
                + (f"; the baseline moved as well (TV {self.tv_models:.3g})" if self.baseline_moved else "")
            )
        if self.lossless_for_reference:
            return "lossless with respect to the verifying model and to the original target"
        if against == "verifier":
            return (
                f"lossless with respect to the model that verifies (the fine-tuned target, TV "
                f"{self.tv_to_verifier:.2g}); the original target is a moved baseline: against it the "
                f"same decoding differs by TV {self.tv_to_reference:.3g} on {m} tokens, which is the "
                "fine-tuning's doing, not the rule's (--against original audits against it)"
            )
        return (
            f"flagged against the original target (TV {self.tv_to_reference:.3g} on {m} tokens), "
            f"but lossless with respect to the model that verified (TV {self.tv_to_verifier:.2g}): "
            f"THE BASELINE MOVED, the rule is not at fault. The verifying model is not the original "
            f"(their {m}-token laws differ by TV {self.tv_models:.3g}); exactness holds for the "
            "fine-tuned model, whose quality must be compared with the original's separately"
        )

    def to_json(self, against: str = "original") -> dict[str, Any]:
        return {
            "horizon": self.horizon,
            "tv_to_verifier": self.tv_to_verifier,
            "tv_to_reference": self.tv_to_reference,
            "tv_models": self.tv_models,
            "baseline_moved": self.baseline_moved,
            "greedy": self.greedy,
            "message": self.message(against),
        }


def baseline_audit(
    rule: str,
    process: Process,
    verifier: LM,
    reference: LM,
    draft: LM | Callable[[Seq], LM],
    shape: tuple[int, ...],
    prefix: Seq,
    steps: int = 2,
) -> BaselineFinding:
    """The exact law of ``steps`` speculative steps verified by ``verifier``, completed to the
    horizon ``steps * (depth + 1)`` with each baseline's own samples, against each baseline's
    law: :func:`~.exact.multi_step_check` done against the verifier and against ``reference``."""
    drafter = as_drafter(draft)
    r = RULES[rule]
    greedy = r.preserves == "greedy"
    states: dict[Seq, Any] = {(): 1}
    with one_thread():
        for _ in range(steps):
            nxt: dict[Seq, Any] = {}
            for emitted, w in states.items():
                inst = ModelInstance(verifier, drafter(prefix + emitted), shape, prefix + emitted)
                for e, pr in emitted_law(r, process, inst).items():
                    nxt[emitted + e] = nxt.get(emitted + e, 0) + w * pr
            states = nxt
        m = steps * (DraftTree(shape, "shape").max_depth + 1)
        own, ref = reference_law(verifier, prefix, m, greedy), reference_law(reference, prefix, m, greedy)
        tvs = [
            float(tv_distance(complete(states, base, prefix, m, greedy), law))
            for base, law in ((verifier, own), (reference, ref))
        ]
        models = float(tv_distance(own, ref))
    mean = float(sum(w * len(e) for e, w in states.items()) / steps)
    return BaselineFinding(m, tvs[0], tvs[1], models, mean, greedy)


@dataclass(frozen=True)
class LawDistance:
    """``KL(original || revised)`` of the next-token law per position, along the original's text."""

    kl_per_position: float
    stderr: float
    max_position: float  # the largest mean over one position index
    sequences: int
    length: int
    seed: int

    def describe(self) -> str:
        return (
            f"KL(original || fine-tuned) = {self.kl_per_position:.4f} +- {self.stderr:.4f} nats per "
            f"position (largest at one position {self.max_position:.4f}) over {self.sequences} "
            f"sequences of {self.length} tokens sampled from the original (seed {self.seed})"
        )


@torch.no_grad()
def kl_per_position(
    original: TinyTransformer, revised: TinyTransformer, sequences: int = 64, length: int = 16, seed: int = 0
) -> LawDistance:
    """Mean ``KL(p_original || p_revised)`` of the next-token law at every position of
    ``sequences`` sequences the original samples (first token uniform): the per-token KL rate of
    the two models' sequence laws along the original's own text, with its standard error over
    sequences."""
    per_seq, per_pos = [], []
    with one_thread():
        for s in corpus(original, sequences, length, seed):
            lp = torch.log_softmax(original.forward(s, KVCache())[0], -1)
            lq = torch.log_softmax(revised.forward(s, KVCache())[0], -1)
            kl = (lp.exp() * (lp - lq)).sum(-1)
            per_seq.append(float(kl.mean()))
            per_pos.append(kl)
    pos = torch.stack(per_pos).mean(0)
    return LawDistance(
        float(np.mean(per_seq)),
        float(np.std(per_seq, ddof=1) / math.sqrt(len(per_seq))),
        float(pos.max()),
        sequences,
        length,
        seed,
    )
