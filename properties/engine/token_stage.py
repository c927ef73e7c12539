"""The engine audit's token test (:mod:`specproof.properties.tokens`), fed from its cases.

Each chunk of a case's samples is scored as soon as it is drawn: for every sample the laws along
its path (the engine's ``target_laws_along`` in one call where it offers teacher forcing, else one
``target_law`` a prefix), its tokens up to and including its end of sequence, the index of each
token in its speculative step where the engine tells its steps *and* declares its verification
sequential (the law of each token given everything the engine did before it is the target's:
token-level and tree rejection sampling; block verification decides a block at once, so the index
of a token in it is not a function of the past), and the draft's law where the engine tells it.
The audit's wealth is looked at after every chunk: it may stop at any of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specproof.properties.engine.contract import Generation, Seq
from specproof.properties.engine.runner import CaseRunner, EngineViolation
from specproof.properties.tokens import power
from specproof.properties.tokens.case import Sample, TokenCase, TokenTest
from specproof.properties.tokens.streams import uniforms
from specproof.properties.tokens.transform import Observations, RowNotALaw


def block_indices(steps: tuple[int, ...] | None, m: int) -> np.ndarray | None:
    """Each of the first ``m`` tokens' index in its step, from the tokens emitted per step."""
    if not steps:
        return None
    emitted = np.asarray(steps, dtype=np.int64)
    emitted = emitted[emitted > 0]
    total = int(emitted.sum())
    if total < m:  # steps that do not cover the horizon say nothing reliable
        return None
    # each token's place in the run of its step: its index less its step's first index
    return (np.arange(total) - np.repeat(np.cumsum(emitted) - emitted, emitted))[:m]


#: samples per update of a case's bettors: the family is fed in blocks of this many samples by
#: index (and at the plan's looks), whoever drew them and in whatever chunks, so the reading is
#: the same to the last bit on one process or many workers
BLOCK = 64


#: the share of samples whose laws read along their path (``target_laws_along``) are checked at one
#: position drawn from the seed against the law read at that prefix alone (``target_law``)
FORCING_SHARE = 1 / 8
#: the largest total variation between the two reads of one law that is rounding: above it the
#: engine's two paths to its law disagree (float32 rounding stays below 1e-5)
FORCING_TOLERANCE = 1e-3


@dataclass
class ForcingCheck:
    """Teacher forcing against the law read one prefix at a time. An engine's laws along a path
    (one forward over prompt and output, the multi-query kernels that verification runs too) are
    checked, on :data:`FORCING_SHARE` of the samples at one position each (both drawn from the
    audit's seed, the case and the sample's index), against ``target_law`` at that prefix; a
    total variation above :data:`FORCING_TOLERANCE` is a contract violation
    (``teacher_forcing_differs``) naming the position: the token test would compare the engine with
    a path that shares its fault (proofs_notes/token_audit.md, claim 8)."""

    checked: int = 0
    largest: float = 0.0

    @staticmethod
    def position(seed: int, key: tuple[int, ...], length: int) -> int | None:
        """Where a path of ``length`` laws keyed ``key`` is checked (drawn from the seed and the
        key alone: fixed by the plan), or None on the samples left unchecked."""
        k = [abs(int(seed)), *key, 0x7EAC]
        if uniforms(k, 1)[0] >= FORCING_SHARE:  # numpy's default_rng(k).random(), cheaper
            return None
        rng = np.random.default_rng(k)
        rng.random()  # the draw just read: the position is the generator's next
        return int(rng.integers(length))

    def differs(self, along: np.ndarray, alone: np.ndarray) -> float | None:
        """Count one check of a row read along a path (normalized here) against the law read at
        its prefix alone: their total variation where it is above :data:`FORCING_TOLERANCE`."""
        row = np.asarray(along, dtype=np.float64)
        tv = 0.5 * float(np.abs(row / row.sum() - np.asarray(alone, dtype=np.float64)).sum())
        self.checked += 1
        self.largest = max(self.largest, tv)
        return tv if tv > FORCING_TOLERANCE else None

    def check(self, runner: CaseRunner, index: int, seq: Seq, laws: np.ndarray, seed: int) -> None:
        if not len(laws) or not runner.reads_along():
            return
        d = self.position(seed, (runner.case.index, index), len(laws))
        if d is None:
            return
        row = np.asarray(laws[d], dtype=np.float64)
        if not (abs(float(row.sum()) - 1) <= 1e-6 and row.min() >= 0):
            return  # not a law: the scoring names it
        tv = self.differs(row, runner.law_alone(tuple(seq[:d])))
        if tv is not None:
            along, alone = runner.along_names
            raise EngineViolation(
                "teacher_forcing_differs",
                f"{along} after {list(runner.case.prompt + tuple(seq[:d]))} (position {d + 1} of "
                f"sample {index}) differs from {alone} there by TV {tv:.3g} (tolerance "
                f"{FORCING_TOLERANCE:g}): "
                "the law read along the path and the law read at the prefix alone disagree",
                runner.case,
            )

    def to_json(self) -> dict[str, Any]:
        return {"checked": self.checked, "largest_tv": self.largest, "tolerance": FORCING_TOLERANCE}


