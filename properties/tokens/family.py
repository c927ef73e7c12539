"""The token test's statistics, each aimed at a class of bugs, combined into one wealth.

Every statistic is a function of the transforms and of what the law says at each position
(:mod:`.transform`), with conditional mean 0 (or, for ``uniform``, a uniform cell law) under a
lossless engine, whatever the position, the law or the past (proofs_notes/token_audit.md):

=============  ==========================================  =========================================
statistic      per token                                   catches
=============  ==========================================  =========================================
``uniform``    the transform's cell among 8 equal cells    any deviation of the token law that moves
                                                           mass between cells of the transform
``mean``       ``U - 1/2``                                 sharpening (mass toward likely tokens:
                                                           negative) or flattening (positive)
``greedy``     ``[U < p_first] - p_first``                 drift toward the argmax (verification
                                                           silently greedy at T > 0)
``surprisal``  ``s - E s``, ``s`` the clipped surprisal    any law the tokens follow that is not the
                                                           target's but about as sharp: its mean is
                                                           ``KL(p'||p) + H(p') - H(p)`` (a stale KV,
                                                           a perturbed logit), and sharpening
``draft``      ``q(x) - E_p q``, q the draft's law         drift toward the draft's law (a residual
                                                           off, a draft law taken from elsewhere)
``serial``     ``4 (U_t - 1/2)(U_{t-1} - 1/2)``; and the   consecutive tokens of a sample dependent
               same product for the tokens at one           (one uniform shared by a step's drafts);
               position of consecutive samples              samples dependent (a random stream that
                                                           outlives its seed)
``position``   ``uniform``, ``mean`` and ``surprisal``     a bug from some depth on (a KV crop, a
               on positions ``[2^j, 2^(j+1))``             stale page, a sliding window)
``block``      ``uniform`` and ``mean`` by the index of    a bug at one index of the speculative
               the token in its speculative step; the      block (where the engine says its steps);
               product above for a token and the one at    randomness repeated every step (a
               its index in the step before                generator rebuilt from the seed)
``index``      the transform in the ids' order: 8 cells,  a sampler whose uniforms are reused (an
               its mean, and (with steps) its product      inverse CDF over the ids fed the uniform
               with the one at the same index in the       that drew a draft, a generator rebuilt
               step 1, 2, ..., 8 steps before              from the seed every step, or every few
               (:data:`LAGS`)                              steps)
``eos``        ``[x = eos] - p(eos)``; with stop strings,  the end's mass moved (a draft loop that
               ``[x ends the output] - p(the ids that      drops an end-of-sequence draft, or one
               end it)``                                   that completes a stop string; where the
                                                           audit has an end of sequence or stop
                                                           strings)
``ids``        the log of ``w(x) / sum p w``, ``w`` a      mass moved toward some ids at every
               weight per id learned from the tokens       position, the order by probability kept
               before (:mod:`.tilt`)                       (a logit bias, a key masked by its id)
=============  ==========================================  =========================================

:data:`WEIGHTS` gives each family its share of the case's wealth (a family of several bettors
splits its share evenly); a statistic the engine cannot feed (``draft`` without the draft's
law, ``block`` without steps, ``eos`` without an end of sequence) is left out before any sampling
and the shares renormalized (:func:`shares`). The
case's wealth is the weighted average of its bettors' (a test martingale), the audit's the average
over its cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specproof.properties.tokens.eprocess import BinBettor, FactorBettor, MeanBettor
from specproof.properties.tokens.transform import SURPRISAL_CLIP, Observations

#: each statistic's share of a case's wealth (renormalized over those that apply)
WEIGHTS: dict[str, float] = {
    "uniform": 0.15,
    "mean": 0.10,
    "greedy": 0.10,
    "surprisal": 0.20,
    "draft": 0.10,
    "serial": 0.10,
    "position": 0.20,
    "block": 0.05,
    "index": 0.10,
    "eos": 0.10,
    "ids": 0.10,
}
#: what each statistic catches, for the reports
DOCS: dict[str, str] = {
    "uniform": "the transforms' law moved between cells (any direction)",
    "mean": "sharpening (toward likely tokens) or flattening",
    "greedy": "drift toward the argmax",
    "surprisal": "sharpening or flattening of the surprisal",
    "draft": "drift toward the draft's law",
    "serial": "consecutive tokens (of a sample, or at one position of consecutive samples) dependent",
    "position": "a deviation from some position on",
    "block": "a deviation at one index of the speculative block",
    "index": "the transform in the ids' order moved (reused uniforms, within a step or 1 to 8 steps apart)",
    "eos": "the end's mass moved (end of sequence, or a stop string completed)",
    "ids": "mass moved toward some token ids at every position (the order by probability kept)",
}
#: which way a statistic's drift leans, in words: (negative, positive), by the last part of its name
#: (``position[8-16].mean`` reads as ``mean``); cells (``uniform``) have no single direction
_WAYS: dict[str, tuple[str, str]] = {
    "mean": ("toward likely tokens (sharpening)", "toward unlikely tokens (flattening)"),
    "greedy": ("away from the argmax", "toward the argmax"),
    "surprisal": (
        "tokens less surprising than the law says (sharpening)",
        "tokens more surprising than the law says (another law, or flattening)",
    ),
    "draft": ("away from the draft's law", "toward the draft's law"),
    "serial": ("consecutive transforms moving apart", "consecutive transforms moving together"),
    "samples": ("consecutive samples moving apart", "consecutive samples moving together"),
    "repeat": (
        "a step's transforms moving apart from an earlier step's (the step before, or as many steps "
        "before as the brackets say)",
        "a step repeating an earlier step (the step before, or as many steps before as the brackets say)",
    ),
    "eos": (
        "the output ended less often than the law says",
        "the output ended more often than the law says",
    ),
}
_INDEX = ("toward lower token ids", "toward higher token ids")


def direction(statistic: str, drift: float) -> str:
    """Which way ``statistic``'s ``drift`` (its running mean) leans, in words (:data:`DOCS` says what
    it measures; the sign is defined in the module docstring's table)."""
    last = statistic.rsplit(".", 1)[-1].split("[")[0]
    if last == "uniform" or statistic == "index":
        return "mass moved between cells of the transform (no single direction)"
    if statistic == "ids":
        return "toward the ids the engine emitted more often than the laws say"
    if drift == 0:
        return "no lean yet"
    ways = _INDEX if statistic == "index.mean" else _WAYS.get(last)
    if ways is None:
        return "see the statistic"
    return ways[drift > 0]


