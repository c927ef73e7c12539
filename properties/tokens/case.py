"""The token test of an audit: one family of bettors per case, one wealth for the audit.

:class:`TokenTest` is what the engine audit (and the recorded-traffic audit) feeds: for each
sample of a case, in index order, the laws along its path (the target's law at each emitted
token's own prefix: teacher forcing), its tokens, where its speculative steps ended and the draft's
law where the engine tells them. It scores them (:mod:`.transform`), feeds the case's family
(:mod:`.family`), and after each chunk says whether the audit's wealth (the average of the cases')
has reached ``1/alpha``: a deviation, found by the statistic named, at a false-alarm rate of at
most ``alpha`` whenever the audit stops (proofs_notes/token_audit.md). A token the law gives
probability 0 is a hard witness at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specproof.properties.tokens import power
from specproof.properties.tokens.family import DOCS, Family, direction
from specproof.properties.tokens.law import TokenLaw
from specproof.properties.tokens.tilt import TiltLearner
from specproof.properties.tokens.trace import Point, Trace
from specproof.properties.tokens.transform import (
    Observations,
    joined,
    observe,
    observe_dense,
    seeded_uniforms,
)

#: cells of a case's transform histogram
PIT_BINS = 20


@dataclass
class Sample:
    """One sample as the token test reads it: its index, its tokens (up to its end of sequence),
    the laws along its path (a dense ``[m, V]`` array, or one :class:`TokenLaw` a position), and
    where the engine tells them, each token's index in its speculative step and the draft's law
    at each position."""

    index: int
    tokens: tuple[int, ...]
    laws: np.ndarray | list[TokenLaw]
    block: np.ndarray | None = None
    drafts: np.ndarray | None = None
    #: where the request has stop strings: at each position, the ids that end the output there
    #: (a stop string completed, or the end of sequence); the eos statistic scores that event
    stops: list[np.ndarray] | None = None


@dataclass
class TokenCase:
    """One case's token test: its family, what it has seen, and its witness."""

    index: int
    horizon: int
    family: Family
    samples: int = 0
    eos: int | None = None  # the case's end of sequence (the eos statistic reads it)
    impossible: dict[str, Any] | None = None  # the first token the law gave probability 0
    #: the case's transforms counted in :data:`PIT_BINS` equal cells of [0, 1] (uniform under the
    #: law: the report's histogram of the case that deviates)
    pit: np.ndarray = field(default_factory=lambda: np.zeros(PIT_BINS, dtype=np.int64))
    #: the ``ids`` statistic's counts and weights (:mod:`.tilt`), learned as each sample is scored
    tilt: TiltLearner = field(default_factory=TiltLearner)

    @property
    def tokens(self) -> int:
        return self.family.tokens

    @property
    def log_wealth(self) -> float:
        return math.inf if self.impossible else self.family.log_wealth

    def to_json(self) -> dict[str, Any]:
        lead = self.family.leader()
        return {
            "samples": self.samples,
            "tokens": self.tokens,
            "log_wealth": self.log_wealth,
            "leader": lead.to_json(),
            "impossible": self.impossible,
            "pit": [int(c) for c in self.pit],
            "bets": [b.to_json() for b in self.family.bets],
        }


