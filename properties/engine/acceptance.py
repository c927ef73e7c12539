"""The acceptance oracle: does the engine accept as many drafts as its declared rule predicts?

A bug can keep the law and lose the speed (drafts from a stale draft KV cache, a vocabulary map
that lowers acceptance): the law tests pass it. An engine that declares its rule
(``acceptance_rule``, :data:`RULES`) and the law its drafts are drawn from (``draft_law``), its
draft length (``draft_tokens``) and its steps (``last_steps`` or a Generation's ``steps``) gets
its acceptance tested against the rule's prediction along the tokens it emitted.

Two rules. ``token_chain``: each step drafts a chain ``x_1 .. x_K`` from the draft law, each ``x_j`` after the
step's context and the drafts before it, and verifies them in turn by token-level rejection
sampling. Given everything before it, draft ``j`` is accepted with probability

    alpha_j = sum_x min(p(x | c_j), q(x | c_j)),

``c_j`` the context the step started from followed by the accepted drafts ``x_1 .. x_{j-1}``
(proofs_notes/acceptance.md). A step that emitted ``e`` tokens accepted ``a = e - 1`` drafts, so it
gives the indicators ``I_j = [j <= a]`` for ``j = 1 .. min(a + 1, K)``, each at a context the
emitted tokens show. Their shortfall ``S = sum (alpha_j - I_j)`` is a sum of increments of mean 0
in a range of width 1, so ``exp(lambda S - n lambda^2 / 8)`` is a supermartingale (Hoeffding's
lemma) and, by Ville's inequality, it exceeds ``1/alpha`` with probability at most ``alpha`` at
any time: the test is valid however the audit stops. ``lambda`` is fixed from the plan before
any sample (``sqrt(8 ln(1/alpha) / n_plan)``). Crossing is ``acceptance_low``.

``greedy_chain`` (llama-server's draft model: the draft is the draft model's argmax chain, each
draft accepted when the target's own sample at its position equals it): draft ``j`` is accepted with
probability ``p(x_j | c_j)``. The drafts are a function of the context, so the steps are read from
the tokens alone (a step after ``pos`` emitted tokens drafts ``min(K, M - pos - leave)``, the
first ``first`` tokens come before any step), and the engine's counters, where it gives them, must
equal that reading: a sample whose counters differ is counted, and the line says the counters
contradict the tokens (or the declared draft law is not the engine's).

What it does not test: acceptance above the prediction (a rule that accepts too much changes the
law, which the law tests see), engines whose steps draft trees or a varying number of tokens, and
requests whose samples may end early (an end of sequence, a stop string): those cases are skipped,
and the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from specproof.properties.engine.axis_acceptance import AxisAcceptance
from specproof.properties.engine.contract import Generation, Seq
from specproof.properties.engine.plugin import Check, Finding
from specproof.properties.verdicts import CheckStatus, Verdict

if TYPE_CHECKING:
    from specproof.properties.engine.audit import EngineAudit
    from specproof.properties.engine.case import EngineCaseResult
    from specproof.properties.engine.runner import CaseRunner

#: the rules whose acceptance the oracle predicts
RULES = ("token_chain", "greedy_chain")


@dataclass(frozen=True)
class Rule:
    """A declared rule: its name, the drafts a step makes at most, and (``greedy_chain``) the
    tokens emitted before the first step and the tokens of the horizon a step leaves undrafted."""

    name: str
    drafts: int
    first: int = 0
    leave: int = 0


#: the share of the audit's alpha the acceptance test spends where it runs
ACCEPTANCE_ALPHA_SHARE = 0.25


@dataclass
class Acceptance:
    """The acceptance test of an audit (module docstring)."""

    rule: str
    alpha: float
    lam: float
    status: CheckStatus = CheckStatus.NOT_RUN  # as_predicted | low | not_run
    why: str = ""  # what was not run, or why
    indicators: int = 0
    accepted: int = 0
    predicted: float = 0.0
    log_wealth: float = 0.0  # lambda * shortfall - n lambda^2 / 8 (its log, now)
    crossed_at: int | None = None  # the indicator at which it crossed ln(1/alpha)
    #: per draft position j: [indicators, accepted, predicted]
    by_position: list[list[float]] = field(default_factory=list)
    #: per case (its name): [indicators, accepted, predicted]
    by_case: dict[str, list[float]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # cases not tested, and why
    without_steps: int = 0  # samples whose steps the engine did not report
    #: greedy_chain: samples whose counters differ from the steps the tokens show, and the first
    contradicted: int = 0
    first_contradiction: dict[str, Any] | None = None

    @property
    def threshold(self) -> float:
        return math.log(1 / self.alpha)

    def detects(self) -> float:
        """The shortfall per indicator the test detects at its indicators so far (wealth reaching
        the threshold at ``n`` indicators)."""
        n = max(self.indicators, 1)
        return (self.threshold + n * self.lam**2 / 8) / (self.lam * n)

    def add(self, j: int, accepted: bool, predicted: float, case: str = "") -> None:
        while len(self.by_position) < j:
            self.by_position.append([0, 0, 0.0])
        for row in (self.by_position[j - 1], self.by_case.setdefault(case, [0, 0, 0.0])):
            row[0] += 1
            row[1] += int(accepted)
            row[2] += predicted
        self.indicators += 1
        self.accepted += int(accepted)
        self.predicted += predicted
        self.log_wealth += self.lam * (predicted - int(accepted)) - self.lam**2 / 8
        if self.crossed_at is None and self.log_wealth >= self.threshold:
            self.crossed_at = self.indicators

    def judge(self) -> None:
        if self.indicators == 0:
            self.status = CheckStatus.NOT_RUN
            if not self.why:
                self.why = (
                    f"the engine reported no steps for {self.without_steps} samples"
                    if self.without_steps
                    else "no draft was verified inside the samples"
                )
        else:
            self.status = CheckStatus.LOW if self.crossed_at is not None else CheckStatus.AS_PREDICTED

    def line(self) -> str:
        if self.status == CheckStatus.NOT_RUN:
            return f"acceptance: NOT TESTED ({self.why})"
        obs, pred = self.accepted / self.indicators, self.predicted / self.indicators
        where = ", ".join(
            f"{j + 1}: {int(a)}/{int(n)} vs {p / n:.3f}" for j, (n, a, p) in enumerate(self.by_position) if n
        )
        head = (
            f"acceptance ({self.rule}): {self.accepted} of {self.indicators} verified drafts accepted "
            f"({obs:.3f}), the rule predicts {pred:.3f} along the emitted tokens"
        )
        if len(self.by_case) > 1:
            head += "; by case: " + "; ".join(
                f"{name}: {int(a)}/{int(n)} vs {p / n:.3f}" for name, (n, a, p) in self.by_case.items() if n
            )
        if self.contradicted:
            f = self.first_contradiction or {}
            head += (
                f"; COUNTERS CONTRADICT THE TOKENS in {self.contradicted} samples (e.g. {f.get('tokens')}: "
                f"drafted/accepted {f.get('counters')} reported, {f.get('read_from_tokens')} by the rule)"
            )
        if self.status == CheckStatus.LOW:
            return (
                f"{head}: LOW (e-value {math.exp(min(self.log_wealth, 700)):.3g} >= 1/alpha = "
                f"{1 / self.alpha:.3g} after {self.crossed_at} drafts; alpha {self.alpha:g}); "
                f"by position: {where}"
            )
        return (
            f"{head}: as predicted (alpha {self.alpha:g}; detects a shortfall of {self.detects():.3g} "
            f"per draft at this size); by position: {where}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "status": self.status,
            "why": self.why,
            "alpha": self.alpha,
            "lambda": self.lam,
            "indicators": self.indicators,
            "accepted": self.accepted,
            "predicted": self.predicted,
            "log_e_value": self.log_wealth,
            "crossed_at": self.crossed_at,
            "detects_shortfall": self.detects() if self.indicators else None,
            "by_case": [
                {"case": name, "drafts": int(n), "accepted": int(a), "predicted": p}
                for name, (n, a, p) in self.by_case.items()
            ],
            "by_position": [
                {"position": j + 1, "drafts": int(n), "accepted": int(a), "predicted": p}
                for j, (n, a, p) in enumerate(self.by_position)
            ],
            "skipped": list(self.skipped),
            "samples_without_steps": self.without_steps,
            "counters_contradicted": self.contradicted,
            "first_contradiction": self.first_contradiction,
        }


def declared(runner: Any) -> Rule | None:
    """The rule a case's engine declares (``acceptance_rule``), checked; None where it declares
    none. A malformed declaration, or one without what it needs (the draft law; the steps, for
    ``token_chain``), is a contract violation (``capabilities``)."""
    from specproof.properties.engine.runner import EngineViolation

    given = runner.optional("acceptance")
    if given is None:
        return None
    fields = dict(given) if isinstance(given, dict) else {}
    try:
        rule = Rule(fields.pop("rule"), **fields)
        ok = rule.name in RULES and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= (1 if f == "drafts" else 0)
            for f, v in (("drafts", rule.drafts), ("first", rule.first), ("leave", rule.leave))
        )
    except (KeyError, TypeError):
        ok = False
    if not ok:
        raise EngineViolation(
            "capabilities",
            f"acceptance_rule must be {{'rule': one of {RULES}, 'drafts': an int >= 1[, 'first': int, "
            f"'leave': int]}}, got {given!r}",
            runner.case,
        )
    need = ("draft_law", "steps") if rule.name == "token_chain" else ("draft_law",)
    missing = [c for c in need if c not in runner.offers]
    if missing:
        raise EngineViolation(
            "capabilities", f"acceptance_rule is declared without {' and '.join(missing)}", runner.case
        )
    return rule


@dataclass
class AcceptanceStart:
    """What an audit tests of acceptance: the oracle of a declared rule (its cases), or the
    comparison across a workload axis, or nothing."""

    oracle: Acceptance | None = None
    axis: AxisAcceptance | None = None
    rule: Rule | None = None
    cases: set[int] = field(default_factory=set)  # the cases the oracle tests

    @property
    def runs(self) -> bool:
        return self.oracle is not None or self.axis is not None


def start_acceptance(runners: Sequence[Any], alpha: float, on_axis: bool) -> AcceptanceStart:
    """The oracle at ``alpha`` where a case's engine declares a rule (the cases of another
    rule, or whose samples may end early, skipped and said); else, on a workload axis of an
    engine with counters, the comparison across it (:mod:`.axis_acceptance`)."""
    found = [(i, declared(rn)) for i, rn in enumerate(runners)]
    rules = {d for _, d in found if d is not None}
    if not rules:
        if on_axis and any("counters" in rn.offers for rn in runners):
            return AcceptanceStart(axis=AxisAcceptance(alpha))
        return AcceptanceStart()
    rule, *more = sorted(rules, key=str)
    oracle = Acceptance(rule.name, alpha, lam=1.0)
    out = AcceptanceStart(oracle, rule=rule)
    for i, d in found:
        name = runners[i].case.name
        if d is None or more:
            oracle.skipped.append(f"{name}: {'no rule declared' if d is None else 'another rule'}")
        elif runners[i].case.sampling.ends:
            oracle.skipped.append(f"{name}: its samples may end early (eos, stop strings)")
        else:
            out.cases.add(i)
    if not out.cases:
        oracle.why = "every case skipped: " + "; ".join(oracle.skipped)
    return out


def plan_lambda(alpha: float, planned_indicators: int) -> float:
    """The bet fixed before any sample: best against the shortfall the plan's size detects."""
    return math.sqrt(8 * math.log(1 / alpha) / max(planned_indicators, 1))