#: the statistics that run only where the engine or the audit gives what they read, and what is
#: missing where they do not run (the pass line says it)
NOT_FED: dict[str, str] = {
    "draft": "the engine gives no draft law",
    "block": "no steps told, or verification not sequential",
    "eos": "no end of sequence or stop string",
}
OPTIONAL = tuple(NOT_FED)


def shares(draft: bool = False, blocks: bool = False, eos: bool = False) -> dict[str, float]:
    """The weights of the statistics that apply (:data:`WEIGHTS` without the optional ones the
    audit cannot feed), renormalized to sum to 1."""
    fed = {"draft": draft, "block": blocks, "eos": eos}
    use = {k: w for k, w in WEIGHTS.items() if k not in OPTIONAL or fed[k]}
    total = sum(use.values())
    return {k: w / total for k, w in use.items()}


#: the lags, in steps, at which the index transform of a token is multiplied with the one at its
#: index in an earlier step of its sample (``index.repeat`` the step before, ``index.repeat[L]``
#: ``L`` steps before): randomness that repeats every ``L`` steps, for ``L`` up to 8
LAGS = (1, 2, 3, 4, 5, 6, 7, 8)

#: block indices told apart (the last gathers every later index)
BLOCK_INDICES = 4


def position_bins(horizon: int) -> list[tuple[int, int]]:
    """The dyadic bins of 1-based positions up to ``horizon``: [1, 1], [2, 3], [4, 7], ..., the
    last one running to the horizon (never shorter than the one before it)."""
    out, lo = [], 1
    while 4 * lo <= horizon + 1:
        out.append((lo, 2 * lo - 1))
        lo *= 2
    out.append((lo, horizon))
    return out


