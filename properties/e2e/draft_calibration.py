"""Draft calibration: does a drafter's path confidence track acceptance?

EAGLE-2 (Li et al. 2024, "EAGLE-2: Faster Inference of Language Models with Dynamic Draft
Trees", sec. 3) grows its tree from draft confidences, on the observation that the product of
draft probabilities along a path approximates the probability that the path is accepted. That is
an empirical premise, not a theorem, and it can fail per domain or for a badly tuned drafter;
when it fails the tree spends its budget on the wrong nodes. Exactness is not at stake (the
rules are exact for any deterministic tree); speed is. This module measures the premise:

* **Records.** Each step of sampled decoding runs gives a :class:`StepDrafts`: the drafted tree
  (parents), each node's *confidence* (the product of the draft probabilities along its root
  path, EAGLE-2's value), and the deepest accepted node; a node is *accepted* iff it is on that
  node's root path (its whole path accepted). On the reference loop (:func:`collect`) the record
  also holds the exact law of the deepest accepted node given the tree, enumerated from the rule.
  Any engine that exposes its drafts can build the records itself (``deepest_law`` None).
* **Bins.** :data:`EDGES`: ten equal-width bins ``[0, 0.1), [0.1, 0.2), .., [0.9, 1.0]`` (1.0
  falls in the last). Per bin: the number of nodes, their mean confidence and the fraction
  accepted (and, from the reference loop, the mean exact acceptance probability).
* **Expected calibration error.** ``ECE = sum_b (n_b / N) |mean confidence_b - acceptance_b|``.
  With exact probabilities in place of the 0/1 outcomes, the same sum is the *exact ECE* of
  those nodes: the drafter's miscalibration without the sampling noise of acceptance (the
  sampled ECE of a perfectly calibrated drafter is not 0: each bin's acceptance is a finite
  sample).
* **Bookkeeping check** (:func:`agreement`): per bin, the accepted count against the sum of the
  exact acceptance probabilities, standardized by the exact per-step variance (a martingale over
  steps, normal in the limit), two-sided, Bonferroni over bins.

For RRS on the one-hot drafts of a deterministic tree the acceptance probability of a node is
exactly the target's probability of its path (proofs_notes/draft_calibration.md), so a drafter
whose laws are the target's is exactly calibrated; that is checked exactly in
tests/test_draft_calibration.py, along with a drafter at the wrong temperature.

What the figure promises: a description of these nodes, drafted on these prompts (the domain)
with this rule and seed. It is not a lossless property, predicts nothing for other prompts, and
bins pool nodes of different depths.

Reports: :func:`report_blocks` (Markdown text bars through :mod:`.report`), and
:func:`reliability_svg` (the reliability diagram, for the HTML report).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from specproof.properties.report_model import Bars, Block
from specproof.reference.choices import Choices, enumerate_law
from specproof.reference.decode import decode
from specproof.reference.errors import InternalError, SpecproofInputError
from specproof.reference.models import LM
from specproof.reference.processes import Process, Proposal, node_contexts
from specproof.reference.proposers.distill import corpus, one_thread
from specproof.reference.proposers.selfdraft import Drafter, as_drafter
from specproof.reference.rules import RULES
from specproof.reference.step import make_step
from specproof.reference.transformer import TinyTransformer, TransformerLM
from specproof.reference.tree import DraftTree

Seq = tuple[int, ...]
#: The bin edges: ten equal-width bins of confidence.
EDGES: tuple[float, ...] = tuple(i / 10 for i in range(11))


@dataclass(frozen=True)
class StepDrafts:
    """One step's drafted tree and what was accepted."""

    domain: str
    parents: tuple[int, ...]
    confidence: tuple[float, ...]  # per node; node 0 (the committed token) is not a draft
    deepest: int  # the deepest accepted node (0: no draft accepted)
    deepest_law: tuple[float, ...] | None = None  # exact P(deepest accepted node = j), if known
    tokens: tuple[int, ...] = ()  # the nodes' tokens (node 0: the last committed one), if kept
    prefix: Seq = ()  # the committed tokens before the step, if kept

    def __post_init__(self) -> None:
        n = len(self.parents)
        if len(self.confidence) != n:
            raise SpecproofInputError("confidence", f"has {len(self.confidence)} entries, the tree {n} nodes")
        if not 0 <= self.deepest < n:
            raise SpecproofInputError("deepest", f"is {self.deepest}, not a node of the {n}-node tree")
        if self.deepest_law is not None and len(self.deepest_law) != n:
            raise SpecproofInputError("deepest_law", f"has {len(self.deepest_law)} entries, expected {n}")
        if any(not 0 <= c <= 1 + 1e-12 for c in self.confidence):
            raise SpecproofInputError("confidence", "every entry must be a probability in [0, 1]")

    def path(self, j: int) -> set[int]:
        out = {j}
        while j > 0:
            j = self.parents[j]
            out.add(j)
        return out

    def accepted(self) -> list[bool]:
        on = self.path(self.deepest)
        return [i in on for i in range(len(self.parents))]

    def p_accept(self) -> list[float] | None:
        """Each node's exact acceptance probability (None without ``deepest_law``)."""
        if self.deepest_law is None:
            return None
        out = [0.0] * len(self.parents)
        for j, w in enumerate(self.deepest_law):
            for i in self.path(j):
                out[i] += w
        return out