def overlap(p: Any, q: Any) -> float:
    """``sum_x min(p(x), q(x))``: token-level rejection sampling's acceptance probability."""
    return float(np.minimum(np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)).sum())


def fold(acc: Acceptance, runner: Any, g: Generation, rule: Rule) -> None:
    """Add the indicators of sample ``g`` (module docstring); ``runner`` gives the target's law
    after a prefix of the emitted tokens (``law``) and the engine's draft law (``draft_law``)."""
    if rule.name == "greedy_chain":
        _fold_greedy(acc, runner, g, rule)
        return
    k = rule.drafts
    if not g.steps or sum(g.steps) < len(g.tokens):
        acc.without_steps += 1  # the steps do not cover the sample: nothing to read
        return
    tokens: Seq = g.tokens
    prompt = tuple(runner.case.prompt)
    draft_law = runner.optional("draft_law")
    start = 0
    for e in g.steps:
        accepted = e - 1
        for j in range(1, min(accepted + 1, k) + 1):
            at = start + j - 1  # the tokens before draft j: the step's context and its accepted drafts
            if at > len(tokens):
                break
            prefix = tuple(tokens[:at])
            q = draft_law(list(prompt + prefix))
            acc.add(j, j <= accepted, overlap(runner.law(prefix), q), runner.case.name)
        start += e
        if start >= len(tokens):
            break