@dataclass
class TokenTest:
    """The token test over an audit's cases (module docstring). ``alpha``: its share of the audit's
    family-wise alpha; ``seed``: the audit's (the transforms' auxiliary uniforms derive from it).

    With several cases the audit's wealth is :data:`.power.POOLED_SHARE` on a **pooled** family,
    fed every case's scored tokens in the order the audit scores them, plus the rest on the average
    of the cases' own families: a weighted average of test martingales, each fed predictably, so
    a test martingale (proofs_notes/token_audit.md, claim 5). A deviation every case shares
    grows the pooled wealth with the tokens of all of them; one confined to a case grows that
    case's own."""

    alpha: float
    seed: int
    cases: list[TokenCase] = field(default_factory=list)
    pooled: Family | None = None
    trace: Trace = field(default_factory=Trace)

    def add_case(
        self,
        index: int,
        horizon: int,
        draft: bool = False,
        blocks: bool = False,
        eos: int | None = None,
        stops: bool = False,
    ) -> TokenCase:
        """A case of ``horizon`` tokens a sample; ``eos``: its end of sequence, ``stops``: its
        samples may end on a stop string (either feeds the eos statistic)."""
        family = Family(horizon, draft=draft, blocks=blocks, eos=eos is not None or stops)
        case = TokenCase(index, horizon, family, eos=eos)
        self.cases.append(case)
        return case

    def pool(self) -> None:
        """Start the pooled family, once every case is added (none for a single case): it runs
        the statistics every case can feed."""
        if len(self.cases) > 1:
            fams = [c.family for c in self.cases]
            self.pooled = Family(
                max(f.horizon for f in fams),
                draft=all(f.draft for f in fams),
                blocks=all(f.blocks for f in fams),
                eos=all(f.eos for f in fams),
            )

    @property
    def share(self) -> float:
        """The pooled family's share of the audit's wealth (0 without one)."""
        return power.POOLED_SHARE if self.pooled is not None else 0.0

    def observe(self, case: TokenCase, smp: Sample) -> Observations:
        """One sample of ``case`` scored (not yet fed to the bettors: :meth:`update`); a token of
        probability 0 is recorded as the case's hard witness."""
        v = seeded_uniforms(self.seed, case.index, smp.index, len(smp.tokens))
        if isinstance(smp.laws, np.ndarray):
            w = case.tilt.sized(np.shape(smp.laws)[-1])
            obs = observe_dense(smp.laws, smp.tokens, v, smp.drafts, case.eos, w)
        else:
            w = case.tilt.sized(max((law.vocab for law in smp.laws), default=0))
            drafts = None if smp.drafts is None else list(smp.drafts)
            obs = observe(smp.laws, smp.tokens, v, drafts, case.eos, w)
        if smp.stops is not None:
            _stopping(obs, smp)
        if obs.ids_seen is not None and obs.ids_mass is not None:
            # the weights move only now, after this sample was scored with them (predictable)
            case.tilt.learn(obs.ids_seen, obs.ids_mass)
            obs.ids_seen = obs.ids_mass = None  # nothing the size of the vocabulary is kept
        if obs.impossible is not None and case.impossible is None:
            t = obs.impossible
            case.impossible = {
                "sample": smp.index,
                "position": t + 1,
                "sequence": list(smp.tokens),
                "token": int(smp.tokens[t]),
            }
        if smp.block is not None:
            obs.block = np.asarray(smp.block)[: len(obs)]
        return obs

    def update(self, case: TokenCase, parts: list[Observations]) -> None:
        """Feed scored samples of ``case`` to its bettors (and the pooled family's), in index
        order, at once."""
        if not parts:
            return
        if not self.trace.chunks:  # the curves start where the wealth does, at 1
            self.trace.taken(self.point)
        positions = np.concatenate([np.arange(1, len(o) + 1) for o in parts])
        blocks = [o.block for o in parts if o.block is not None]
        block: np.ndarray | None = np.concatenate(blocks) if len(blocks) == len(parts) else None
        obs = joined(parts)
        case.family.update(obs, positions, block)
        if self.pooled is not None:
            self.pooled.update(obs, positions, block)
        case.samples += len(parts)
        cells = np.minimum((obs.u * PIT_BINS).astype(np.int64), PIT_BINS - 1)
        case.pit += np.bincount(cells, minlength=PIT_BINS)
        self.trace.taken(self.point)

    def point(self) -> Point | None:
        """The trace's point now: tokens read, log10 of the audit's wealth and of each statistic's
        part of it (:mod:`.trace`); None once the wealth is infinite (a hard witness)."""
        if any(c.impossible for c in self.cases):
            return None
        cases = [c.family for c in self.cases]
        shares = [(1 - self.share) / len(cases)] * len(cases) if cases else []
        if self.pooled is not None:
            cases, shares = [*cases, self.pooled], [*shares, self.share]
        parts: dict[str, list[float]] = {}
        for fam, w in zip(cases, shares):
            for b in fam.bets:
                parts.setdefault(b.family, []).append(math.log(w * b.weight) + b.log_wealth)
        ln10 = math.log(10)
        by = {s: _logsumexp(v) / ln10 for s, v in parts.items()}
        return sum(c.tokens for c in self.cases), self.log_wealth / ln10, by

    def score(self, case: TokenCase, samples: list[Sample]) -> list[Observations]:
        """Score a chunk of ``case``'s samples (in index order) and feed them at once."""
        parts = []
        for smp in samples:
            parts.append(self.observe(case, smp))
            if case.impossible is not None:
                break  # a hard witness: nothing after it is needed
        self.update(case, parts)
        return parts

    @property
    def cases_log_wealth(self) -> float:
        """log of the average of the cases' wealths."""
        if not self.cases:
            return 0.0
        logs = np.array([c.log_wealth for c in self.cases])
        if np.isinf(logs).any():
            return math.inf
        m = float(logs.max())
        return m + math.log(float(np.exp(logs - m).mean()))

    @property
    def log_wealth(self) -> float:
        """log of the audit's wealth: the cases' average, mixed with the pooled family's."""
        per = self.cases_log_wealth
        if self.pooled is None or math.isinf(per):
            return per
        w = self.share
        a, b = math.log(w) + self.pooled.log_wealth, math.log(1 - w) + per
        m = max(a, b)
        return m + math.log(math.exp(a - m) + math.exp(b - m))

    @property
    def rejected(self) -> bool:
        return self.log_wealth >= math.log(1 / self.alpha)

    @property
    def e_value(self) -> float:
        lw = self.log_wealth
        return math.inf if lw > 700 else math.exp(lw)

    def pvalue(self) -> float:
        """The anytime-valid p-value of the audit's wealth: min(1, 1 / wealth) (Ville)."""
        lw = self.log_wealth
        return 0.0 if math.isinf(lw) else min(1.0, math.exp(-lw))

    def pooled_leads(self) -> bool:
        """Whether the pooled family holds more of the audit's wealth than the cases' together."""
        if self.pooled is None or math.isinf(self.cases_log_wealth):
            return False
        w = self.share
        return math.log(w) + self.pooled.log_wealth > math.log(1 - w) + self.cases_log_wealth

    def finding(self) -> dict[str, Any] | None:
        """The case and statistic that moved the wealth most, with what they saw; where the
        pooled family moved it, its statistic over every case's tokens, and the case whose own
        family moved most."""
        if not self.cases:
            return None
        case = max(self.cases, key=lambda c: c.log_wealth)
        if case.impossible:
            return {"case": case.index, "statistic": "impossible", "detail": case.impossible}
        pooled = self.pooled_leads()
        lead = (self.pooled if pooled and self.pooled is not None else case.family).leader()
        out = {
            "case": case.index,
            "statistic": lead.name,
            "family": lead.family,
            "what": DOCS[lead.family],
            "log_wealth": lead.log_wealth,
            "drift": lead.bettor.drift,
            "direction": direction(lead.name, lead.bettor.drift),
            "tokens": lead.bettor.n,
        }
        if pooled:
            out["pooled"] = True
        return out

    def to_json(self) -> dict[str, Any]:
        """The wealth over tokens (:mod:`.trace`) and the pooled family's reading (the cases' are
        each case's :meth:`TokenCase.to_json`)."""
        trace = {"trace": self.trace.to_json(self.point(), self.alpha)}
        if self.pooled is None:
            return trace
        lead = self.pooled.leader()
        return {
            **trace,
            "pooled": {
                "share": self.share,
                "tokens": self.pooled.tokens,
                "log_wealth": self.pooled.log_wealth,
                "leader": lead.to_json(),
                "bets": [b.to_json() for b in self.pooled.bets],
            },
        }


def _logsumexp(values: list[float]) -> float:
    m = max(values)
    if math.isinf(m):
        return m
    return m + math.log(sum(math.exp(v - m) for v in values))


def _stopping(obs: Observations, smp: Sample) -> None:
    """The eos statistic's event read from the sample's ending ids (:attr:`Sample.stops`): at
    each position, whether the token ended the output and the law's mass on the ids that would
    have (NaN where a censored law hides some of it)."""
    n = len(obs)
    hit = np.zeros(n, dtype=bool)
    mass = np.zeros(n)
    for t in range(n):
        ids = smp.stops[t]  # type: ignore[index]
        hit[t] = bool(np.isin(smp.tokens[t], ids))
        if isinstance(smp.laws, np.ndarray):
            row = smp.laws[t]
            mass[t] = float(np.sum(row[ids], dtype=np.float64) / np.sum(row, dtype=np.float64))
        else:
            ps = [smp.laws[t].probability_of(int(i)) for i in ids]
            mass[t] = float(sum(ps))  # NaN where a hidden tail holds one of them
    obs.p_eos, obs.eos_hit = mass, hit