# --- collecting records from the reference decoding loop ---------------------------------


@dataclass(frozen=True)
class _Recording(Process):
    """A process that logs each proposal (with its prefix and draft model) and defers to ``inner``."""

    inner: Process | None = None
    log: list[tuple[Seq, Proposal, LM]] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def of(cls, inner: Process) -> _Recording:
        return cls(inner.name, inner.choose, inner.gives_draft_probs, inner.chain, inner.doc, inner=inner)

    def propose(self, ch: Choices, shape: DraftTree, prefix: Seq, draft: LM) -> Proposal:
        assert self.inner is not None
        p = self.inner.propose(ch, shape, prefix, draft)
        self.log.append((prefix, p, draft))
        return p

    def draft_probs(self, prefix: Seq, proposal: Proposal, draft: LM) -> Any:
        assert self.inner is not None
        return self.inner.draft_probs(prefix, proposal, draft)


def confidences(prefix: Seq, proposal: Proposal, draft: LM) -> tuple[float, ...]:
    """The product of the draft probabilities along each node's root path (node 0: 1)."""
    ctx = node_contexts(prefix, proposal)
    out = [1.0]
    for i in range(1, len(proposal.parents)):
        parent = proposal.parents[i]
        out.append(out[parent] * float(draft.law(ctx[parent])[proposal.tokens[i]]))
    return tuple(out)


def deepest_accepted(proposal: Proposal, emitted: Seq) -> int:
    """The node whose root path is the accepted drafts: ``emitted`` minus its final token, read
    down the tree (sibling tokens are distinct in every deterministic tree)."""
    node = 0
    for tok in emitted[:-1]:
        kids = [c for c in range(len(proposal.parents)) if proposal.parents[c] == node]
        match = [c for c in kids if proposal.tokens[c] == tok]
        if len(match) != 1:
            raise InternalError(f"emitted {emitted} do not follow the drafted tree {proposal}")
        node = match[0]
    return node