def _fold_greedy(acc: Acceptance, runner: Any, g: Generation, rule: Rule) -> None:
    """``greedy_chain``: the steps read from the tokens (module docstring), checked against the
    engine's counters."""
    tokens, m = tuple(g.tokens), len(g.tokens)
    prompt = tuple(runner.case.prompt)
    draft_law = runner.optional("draft_law")
    pos, drafted, accepted = min(rule.first, m), 0, 0
    while pos < m:
        k = min(rule.drafts, m - pos - rule.leave)
        if k <= 0:
            pos += 1
            continue
        chain: list[int] = []
        for _ in range(k):
            chain.append(int(np.argmax(np.asarray(draft_law(list(prompt + tokens[:pos] + tuple(chain)))))))
        n = 0
        while n < k and pos + n < m and tokens[pos + n] == chain[n]:
            n += 1
        for j in range(1, min(n + 1, k) + 1):
            if pos + j - 1 >= m:
                break  # the horizon ended before this draft was verified
            prefix = tokens[: pos + j - 1]
            acc.add(j, j <= n, float(runner.law(prefix)[chain[j - 1]]), runner.case.name)
        drafted, accepted, pos = drafted + k, accepted + n, pos + n + 1
    if g.drafted is not None and (g.drafted, g.accepted or 0) != (drafted, accepted):
        acc.contradicted += 1
        if acc.first_contradiction is None:
            acc.first_contradiction = {
                "tokens": list(tokens),
                "counters": [g.drafted, g.accepted or 0],
                "read_from_tokens": [drafted, accepted],
            }