@dataclass
class TokenStage:
    """The token test of one engine audit (module docstring)."""

    test: TokenTest
    cases: dict[int, TokenCase]
    blocks: dict[int, bool]
    pending: dict[int, list[Observations]] = field(default_factory=dict)
    forcing: ForcingCheck = field(default_factory=ForcingCheck)

    @classmethod
    def start(cls, runners: list[CaseRunner], alpha: float, seed: int, pooled: bool = True) -> TokenStage:
        """The stage over ``runners``' cases; ``pooled``: with several cases, half the wealth on
        one family fed every case's tokens, the plan shared among them (:class:`TokenTest`)."""
        test = TokenTest(alpha, seed)
        cases, blocks = {}, {}
        for rn in runners:
            i = rn.case.index
            blocks[i] = "steps" in rn.offers and "sequential" in rn.offers
            cases[i] = test.add_case(
                i,
                rn.case.tokens,
                draft="draft_law" in rn.offers,
                blocks=blocks[i],
                eos=rn.eos,
                stops=rn.stops,
            )
        if pooled:
            test.pool()
        return cls(test, cases, blocks)

    def plan_tokens(self, tv: float, alpha: float, power_: float) -> int:
        """Tokens per case the plan asks for (:func:`.power.plan_tokens`, at the family the cases
        have: the weights of a family without ``draft`` or ``block`` are shared among the rest)."""
        draft = any(c.family.draft for c in self.cases.values())
        blocks = any(self.blocks.values())
        eos = any(c.family.eos for c in self.cases.values())
        pooled = self.test.pooled is not None
        return power.plan_tokens(tv, alpha, power_, len(self.cases), draft, blocks, pooled, eos)

    def add(self, runner: CaseRunner, index: int, g: Generation) -> bool:
        """Sample ``index`` of ``runner``'s case (samples come in index order); its laws are read
        now. Scored in blocks of :data:`BLOCK`; True when a block was scored and the audit's
        wealth crossed its threshold (the audit stops there)."""
        m = runner.horizon(g.tokens)
        laws = runner.laws_along(g.tokens, checked=False)  # each row checked as it is scored
        self.forcing.check(runner, index, g.tokens, laws, self.test.seed)
        sample = Sample(
            index,
            tuple(g.tokens[:m]),
            laws,
            block_indices(g.steps, m) if self.blocks[runner.case.index] else None,
            runner.draft_laws_along(g.tokens, checked=False),
            runner.endings(g.tokens),
        )
        case = self.cases[runner.case.index]
        pending = self.pending.setdefault(runner.case.index, [])
        try:
            pending.append(self.test.observe(case, sample))  # scored now: only the numbers are kept
        except RowNotALaw as e:
            raise _violation(runner, g, e) from e
        if len(pending) < BLOCK and case.impossible is None:
            return False
        return self.flush(runner.case.index)

    def seen(self, case: int) -> int:
        """Tokens of ``case`` scored so far, those pending their block included."""
        return self.cases[case].tokens + sum(len(o) for o in self.pending.get(case, ()))

    def flush(self, case: int) -> bool:
        """Score what is pending for ``case`` (at a block, a look, or the end); True when the
        audit's wealth has crossed its threshold."""
        pending = self.pending.pop(case, [])
        if pending:
            self.test.update(self.cases[case], pending)
        return self.test.rejected

    def detects(self, index: int, alpha: float, power_: float) -> dict[str, float]:
        """The per-token TV each planned statistic detects at the tokens the case has seen, in
        that case's own family (a deviation confined to it)."""
        case = self.cases[index]
        w = power.shares(case.family.draft, case.family.blocks, case.family.eos)
        share = self._share("case")
        return {
            s: power.detectable(s, case.tokens, alpha, power_, len(self.cases), w, share)
            for s in ("mean", "greedy", "uniform")
        }

    def _share(self, family: str) -> float:
        return power.family_share(len(self.cases), self.test.pooled is not None, family)

    def alone_detects(self, tokens: int, alpha: float, power_: float) -> dict[str, float]:
        """What one case's own family detects at ``tokens`` of its tokens (a deviation confined to
        that case, as the plan states it)."""
        draft = all(c.family.draft for c in self.cases.values())
        w = power.shares(draft, all(self.blocks.values()), all(c.family.eos for c in self.cases.values()))
        share = self._share("case")
        return {
            s: power.detectable(s, tokens, alpha, power_, len(self.cases), w, share)
            for s in ("mean", "greedy")
        }

    def probe(self, runner: CaseRunner, g: Generation) -> None:
        """Read and score one sample as :meth:`add` does, feeding nothing (the plan's probe)."""
        m = runner.horizon(g.tokens)
        scratch = TokenTest(self.test.alpha, self.test.seed)
        case = scratch.add_case(
            runner.case.index,
            runner.case.tokens,
            draft="draft_law" in runner.offers,
            eos=runner.eos,
            stops=runner.stops,
        )
        laws = runner.laws_along(g.tokens, checked=False)
        drafts = runner.draft_laws_along(g.tokens, checked=False)
        try:
            sample = Sample(10**9, tuple(g.tokens[:m]), laws, None, drafts, runner.endings(g.tokens))
            scratch.observe(case, sample)
        except RowNotALaw as e:
            raise _violation(runner, g, e) from e

    def pooled_detects(self, alpha: float, power_: float) -> dict[str, float]:
        """The per-token TV each planned statistic of the pooled family detects at every case's
        tokens together (a deviation shared by every case); empty for a single case."""
        fam = self.test.pooled
        if fam is None:
            return {}
        w = power.shares(fam.draft, fam.blocks, fam.eos)
        share = self._share("pooled")
        return {
            s: power.detectable(s, fam.tokens, alpha, power_, len(self.cases), w, share)
            for s in ("mean", "greedy", "uniform")
        }

    def to_json(self) -> dict[str, Any]:
        t = self.test
        return {
            "alpha": t.alpha,
            "log_wealth": t.log_wealth,
            "threshold": float(np.log(1 / t.alpha)),
            "rejected": t.rejected,
            "pvalue": t.pvalue(),
            "finding": t.finding(),
            "cases": {str(i): c.to_json() for i, c in self.cases.items()},
            **t.to_json(),
            **({"teacher_forcing_checked": self.forcing.to_json()} if self.forcing.checked else {}),
        }


def _violation(runner: CaseRunner, g: Generation, e: RowNotALaw) -> Exception:
    """The contract violation a law along ``g`` that is not a law is, naming where it came from."""
    what = runner.draft_source
    if e.which == "laws":
        what = "target_laws_along" if "teacher_forcing" in runner.offers else "target_law"
    return runner.not_a_law(what, g.tokens, e.row, e.total)


def plan_detects(tokens: int, alpha: float, power_: float, cases: int, pooled: bool = False) -> float:
    """The TV the ``uniform`` statistic detects on its cells after ``tokens`` tokens (of a case;
    of every case together, in the pooled family, where it is ``pooled``)."""
    share = power.family_share(cases, pooled, "pooled" if pooled else "case")
    return power.detectable("uniform", tokens, alpha, power_, cases, power.shares(False, False), share)


def plan_limit(tv: float, alpha: float, power_: float) -> int:
    """The information limit of the plan's deviation (the ``mean`` statistic's reference)."""
    return power.information_limit("mean", tv, alpha, power_)