def collect(
    target: TinyTransformer,
    draft: LM | Drafter,
    process: Process,
    rule: str,
    shape: tuple[int, ...],
    prompts: Mapping[str, Sequence[Seq]],
    steps: int,
    seed: int,
    exact: bool = True,
) -> list[StepDrafts]:
    """Decode ``steps`` steps from every prompt of every domain (run r of domain d seeded
    ``[seed, d, r]``) and record every step; with ``exact``, each step's exact law of the
    deepest accepted node (the rule enumerated on the step, the target's laws at the nodes)."""
    if steps < 1:
        raise SpecproofInputError("steps", f"must be >= 1, got {steps}")
    drafter = as_drafter(draft)
    verify, laws = RULES[rule], TransformerLM(target)
    out: list[StepDrafts] = []
    with one_thread():
        for d, (domain, ps) in enumerate(prompts.items()):
            for r, prompt in enumerate(ps):
                rec = _Recording.of(process)
                run = decode(
                    target, drafter, rec, rule, shape, prompt, steps, np.random.default_rng([seed, d, r])
                )
                pos = len(prompt)
                for (ctx, proposal, lm), n in zip(rec.log, run.emitted_per_step):
                    emitted = tuple(run.tokens[pos : pos + n])
                    pos += n
                    law = None
                    if exact:
                        contexts = node_contexts(ctx, proposal)
                        step = make_step(
                            proposal.parents,
                            proposal.tokens,
                            process.draft_probs(ctx, proposal, lm),
                            [laws.law(c) for c in contexts],
                        )
                        w = [0.0] * len(proposal.parents)
                        for outcome, pr in enumerate_law(verify.bound, step).items():
                            w[outcome.accepted[-1]] += float(pr)
                        law = tuple(w)
                    out.append(
                        StepDrafts(
                            domain,
                            proposal.parents,
                            confidences(ctx, proposal, lm),
                            deepest_accepted(proposal, emitted),
                            law,
                            proposal.tokens,
                            ctx,
                        )
                    )
    return out


def domains(target: TinyTransformer, prompts: int, length: int, seed: int) -> dict[str, list[Seq]]:
    """Two domains of prompts: the target's own text (sampled from it) and uniform random tokens."""
    own = [tuple(int(x) for x in s) for s in corpus(target, prompts, length, seed)]
    rng = np.random.default_rng([seed, 1])
    uniform = [tuple(int(x) for x in rng.integers(target.vocab, size=length)) for _ in range(prompts)]
    return {"own text": own, "uniform tokens": uniform}


class _Tempered:
    """A draft model's laws at another temperature: ``q ** (1 / T)``, renormalized."""

    def __init__(self, lm: LM, temperature: float) -> None:
        self.lm, self.temperature, self.vocab = lm, temperature, lm.vocab
        self._laws: dict[Seq, tuple[float, ...]] = {}

    def law(self, context: Seq) -> tuple[float, ...]:
        if context not in self._laws:
            q = np.asarray(self.lm.law(context), dtype=np.float64) ** (1 / self.temperature)
            self._laws[context] = tuple(float(x) for x in q / q.sum())
        return self._laws[context]


def tempered(draft: LM | Drafter, temperature: float) -> Drafter:
    """The same drafter at another draft temperature (what a drafter tuned for the wrong
    temperature looks like): ``T < 1`` sharper, more confident; ``T > 1`` flatter."""
    if not temperature > 0:
        raise SpecproofInputError("temperature", f"must be > 0, got {temperature}")
    drafter = as_drafter(draft)
    cache: dict[Seq, LM] = {}

    def at(prefix: Seq) -> LM:
        if prefix not in cache:
            cache[prefix] = _Tempered(drafter(prefix), temperature)
        return cache[prefix]

    return at


# --- bins, ECE, the bookkeeping check ----------------------------------------------------


@dataclass(frozen=True)
class Bin:
    low: float
    high: float
    nodes: int
    confidence: float  # mean confidence (nan when empty)
    acceptance: float  # fraction accepted (nan when empty)
    exact: float | None  # mean exact acceptance probability

    @property
    def label(self) -> str:
        close = "]" if self.high >= 1 else ")"
        return f"[{self.low:.1f}, {self.high:.1f}{close}"


@dataclass(frozen=True)
class Calibration:
    label: str
    steps: int
    nodes: int
    bins: tuple[Bin, ...]
    ece: float
    ece_exact: float | None
    mean_confidence: float
    acceptance: float

    def describe(self) -> str:
        exact = "" if self.ece_exact is None else f", exact ECE {self.ece_exact:.3f}"
        return (
            f"{self.label}: ECE {self.ece:.3f}{exact} over {self.nodes} drafted nodes ({self.steps} steps); "
            f"mean confidence {self.mean_confidence:.3f}, acceptance {self.acceptance:.3f}"
        )

    def to_json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return None if x is None or math.isnan(x) else x

        return {
            "label": self.label,
            "steps": self.steps,
            "nodes": self.nodes,
            "ece": self.ece,
            "ece_exact": self.ece_exact,
            "mean_confidence": self.mean_confidence,
            "acceptance": self.acceptance,
            "bins": [
                {
                    "low": b.low,
                    "high": b.high,
                    "nodes": b.nodes,
                    "confidence": num(b.confidence),
                    "acceptance": num(b.acceptance),
                    "exact": num(b.exact),
                }
                for b in self.bins
            ],
        }


