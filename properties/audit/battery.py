"""The case battery: the inputs a black-box verifier is audited on.

A :class:`Case` fixes a draft-tree shape, a vocabulary, a proposal process and a pair of
context-dependent models (target p, draft q). The harness, not the verifier, draws the drafts
by the declared process, so a verifier is audited together with real draft randomness. Each
row of a batch is one independent step.

**Models.** A context is the sequence of tokens after the last committed one. Its law is read
from a small pool: ``law(ctx) = pool[hash(ctx) % P]`` with the rolling hash
``h(ctx + (x,)) = (h(ctx) * 1000003 + x + 1) mod (2**31 - 1)``. Every branch of a tree thus sees
its own law, and sampling, completion and the expected law are all vectorized table look-ups.
Each pool entry is a (p, q) pair of one *pair style* (:data:`PAIR_STYLES`): the edge cases a
verifier must survive (p == q, disjoint supports, one-hot, tiny masses, ties, ...).

**Sparse large vocabularies.** With ``sparse=True`` the support of every law is a fixed set of
scattered ids that includes 0, ``2**16``, ``2**16 + 1`` and ``V - 1``; all other ids have
probability 0.

**Pairs of rows.** A case with ``paired=True`` alternates two different model pairs across
the rows of a batch (row ``2i`` uses models A, row ``2i + 1`` models B). Its test is on the
joint law of the two rows' outputs, which must be the product of the two laws: rows must be
independent and must each read their own inputs.

**Completion.** A step emits ``y_1..y_L``; the harness appends samples of the law being
preserved (the target's, or its argmax for greedy rules) up to ``M = depth + 1`` tokens. The
step preserves the law iff the completed sequence has the target's M-token law
(proofs_notes/lossless_criterion.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from specproof.properties.audit.config import LARGE_VOCAB  # re-exported: the cases it splits
from specproof.reference.errors import UsageError
from specproof.reference.processes import PROCESSES
from specproof.reference.tree import DraftTree

HASH_MOD = 2**31 - 1
HASH_MULT = 1_000_003

PAIR_STYLES: dict[str, str] = {
    "random": "p and q independent, weights 1..9",
    "close": "q = 0.8 p + 0.2 r: a good draft",
    "equal": "q == p: every draft is accepted, the residual has zero mass",
    "disjoint": "p and q on disjoint supports: every sampled draft is rejected",
    "onehot": "p one-hot, q random",
    "peaked": "p and q each peaked, on different tokens",
    "tiny": "p gives the draft's favourite token a tiny mass (1e-6)",
    "ties": "p with tied weights, q uniform",
    "sparse": "p has zeros where q has mass",
    "agree": "p and q peaked on the same token with different masses (a typical LLM step)",
}
MIXED = ("random", "close", "equal", "disjoint", "onehot", "peaked", "tiny", "ties", "sparse", "agree")
#: good drafts: most steps accept deep into a long chain, so positions 5..8 are reached often
DEEP = ("close", "agree", "equal")


def child_hash(h: int, x: int) -> int:
    return (h * HASH_MULT + x + 1) % HASH_MOD


def child_hash_t(h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (h * HASH_MULT + x + 1) % HASH_MOD


def _pair(style: str, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Weights (p, q) over ``k`` support slots."""

    def rand(lo: int = 1, hi: int = 10) -> np.ndarray:
        return rng.integers(lo, hi, k).astype(np.float64)

    if style == "random":
        return rand(), rand()
    if style == "close":
        p = rand()
        p /= p.sum()
        r = rand()
        return p, 0.8 * p + 0.2 * r / r.sum()
    if style == "equal":
        p = rand()
        return p, p.copy()
    if style == "disjoint":
        perm = rng.permutation(k)
        half = max(1, k // 2)
        p, q = np.zeros(k), np.zeros(k)
        p[perm[:half]] = rand()[:half]
        q[perm[half:] if k > 1 else perm[:1]] = rand()[: max(1, k - half)]
        return p, q
    if style == "onehot":
        p = np.zeros(k)
        p[rng.integers(k)] = 1.0
        return p, rand()
    if style == "peaked":
        a, b = rng.choice(k, 2, replace=k < 2)
        p, q = rand(0, 3), rand(0, 3)
        p[a] += 40
        q[b] += 40
        return p, q
    if style == "tiny":
        a = rng.integers(k)
        p = rand()
        p[a] = 1e-6 * p.sum()
        q = rand(0, 3)
        q[a] = 40
        return p, q
    if style == "ties":
        return rand(1, 3), np.ones(k)
    if style == "agree":
        a = rng.integers(k)
        p, q = rand(0, 3), rand(0, 3)
        p[a] += rng.integers(5, 40)
        q[a] += rng.integers(5, 40)
        return p, q
    if style == "sparse":
        p = rand(0, 4)
        if p.sum() == 0:
            p[rng.integers(k)] = 1
        q = rand()
        return p, q
    raise UsageError(f"styles: unknown pair style {style!r}; known: {', '.join(PAIR_STYLES)}")


def sparse_support(vocab: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """Scattered ids including 0, 2**16, 2**16 + 1 and V - 1 (when V allows)."""
    fixed = [0, vocab - 1] + ([2**16, 2**16 + 1] if vocab > 2**16 + 1 else [])
    fixed = sorted(set(fixed))
    rest = rng.choice(np.setdiff1d(np.arange(vocab), fixed), max(0, size - len(fixed)), replace=False)
    return np.sort(np.concatenate([np.array(fixed), rest]).astype(np.int64))


@dataclass(frozen=True)
class Case:
    """One audit case. Everything is derived deterministically from these fields."""

    name: str
    process: str
    parents: tuple[int, ...]
    vocab: int
    styles: tuple[str, ...] = MIXED
    seed: int = 0
    pool: int = 10
    sparse: bool = False
    support_size: int = 10
    paired: bool = False
    note: str = ""

    @property
    def kind(self) -> str:
        return "chain" if PROCESSES[self.process].chain else "tree"

    @property
    def tree(self) -> DraftTree:
        return DraftTree(self.parents)

    @property
    def horizon(self) -> int:
        return self.tree.max_depth + 1

    @property
    def K(self) -> int:
        return len(self.parents) - 1

    def describe(self) -> str:
        shape = f"K={self.K}" if self.kind == "chain" else f"parents={list(self.parents)}"
        extra = ", sparse support" if self.sparse else ""
        extra += ", rows paired A/B" if self.paired else ""
        return (
            f"{self.name}: {self.process}, {shape}, V={self.vocab}{extra}, "
            f"pair styles {'/'.join(self.styles)}, seed {self.seed}"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "process": self.process,
            "parents": list(self.parents),
            "vocab": self.vocab,
            "styles": list(self.styles),
            "seed": self.seed,
            "sparse": self.sparse,
            "paired": self.paired,
        }


def chain(K: int) -> tuple[int, ...]:
    return tuple(range(-1, K))


@dataclass
class Inputs:
    """One batch of verifier inputs plus the harness's bookkeeping."""

    parents: torch.Tensor  # [B, N] int64
    tokens: torch.Tensor  # [B, N] int64, tokens[:, 0] the last committed token
    draft_probs: torch.Tensor | None  # [B, N, V] float32
    target_probs: torch.Tensor  # [B, N, V] float32
    sub: torch.Tensor  # [B] which model pair (0, or 0/1 for paired cases)

    def chain_args(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        K = self.tokens.shape[1] - 1
        dp = None if self.draft_probs is None else self.draft_probs[:, :K].contiguous()
        return self.tokens[:, 1:].contiguous(), dp, self.target_probs.contiguous()


@dataclass
class Models:
    """The case's model pools: dense float32 tensors (what verifiers see) and, over the support
    ids only, the float64 laws the harness samples from and tests against."""

    case: Case
    target32: torch.Tensor  # [S*P, V] float32
    draft32: torch.Tensor  # [S*P, V] float32
    support: np.ndarray  # [S] the ids any law can put mass on (sorted)
    draft_s: torch.Tensor  # [S*P, S] float64: draft laws on the support
    preserve_s: torch.Tensor  # [S*P, S] float64: the law to preserve, on the support
    roots: tuple[int, ...]  # root context hash per sub-case
    greedy: bool = False
    lut: torch.Tensor = field(init=False, repr=False)  # id -> support index, -1 outside
    support_t: torch.Tensor = field(init=False, repr=False)
    cdf_s: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.support_t = torch.from_numpy(self.support)
        self.lut = torch.full((self.case.vocab,), -1, dtype=torch.int64)
        self.lut[self.support_t] = torch.arange(len(self.support))
        self.cdf_s = torch.cumsum(self.preserve_s, dim=1)

    def index(self, h: torch.Tensor, sub: torch.Tensor) -> torch.Tensor:
        return sub * self.case.pool + h % self.case.pool

    def index_py(self, h: int, sub: int) -> int:
        return sub * self.case.pool + h % self.case.pool

    def law_py(self, h: int, sub: int) -> list[tuple[float, int]]:
        """The preserved law at a context as (probability, token id) pairs, positive mass only."""
        row = self.preserve_s[self.index_py(h, sub)].numpy()
        return [(float(row[j]), int(self.support[j])) for j in np.flatnonzero(row > 0)]


def build_models(case: Case, greedy: bool = False) -> Models:
    """The pools of a case (deterministic in ``case.seed``). Dense tensors are written only on
    the support columns, so a sparse case over a huge vocabulary costs its pools' float32 rows
    and nothing more."""
    rng = np.random.default_rng([case.seed, case.vocab, case.K, 7919])
    V = case.vocab
    subs = 2 if case.paired else 1
    support = sparse_support(V, case.support_size, rng) if case.sparse else np.arange(V)
    k = len(support)
    floor_q = case.process in ("wor_siblings", "topk_siblings")
    width = max(len(c) for c in case.tree.children)
    if floor_q and width > k:
        raise UsageError(f"case {case.name}: {width} siblings need at least that many support ids")
    T = np.zeros((subs * case.pool, k))
    D = np.zeros((subs * case.pool, k))
    for j in range(subs * case.pool):
        style = case.styles[(j + (j // case.pool)) % len(case.styles)]
        p, q = _pair(style, k, rng)
        if floor_q:
            q = q + 1e-2 * q.sum() / k  # enough positive mass for every sibling to be distinct
        T[j] = p / p.sum()
        D[j] = q / q.sum()
    cols = torch.from_numpy(support)
    target32 = torch.zeros(subs * case.pool, V, dtype=torch.float32)
    draft32 = torch.zeros(subs * case.pool, V, dtype=torch.float32)
    target32[:, cols] = torch.tensor(T, dtype=torch.float32)
    draft32[:, cols] = torch.tensor(D, dtype=torch.float32)
    law = target32[:, cols].double()
    law = law / law.sum(dim=1, keepdim=True)
    if greedy:  # the preserved law is the target's argmax (ties to the smaller id)
        law = torch.nn.functional.one_hot(law.argmax(dim=1), k).double()
    roots = tuple(int(r) for r in rng.integers(1, HASH_MOD, subs))
    return Models(case, target32, draft32, support, draft32[:, cols].double(), law, roots, greedy)


def _icdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse CDF: the first index whose cumulative mass exceeds ``u * total``."""
    total = cdf[:, -1]
    x = torch.searchsorted(cdf, (u * total)[:, None], right=True).squeeze(1)
    return x.clamp(max=cdf.shape[1] - 1)


def sample_inputs(models: Models, batch: int, gen: torch.Generator) -> Inputs:
    """Draw ``batch`` independent steps: drafts by the case's process, laws along each path."""
    case = models.case
    tree = case.tree
    N, V = tree.n, case.vocab
    proc = PROCESSES[case.process]
    sub = (torch.arange(batch) % 2) if case.paired else torch.zeros(batch, dtype=torch.int64)
    roots = torch.tensor(models.roots, dtype=torch.int64)[sub]
    h = torch.zeros(batch, N, dtype=torch.int64)
    h[:, 0] = roots
    tokens = torch.zeros(batch, N, dtype=torch.int64)
    tokens[:, 0] = torch.randint(0, V, (batch,), generator=gen)  # the last committed token
    rows = torch.arange(batch)
    for i in range(N):
        kids = tree.children[i]
        if not kids:
            continue
        q = models.draft_s[models.index(h[:, i], sub)]
        if case.process in ("iid_chain", "iid_siblings"):
            cdf = torch.cumsum(q, dim=1)
            picks = [_icdf(cdf, torch.rand(batch, generator=gen, dtype=torch.float64)) for _ in kids]
        elif case.process == "wor_siblings":
            w = q.clone()
            picks = []
            for _ in kids:
                x = _icdf(torch.cumsum(w, dim=1), torch.rand(batch, generator=gen, dtype=torch.float64))
                picks.append(x)
                w[rows, x] = 0
        else:  # deterministic: top-k of q, ties to the smaller id (stable sort)
            order = torch.sort(-q, dim=1, stable=True).indices
            picks = [order[:, j] for j in range(len(kids))]
        for c, local in zip(kids, picks):
            x = models.support_t[local]
            tokens[:, c] = x
            h[:, c] = child_hash_t(h[:, i], x)
    idx = models.index(h, sub[:, None])
    target = models.target32[idx]
    draft = models.draft32[idx] if proc.gives_draft_probs else None
    parents = torch.tensor(case.parents, dtype=torch.int64).expand(batch, N).contiguous()
    return Inputs(parents, tokens, draft, target, sub)


@dataclass
class Completion:
    completed: torch.Tensor  # [B, M] int64
    zero_row: int | None  # first row that emitted a token the law gives probability 0
    zero_position: int | None


def complete(
    models: Models, inputs: Inputs, emitted: torch.Tensor, lengths: torch.Tensor, gen: torch.Generator
) -> Completion:
    """Append samples of the preserved law after each row's emitted tokens, up to the horizon."""
    case = models.case
    M = case.horizon
    B = emitted.shape[0]
    if emitted.shape[1] < M:
        emitted = torch.cat([emitted, torch.full((B, M - emitted.shape[1]), -1, dtype=torch.int64)], 1)
    roots = torch.tensor(models.roots, dtype=torch.int64)[inputs.sub]
    h = roots.clone()
    out = torch.empty(B, M, dtype=torch.int64)
    zero_row = zero_pos = None
    for m in range(M):
        idx = models.index(h, inputs.sub)
        drawn = models.support_t[_icdf(models.cdf_s[idx], torch.rand(B, generator=gen, dtype=torch.float64))]
        own = m < lengths
        y = torch.where(own, emitted[:, m].clamp(min=0), drawn)
        if zero_row is None:
            local = models.lut[y]
            mass = torch.where(
                local >= 0, models.preserve_s[idx, local.clamp(min=0)], torch.zeros(B, dtype=torch.float64)
            )
            bad = own & (mass <= 0)
            if bad.any():
                zero_row, zero_pos = int(bad.nonzero()[0]), m
        out[:, m] = y
        h = child_hash_t(h, y)
    return Completion(out, zero_row, zero_pos)


def chain_battery(processes: tuple[str, ...] = ("iid_chain", "onehot_chain"), seed: int = 0) -> list[Case]:
    """The default chain cases for each process (K from 1 to 8, degenerate laws, sparse V)."""
    cases: list[Case] = []
    for proc in processes:
        if proc not in PROCESSES or not PROCESSES[proc].chain:
            raise UsageError(f"process: {proc!r} is not a chain process (iid_chain, onehot_chain)")
        tag = proc.split("_")[0]
        for K in (1, 2, 4, 8):
            cases.append(Case(f"{tag}/K{K}/V8", proc, chain(K), 8, seed=seed + K))
        cases.append(Case(f"{tag}/K3/V5", proc, chain(3), 5, seed=seed + 3))
        for style in ("equal", "disjoint", "onehot", "tiny"):
            cases.append(Case(f"{tag}/K2/V6/{style}", proc, chain(2), 6, styles=(style,), seed=seed + 11))
        cases.append(Case(f"{tag}/K8/V8/deep", proc, chain(8), 8, styles=DEEP, seed=seed + 23))
        cases.append(
            Case(
                f"{tag}/K2/V152064/sparse", proc, chain(2), 152064, sparse=True, support_size=8, seed=seed + 5
            )
        )
        cases.append(Case(f"{tag}/K2/V8/rows", proc, chain(2), 8, paired=True, seed=seed + 17))
    return cases


TREE_SHAPES: dict[str, tuple[int, ...]] = {
    "fan3": (-1, 0, 0, 0),
    "binary2": (-1, 0, 0, 1, 1, 2, 2),
    "sparse7": (-1, 0, 0, 0, 1, 1, 2, 4),  # a Medusa-style sparse tree: wide at depth 1, thin below
    "chain3": (-1, 0, 1, 2),
}


def tree_battery(process: str, seed: int = 0) -> list[Case]:
    """The default tree cases for one tree process."""
    if process not in PROCESSES or PROCESSES[process].chain:
        raise UsageError(
            f"process: {process!r} is not a tree process "
            f"({', '.join(p for p in PROCESSES if not PROCESSES[p].chain)})"
        )
    tag = process.split("_")[0]
    cases = [
        Case(f"{tag}/{s}/V8", process, parents, 8, seed=seed + i)
        for i, (s, parents) in enumerate(TREE_SHAPES.items())
    ]
    for style in ("equal", "tiny", "onehot"):
        cases.append(
            Case(f"{tag}/fan3/V6/{style}", process, TREE_SHAPES["fan3"], 6, styles=(style,), seed=seed + 9)
        )
    cases.append(
        Case(
            f"{tag}/fan3/V152064/sparse",
            process,
            TREE_SHAPES["fan3"],
            152064,
            sparse=True,
            support_size=8,
            seed=seed + 5,
        )
    )
    cases.append(Case(f"{tag}/fan3/V8/rows", process, TREE_SHAPES["fan3"], 8, paired=True, seed=seed + 17))
    return cases


def coverage_order(cases: list[Case]) -> list[int]:
    """The order in which the audit spends its samples: breadth first, so that a budget cut
    leaves the fewest kinds of input untested. Short drafts and small vocabularies first, then
    longer drafts, paired rows, and the memory-bound large vocabularies last; battery order
    (and so the processes, interleaved) breaks ties. Depends on the cases alone."""
    return sorted(
        range(len(cases)),
        key=lambda i: (cases[i].vocab > LARGE_VOCAB, cases[i].paired, cases[i].K, cases[i].vocab, i),
    )