class AcceptanceCheck(Check):
    """Acceptance, where it can be tested (module docstring): the oracle of a declared rule, or,
    on a workload axis that compares acceptance (alone and loaded, cold and warm) of an engine with
    counters, the comparison across it (:mod:`.axis_acceptance`); at
    :data:`ACCEPTANCE_ALPHA_SHARE` of the audit's alpha where either runs."""

    docs = "docs/engine-audit.md#the-acceptance-oracle"
    bug = "stale_after_hit"
    signoff = "acceptance as the rule predicts"
    calibration = "docs/measurements/acceptance-calibration.md"

    name = "acceptance"

    def __init__(self) -> None:
        self.accept = AcceptanceStart()
        self.shares: dict[int, list[float]] = {}  # per case: each sample's accepted share

    def alpha_share(self, audit: EngineAudit) -> float:
        return ACCEPTANCE_ALPHA_SHARE if self.accept.runs else 0.0

    def start(self, audit: EngineAudit) -> None:
        on_axis = any(a.reference(v) for a, values in audit.axes for v in values)
        self.accept = start_acceptance(audit.runners, audit.config.alpha * ACCEPTANCE_ALPHA_SHARE, on_axis)
        audit.result.acceptance, audit.result.axis_acceptance = self.accept.oracle, self.accept.axis

    def planned(self, audit: EngineAudit) -> None:
        acc = audit.result.acceptance
        if acc is not None:
            cases = audit.result.cases
            planned = sum(cases[i].planned for i in self.accept.cases) * audit.spec.tokens // 2
            acc.lam = plan_lambda(acc.alpha, planned)

    def sample(self, audit: EngineAudit, runner: CaseRunner, r: EngineCaseResult, g: Generation) -> None:
        a = self.accept
        if r.case.index in a.cases and a.oracle and a.rule:
            fold(a.oracle, runner, g, a.rule)
        if a.axis is not None and g.drafted:
            self.shares.setdefault(r.case.index, []).append((g.accepted or 0) / g.drafted)

    def findings(self, audit: EngineAudit) -> list[Finding]:
        res = audit.result
        if res.acceptance is not None:
            res.acceptance.judge()
        if res.axis_acceptance is not None and res.axis_acceptance.status == CheckStatus.NOT_RUN:
            reference = {a.name: a for a, _ in audit.axes}

            def is_base(r: EngineCaseResult) -> bool:
                return any(
                    axis.reference(value) for name, value, _, _ in r.case.places for axis in [reference[name]]
                )

            res.axis_acceptance.judge(res.cases, self.shares, is_base)
        out = []
        low = (res.acceptance is not None and res.acceptance.status == CheckStatus.LOW) or (
            res.axis_acceptance is not None and res.axis_acceptance.status == CheckStatus.LOW
        )
        if low:
            out.append(Finding(Verdict.ACCEPTANCE_LOW))
        if res.acceptance is not None and res.acceptance.contradicted:
            out.append(Finding(Verdict.MISREPORTED))
        return out