def _bin_of(c: float, edges: Sequence[float]) -> int:
    k = len(edges) - 1
    return min(k - 1, max(0, int(np.searchsorted(edges, c, side="right")) - 1))


def _nodes(records: Sequence[StepDrafts]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    conf: list[float] = []
    acc: list[bool] = []
    p: list[float] = []
    exact = all(r.deepest_law is not None for r in records)
    for r in records:
        conf.extend(r.confidence[1:])
        acc.extend(r.accepted()[1:])
        if exact:
            p.extend((r.p_accept() or [])[1:])
    return np.array(conf, dtype=float), np.array(acc, dtype=float), (np.array(p) if exact else None)


def calibrate(records: Sequence[StepDrafts], label: str, edges: Sequence[float] = EDGES) -> Calibration:
    """Bins and ECE of every drafted node of ``records`` (node 0 excluded)."""
    if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])) or edges[0] != 0 or edges[-1] != 1:
        raise SpecproofInputError("edges", "must increase strictly from 0 to 1")
    conf, acc, p = _nodes(records)
    if len(conf) == 0:
        raise SpecproofInputError("records", "hold no drafted node")
    which = np.array([_bin_of(c, edges) for c in conf])
    bins, ece, ece_exact = [], 0.0, 0.0
    for b in range(len(edges) - 1):
        m = which == b
        n = int(m.sum())
        if n == 0:
            bins.append(Bin(edges[b], edges[b + 1], 0, math.nan, math.nan, None if p is None else math.nan))
            continue
        c, a = float(conf[m].mean()), float(acc[m].mean())
        e = None if p is None else float(p[m].mean())
        bins.append(Bin(edges[b], edges[b + 1], n, c, a, e))
        ece += n / len(conf) * abs(c - a)
        if e is not None:
            ece_exact += n / len(conf) * abs(c - e)
    return Calibration(
        label,
        len(records),
        len(conf),
        tuple(bins),
        ece,
        None if p is None else ece_exact,
        float(conf.mean()),
        float(acc.mean()),
    )


def by_domain(
    records: Sequence[StepDrafts], label: str, edges: Sequence[float] = EDGES
) -> dict[str, Calibration]:
    names = list(dict.fromkeys(r.domain for r in records))
    return {d: calibrate([r for r in records if r.domain == d], f"{label}, {d}", edges) for d in names}


@dataclass(frozen=True)
class Agreement:
    """Recorded acceptances against a per-node prediction, per bin: the exact acceptance
    probabilities (the bookkeeping check) or the confidences (the calibration test)."""

    z: tuple[float, ...]  # per bin (nan when empty), then all bins together
    pvalue: float  # Bonferroni-adjusted smallest two-sided p
    alpha: float
    against: str = "exact"

    @property
    def consistent(self) -> bool:
        return self.pvalue >= self.alpha

    def describe(self) -> str:
        zs = [abs(z) for z in self.z if not math.isnan(z)]
        if self.against == "exact":
            what, verdict = "recorded acceptances vs exact probabilities", "consistent"
        else:
            what, verdict = "calibration test (acceptance probability = confidence, per bin)", "not rejected"
        if not self.consistent:
            verdict = "INCONSISTENT" if self.against == "exact" else "REJECTED: miscalibrated"
        return (
            f"{what}: largest |z| {max(zs, default=0):.2f} over {len(zs) - 1} bins and their total "
            f"(z {self.z[-1]:.2f}), p = {self.pvalue:.3g} (Bonferroni, alpha {self.alpha:g}): {verdict}"
        )