def _across_samples(u: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """``4 (U - 1/2)(U' - 1/2)`` for each token and the token at its position in the sample before
    it (samples laid end to end, each starting at position 1; pairs only where both have the
    position). Under the null, samples drawn with different seeds are independent: mean 0."""
    starts = np.flatnonzero(pos == 1)
    if len(starts) < 2:
        return np.zeros(0)
    lengths = np.diff(np.append(starts, len(u)))
    sample = np.cumsum(pos == 1) - 1
    t = np.flatnonzero(sample >= 1)
    before = sample[t] - 1
    ok = pos[t] <= lengths[before]
    t = t[ok]
    prev = starts[sample[t] - 1] + pos[t] - 1
    return 4.0 * (u[t] - 0.5) * (u[prev] - 0.5)


def _across_steps(u: np.ndarray, pos: np.ndarray, block: np.ndarray, lag: int = 1) -> np.ndarray:
    """``4 (U - 1/2)(U' - 1/2)`` for each token and the token at its index in the speculative step
    ``lag`` steps before it, in the same sample. Under the null, for an engine whose every token's
    law given everything before it is the target's, the transforms are independent: mean 0."""
    n = len(u)
    starts = np.flatnonzero(block == 0)  # the first token of each step
    if len(starts) < lag + 1:
        return np.zeros(0)
    lengths = np.diff(np.append(starts, n))
    step = np.cumsum(block == 0) - 1
    sample = np.cumsum(pos == 1) - 1
    t = np.flatnonzero(step >= lag)
    before = step[t] - lag
    ok = block[t] < lengths[before]
    t, before = t[ok], before[ok]
    prev = starts[before] + block[t]
    same = sample[prev] == sample[t]
    return 4.0 * (u[t[same]] - 0.5) * (u[prev[same]] - 0.5)


@dataclass
class Bet:
    """One bettor of the family, its share of the case's wealth, and what it watches."""

    name: str  # e.g. "mean", "position[32-63].uniform"
    family: str  # the statistic it belongs to (a key of WEIGHTS)
    weight: float
    bettor: MeanBettor | BinBettor | FactorBettor

    @property
    def log_wealth(self) -> float:
        return self.bettor.log_wealth

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "statistic": self.family,
            "weight": self.weight,
            "log_wealth": self.log_wealth,
            "tokens": self.bettor.n,
            "drift": self.bettor.drift,
        }