def agreement(
    records: Sequence[StepDrafts],
    edges: Sequence[float] = EDGES,
    alpha: float = 1e-6,
    against: str = "exact",
) -> Agreement:
    """Per bin and for all bins together, ``z = (accepted - predicted) / sqrt(sum of exact
    per-step variances)``, two-sided, Bonferroni over the non-empty bins and the total; the
    prediction is the sum of the nodes' exact acceptance probabilities (``against="exact"``: a
    check of the records) or of their confidences (``"confidence"``: a test of calibration, whose
    null hypothesis is that every node's acceptance probability is its confidence). Each step's
    accepted count in a bin is a function of its deepest accepted node, whose exact law the record
    holds, so the per-step variances are exact; over steps the deviations form a martingale, so z
    is standard normal in the limit under the null."""
    if against not in ("exact", "confidence"):
        raise SpecproofInputError("against", f"must be 'exact' or 'confidence', got {against!r}")
    k = len(edges) - 1
    dev, var = np.zeros(k + 1), np.zeros(k + 1)  # entry k: all bins together
    for r in records:
        if r.deepest_law is None:
            raise SpecproofInputError("records", "agreement needs the exact law of every step (deepest_law)")
        bins = [_bin_of(c, edges) for c in r.confidence]
        counts = np.zeros((len(r.parents), k + 1))  # [j, b]: nodes of bin b accepted if j is deepest
        for j in range(len(r.parents)):
            for i in r.path(j) - {0}:
                counts[j, bins[i]] += 1
        counts[:, k] = counts[:, :k].sum(1)
        w = np.array(r.deepest_law)
        mean = w @ counts
        var += w @ counts**2 - mean**2
        if against == "exact":
            dev += counts[r.deepest] - mean
        else:
            predicted = np.zeros(k + 1)
            for i in range(1, len(r.parents)):
                predicted[bins[i]] += r.confidence[i]
            predicted[k] = predicted[:k].sum()
            dev += counts[r.deepest] - predicted
    z, ps = [], []
    for b in range(k + 1):
        if var[b] <= 1e-15:
            if abs(dev[b]) > 1e-9:
                z.append(math.inf)
                ps.append(0.0)
            else:
                z.append(math.nan)
            continue
        zb = float(dev[b] / math.sqrt(var[b]))
        z.append(zb)
        ps.append(float(2 * stats.norm.sf(abs(zb))))
    p = min(1.0, min(ps, default=1.0) * max(1, len(ps)))
    return Agreement(tuple(z), p, alpha, against)


# --- reports -----------------------------------------------------------------------------


def report_blocks(cals: Sequence[Calibration], note: str = "") -> list[Block]:
    """Blocks for :func:`.report.to_markdown` / :func:`.report.to_html`: a side-by-side table of
    the bins, then per drafter the reliability bars (acceptance observed, confidence expected)."""
    out: list[Block] = [("h2", "Draft calibration: path confidence against acceptance")]
    if note:
        out.append(("p", note))
    out.append(
        (
            "table",
            (
                ["drafter", "steps", "drafted nodes", "mean confidence", "acceptance", "ECE", "exact ECE"],
                [
                    [
                        c.label,
                        str(c.steps),
                        str(c.nodes),
                        f"{c.mean_confidence:.3f}",
                        f"{c.acceptance:.3f}",
                        f"{c.ece:.3f}",
                        "-" if c.ece_exact is None else f"{c.ece_exact:.3f}",
                    ]
                    for c in cals
                ],
            ),
        )
    )
    head = ["confidence bin"]
    for c in cals:
        head += [f"{c.label}: nodes", "confidence", "acceptance"]
    rows = []
    for i, b in enumerate(cals[0].bins):
        row = [b.label]
        for c in cals:
            x = c.bins[i]
            row += [str(x.nodes)] + (
                ["", ""] if x.nodes == 0 else [f"{x.confidence:.3f}", f"{x.acceptance:.3f}"]
            )
        rows.append(row)
    out.append(("table", (head, rows)))
    for c in cals:
        kept = [b for b in c.bins if b.nodes]
        out.append(
            (
                "bars",
                Bars(
                    f"{c.label}: acceptance (obs) against mean confidence (exp), in %, per confidence bin "
                    f"(ECE {c.ece:.3f})",
                    [f"{b.label} n={b.nodes:<4d}" for b in kept],
                    [round(100 * b.acceptance, 1) for b in kept],
                    [100 * b.confidence for b in kept],
                ),
            )
        )
    return out