@dataclass
class Family:
    """One case's bettors (module docstring)."""

    horizon: int
    draft: bool = False  # the engine tells the draft's law at each position
    eos: bool = False  # the audit has an end of sequence (samples may end on it)
    blocks: bool = False  # the engine tells where each of its steps ends
    bets: list[Bet] = field(default_factory=list)
    tokens: int = 0

    def __post_init__(self) -> None:
        share = shares(self.draft, self.blocks, self.eos)
        self.bets = [
            Bet("uniform", "uniform", share["uniform"], BinBettor()),
            Bet("mean", "mean", share["mean"], MeanBettor(0.5)),
            Bet("greedy", "greedy", share["greedy"], MeanBettor(1.0)),
            Bet("surprisal", "surprisal", share["surprisal"], MeanBettor(SURPRISAL_CLIP)),
            Bet("serial", "serial", share["serial"] / 2, MeanBettor(1.0)),
            Bet("serial.samples", "serial", share["serial"] / 2, MeanBettor(1.0)),
        ]
        if self.draft:
            self.bets.append(Bet("draft", "draft", share["draft"], MeanBettor(1.0)))
        if self.eos:
            self.bets.append(Bet("eos", "eos", share["eos"], MeanBettor(1.0)))
        self.bets.append(Bet("ids", "ids", share["ids"], FactorBettor()))
        parts = 3 if self.blocks else 2
        self.bets.append(Bet("index", "index", share["index"] / parts, BinBettor()))
        self.bets.append(Bet("index.mean", "index", share["index"] / parts, MeanBettor(0.5)))
        if self.blocks:
            for lag in LAGS:
                name = "index.repeat" if lag == 1 else f"index.repeat[{lag}]"
                self.bets.append(Bet(name, "index", share["index"] / parts / len(LAGS), MeanBettor(1.0)))
        bins = position_bins(self.horizon)
        for lo, hi in bins:
            w = share["position"] / (3 * len(bins))
            self.bets.append(Bet(f"position[{lo}-{hi}].uniform", "position", w, BinBettor()))
            self.bets.append(Bet(f"position[{lo}-{hi}].mean", "position", w, MeanBettor(0.5)))
            self.bets.append(Bet(f"position[{lo}-{hi}].surprisal", "position", w, MeanBettor(SURPRISAL_CLIP)))
        if self.blocks:
            w = share["block"] / (2 * BLOCK_INDICES + 1)
            for b in range(BLOCK_INDICES):
                label = f"block[{b}{'+' if b == BLOCK_INDICES - 1 else ''}]"
                self.bets.append(Bet(f"{label}.uniform", "block", w, BinBettor()))
                self.bets.append(Bet(f"{label}.mean", "block", w, MeanBettor(0.5)))
            self.bets.append(Bet("block.repeat", "block", w, MeanBettor(1.0)))
        self._by_name = {b.name: b for b in self.bets}

    def update(
        self,
        obs: Observations,
        positions: np.ndarray | None = None,
        block: np.ndarray | None = None,
    ) -> None:
        """Observations in order: one sample's, or a chunk of samples' laid end to end, with each
        token's 1-based position in its sample (default: one sample, 1..n) and, where the engine
        tells, its index in its speculative step."""
        n = len(obs)
        if not n:
            return
        pos = np.arange(1, n + 1) if positions is None else np.asarray(positions)
        u = obs.u
        get = self._by_name
        get["uniform"].bettor.update(u)
        get["mean"].bettor.update(u - 0.5)
        get["greedy"].bettor.update((u < obs.p_first).astype(np.float64) - obs.p_first)
        get["surprisal"].bettor.update(obs.surprisal - obs.expected_surprisal)
        follows = pos[1:] == pos[:-1] + 1  # consecutive tokens of one sample
        get["serial"].bettor.update((4.0 * (u[1:] - 0.5) * (u[:-1] - 0.5))[follows])
        get["serial.samples"].bettor.update(_across_samples(u, pos))
        if self.draft and obs.q is not None and obs.expected_q is not None:
            get["draft"].bettor.update(obs.q - obs.expected_q)
        if obs.u_id is not None:
            known = ~np.isnan(obs.u_id)  # a censored law hides the smaller ids' mass
            get["index"].bettor.update(obs.u_id[known])
            get["index.mean"].bettor.update(obs.u_id[known] - 0.5)
            if self.blocks and block is not None and known.all():
                for lag in LAGS:
                    name = "index.repeat" if lag == 1 else f"index.repeat[{lag}]"
                    get[name].bettor.update(_across_steps(obs.u_id, pos, np.asarray(block[:n]), lag))
        if self.eos and obs.p_eos is not None and obs.eos_hit is not None:
            known = ~np.isnan(obs.p_eos)  # a censored law that hides the end's mass says nothing of it
            get["eos"].bettor.update((obs.eos_hit.astype(np.float64) - obs.p_eos)[known])
        if obs.ids_log is not None:
            get["ids"].bettor.update(obs.ids_log)
        excess = obs.surprisal - obs.expected_surprisal
        for lo, hi in position_bins(self.horizon):
            sel = (pos >= lo) & (pos <= hi)
            if sel.any():
                get[f"position[{lo}-{hi}].uniform"].bettor.update(u[sel])
                get[f"position[{lo}-{hi}].mean"].bettor.update(u[sel] - 0.5)
                get[f"position[{lo}-{hi}].surprisal"].bettor.update(excess[sel])
        if self.blocks and block is not None:
            idx = np.minimum(np.asarray(block[:n]), BLOCK_INDICES - 1)
            for b in range(BLOCK_INDICES):
                sel = idx == b
                if sel.any():
                    label = f"block[{b}{'+' if b == BLOCK_INDICES - 1 else ''}]"
                    get[f"{label}.uniform"].bettor.update(u[sel])
                    get[f"{label}.mean"].bettor.update(u[sel] - 0.5)
            get["block.repeat"].bettor.update(_across_steps(u, pos, np.asarray(block[:n])))
        self.tokens += n

    @property
    def log_wealth(self) -> float:
        """log of the weighted average of the bettors' wealths."""
        logs = np.array([math.log(b.weight) + b.log_wealth for b in self.bets])
        m = float(logs.max())
        return m + math.log(float(np.exp(logs - m).sum()))

    def leader(self) -> Bet:
        """The bettor whose weighted wealth is largest: the statistic that found a deviation."""
        return max(self.bets, key=lambda b: math.log(b.weight) + b.log_wealth)