def reliability_svg(cal: Calibration, size: int = 300) -> str:
    """The reliability diagram: per bin a bar up to the fraction accepted, a red tick at the mean
    confidence, the diagonal of perfect calibration, the node count under each bin."""
    left, top, s = 52, 10, size
    w, h = s + left + 10, s + top + 64

    def x(v: float) -> float:
        return left + v * s

    def y(v: float) -> float:
        return top + (1 - v) * s

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-size="11">']
    out.append(f'<rect x="{left}" y="{top}" width="{s}" height="{s}" fill="none" stroke="#999"/>')
    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<text x="{x(t):.1f}" y="{top + s + 14}" text-anchor="middle">{t:g}</text>')
        out.append(f'<text x="{left - 4}" y="{y(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    for b in cal.bins:
        if not b.nodes:
            continue
        bw = (b.high - b.low) * s
        out.append(
            f'<rect x="{x(b.low) + 1:.1f}" y="{y(b.acceptance):.1f}" width="{bw - 2:.1f}" '
            f'height="{b.acceptance * s:.1f}" fill="#3366cc" fill-opacity="0.75">'
            f"<title>{html.escape(b.label)}: {b.nodes} nodes, confidence {b.confidence:.3f}, "
            f"acceptance {b.acceptance:.3f}</title></rect>"
        )
        out.append(
            f'<line x1="{x(b.low) + 1:.1f}" x2="{x(b.high) - 1:.1f}" y1="{y(b.confidence):.1f}" '
            f'y2="{y(b.confidence):.1f}" stroke="#cc3333" stroke-width="2"/>'
        )
        out.append(
            f'<text x="{x((b.low + b.high) / 2):.1f}" y="{top + s + 28}" text-anchor="middle" '
            f'font-size="8" fill="#555">{b.nodes}</text>'
        )
    out.append(
        f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(1)}" y2="{y(1)}" stroke="#555" stroke-dasharray="4,3"/>'
    )
    out.append(
        f'<text x="{left + s / 2}" y="{top + s + 46}" text-anchor="middle">path confidence '
        "(bins of 0.1; under each: nodes)</text>"
    )
    out.append(
        f'<text x="12" y="{top + s / 2}" text-anchor="middle" transform="rotate(-90 12 {top + s / 2})">'
        "fraction accepted</text>"
    )
    out.append("</svg>")
    title = html.escape(f"{cal.label}: ECE {cal.ece:.3f}, {cal.nodes} nodes")
    return f'<figure style="margin:0 1em 1em 0"><figcaption>{title}</figcaption>{"".join(out)}</figure>'


def html_figures(cals: Sequence[Calibration]) -> str:
    """The reliability diagrams side by side (y: fraction accepted; blue bars)."""
    figs = "".join(reliability_svg(c) for c in cals)
    return (
        "<h3>Reliability diagrams (blue: fraction accepted; red: mean confidence; dashed: perfect "
        f"calibration)</h3><div style='display:flex;flex-wrap:wrap'>{figs}</div>"
    )


def figure_svg(cals: Sequence[Calibration], size: int = 300) -> str:
    """The reliability diagrams side by side in one standalone SVG file (for a README)."""
    w, h = size + 62, size + 100
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * len(cals)}" height="{h}" '
        'font-family="sans-serif">'
    ]
    for k, c in enumerate(cals):
        inner = reliability_svg(c, size)
        body = inner.split("</figcaption>", 1)[1].removesuffix("</figure>")
        title = html.escape(f"{c.label}: ECE {c.ece:.3f}, {c.nodes} nodes")
        parts.append(
            f'<g transform="translate({k * w},0)"><text x="{w / 2}" y="14" text-anchor="middle" '
            f'font-size="12">{title}</text><g transform="translate(0,20)">{body}</g></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
