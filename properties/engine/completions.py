"""The completions axis of an engine audit: the same cases with one completion a request and with
``n`` (OpenAI's ``n``, llama-server's ``n_cmpl``).

A request for n completions is served by forking one prompt into n sequences: their KV cache, their
draft state and their random streams are split from one request, and the defects of that split
(the completions sharing one generator, a completion drafting from another's state) never show to
an audit that asks for one completion at a time. Its contract: the n completions of a request are
n independent samples of the request's law.

An engine that offers ``at_completions(n)`` (capability ``completions``) gives an engine whose
``generate_many(prompt, M, seeds)`` sends the seeds by consecutive groups of ``n``, one request a
group seeded by the group's first seed (a shorter last group asks for fewer), and returns one
:class:`~specproof.properties.engine.contract.Generation` a seed, completion ``j`` of its request
for the group's ``j``-th seed, with ``choice = j``. With ``EngineSpec.completions`` (``--completions
N``) the audit

* runs every (prompt, setting) case with one completion a request and with N (its sample counts
  rounded up to multiples of N, so every request of the law test is whole), so a deviation of the
  law names its place: "lossy only with 4 completions a request";
* tests, in each case with N, that a request's completions are independent
  (:func:`independence_test`): an exact sign test, at :data:`COMPLETIONS_ALPHA_SHARE` of the
  audit's alpha (Bonferroni over the cases), the law tests sharing the rest;
* checks seed use, the control and the streaming on the one-completion cases only (a request's
  completions are functions of its seed; how a server seeds each is its own).

The test is exact and nothing here is timed. Its proof: proofs_notes/completions.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specproof.properties.engine.contract import EngineSpec, Generation, Seq
from specproof.properties.engine.plugin import Axis, Check, Finding
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError

if TYPE_CHECKING:
    from specproof.properties.engine.audit import EngineAudit
    from specproof.properties.engine.case import EngineCaseResult
    from specproof.properties.engine.runner import CaseRunner

__all__ = [
    "COMPLETIONS_ALPHA_SHARE",
    "CompletionsAxis",
    "CompletionsCheck",
    "MAX_COMPLETIONS",
    "check_completions",
    "CompletionsResult",
    "Independence",
    "completions_name",
    "independence_test",
    "requests_of",
    "sign_test",
]

#: the share of the audit's alpha the independence tests spend when a completions axis is asked
COMPLETIONS_ALPHA_SHARE = 0.25


def completions_name(n: int | None) -> str:
    """How a case's place on the completions axis reads in its name (empty without the axis)."""
    if n is None:
        return ""
    return " with one completion a request" if n == 1 else f" with {n} completions a request"


def requests_of(gens: Sequence[tuple[int | None, Seq]]) -> list[list[Seq]]:
    """(choice, tokens) in sample order, grouped into requests: a request starts at choice 0."""
    out: list[list[Seq]] = []
    for choice, tokens in gens:
        if choice in (None, 0) or not out:
            out.append([])
        out[-1].append(tokens)
    return out


def sign_test(up: int, down: int) -> float:
    """P(X >= up) for X ~ Binomial(up + down, 1/2), exactly (then rounded to a float)."""
    d = up + down
    if up <= 0:
        return 1.0
    tail = sum(math.comb(d, k) for k in range(up, d + 1))
    return tail / 2**d  # integer division to a correctly rounded float, however large d is


@dataclass
class Independence:
    """One case's test that a request's completions are independent (:func:`independence_test`)."""

    case: str
    completions: int
    alpha: float
    requests: int = 0  # whole requests of two completions or more
    pairs: int = 0  # disjoint pairs of consecutive requests compared
    within: int = 0  # pairs whose first completion matches its own request's more often than the other's
    across: int = 0  # pairs where it matches the other request's more often
    pvalue: float = 1.0
    first: dict[str, Any] | None = None  # the first request whose completions 0 and 1 were equal

    @property
    def rejected(self) -> bool:
        return self.pvalue <= self.alpha

    def line(self) -> str:
        head = f"{self.case}: {self.pairs} pairs of requests"
        seen = (
            f"a request's first completion equal to its own others more often than to another "
            f"request's in {self.within}, less often in {self.across} (p = {self.pvalue:.3g}, "
            f"alpha {self.alpha:g})"
        )
        if not self.rejected:
            return f"{head}: independent as far as seen: {seen}"
        where = f"; first: {self.first['completions']}" if self.first else ""
        return f"{head}: NOT INDEPENDENT: {seen}{where}"

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "completions": self.completions,
            "alpha": self.alpha,
            "requests": self.requests,
            "pairs": self.pairs,
            "within": self.within,
            "across": self.across,
            "pvalue": self.pvalue,
            "rejected": self.rejected,
            "first": self.first,
        }


def independence_test(
    gens: Sequence[tuple[int | None, Seq]], alpha: float, case: str, completions: int
) -> Independence:
    """Whether a request's completions are independent draws, from the case's samples in order
    as (choice, tokens). Requests are taken in disjoint consecutive pairs (a, b) of equal size k;
    ``D = sum over j in 1..k-1 of [a[0] == a[j]] - [a[0] == b[j]]``: how much more often the
    first completion of ``a`` equals the other completions of its own request than those of
    ``b``. Where the case's samples are independent draws of one law, swapping ``a[1:]`` with
    ``b[1:]`` leaves the law of the pair unchanged and sends D to -D, so D is symmetric and the
    pairs are independent: among the pairs with D != 0, the count with D > 0 (``within``) is
    Binomial(those pairs, 1/2), and a dependence that makes one request's completions alike more
    often than two requests' is rejected by the exact one-sided sign test
    (proofs_notes/completions.md)."""
    out = Independence(case, completions, alpha)
    whole = [r for r in requests_of(gens) if len(r) >= 2]
    out.requests = len(whole)
    for a, b in zip(whole[0::2], whole[1::2]):
        if len(a) != len(b):
            continue
        out.pairs += 1
        d = sum((a[0] == a[j]) - (a[0] == b[j]) for j in range(1, len(a)))
        if d > 0:
            out.within += 1
            if out.first is None:
                out.first = {"completions": [list(t) for t in a]}
        elif d < 0:
            out.across += 1
    out.pvalue = sign_test(out.within, out.across)
    return out


@dataclass
class CompletionsResult:
    """What the completions axis found: each N-completion case's independence test."""

    completions: int
    tests: list[Independence] = field(default_factory=list)

    @property
    def rejected(self) -> list[Independence]:
        return [t for t in self.tests if t.rejected]

    def factor(self) -> str:
        """ "lossy only with 4 completions a request (...)" where a test rejected."""
        bad = self.rejected
        if not bad:
            return ""
        t = bad[0]
        return (
            f"lossy only with {self.completions} completions a request: its completions are not "
            f"independent ({t.within} of {t.within + t.across} discordant pairs alike within a "
            f"request, p = {t.pvalue:.3g})"
        )

    def lines(self) -> list[str]:
        out = [f"completions: 1 and {self.completions} a request"]
        out += [f"  independence {t.line()}" for t in self.tests]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"completions": self.completions, "tests": [t.to_json() for t in self.tests]}


#: the most completions a request the axis asks for
MAX_COMPLETIONS = 64


def check_completions(n: object, other_axis: bool = False) -> int:
    """The completions a request, checked: an integer in ``[1, MAX_COMPLETIONS]`` (1: no axis),
    and not beside the load or prefix-cache axis (one axis an audit)."""
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_COMPLETIONS:
        raise UsageError(
            f"completions: a number of completions a request in [1, {MAX_COMPLETIONS}], got {n!r}"
        )
    if n > 1 and other_axis:
        raise UsageError(
            "completions: audit the completions axis and the load or prefix-cache axis in two audits"
        )
    return n


def whole_multiple(n: int, k: int) -> int:
    """``n`` rounded up to a multiple of ``k`` (a case's sample count, so its requests are whole)."""
    return -(-n // k) * k


def choices_of(gens: Sequence[Generation]) -> list[tuple[int | None, Seq]]:
    """(choice, tokens) of each generation."""
    return [(g.choice, g.tokens) for g in gens]


class CompletionsAxis(Axis):
    """One completion a request, then ``n`` (``--completions N``): the engine's
    ``at_completions(n)`` (module docstring)."""

    docs = "docs/endpoint-audit.md#several-completions-a-request---completions-n"
    bug = "fork_rows"
    signoff = "several completions of a request are independent samples of the law"
    calibration = "docs/measurements/completions-calibration.md"

    name, capability, attr, option = "completions", "completions", "at_completions", "completions"
    why = "it cannot be asked for several completions a request (a served engine can)"

    def values(self, spec: EngineSpec) -> tuple[Any, ...]:
        n = check_completions(spec.completions)
        return (1, n) if n > 1 else ()

    def exclusive(self, asked: Sequence[Axis]) -> None:
        if any(a is not self for a in asked):
            check_completions(2, other_axis=True)

    def suffix(self, value: Any) -> str:
        return completions_name(value)

    def args(self, value: Any) -> tuple[Any, ...] | None:
        return (value,) if value > 1 else None

    def base(self, value: Any, values: tuple[Any, ...]) -> bool:
        return bool(value == 1)

    def single(self, value: Any) -> bool:
        return bool(value == 1)

    def schedule(self, value: Any, planned: int, looks: list[int]) -> tuple[int, list[int]]:
        if value <= 1:
            return planned, looks
        # every request of the law test whole: ``value`` completions each
        return whole_multiple(planned, value), sorted({whole_multiple(x, value) for x in looks})


class CompletionsCheck(Check):
    """The completions axis's check: in each case with n completions a request, that a request's
    completions are independent (:func:`independence_test`), Bonferroni over those cases, at
    :data:`COMPLETIONS_ALPHA_SHARE` of the audit's alpha."""

    docs = "docs/endpoint-audit.md#several-completions-a-request---completions-n"
    bug = "shared_choices"
    signoff = "several completions of a request are independent samples of the law"
    calibration = "docs/measurements/completions-calibration.md"

    name = "completions"

    def __init__(self) -> None:
        #: per case with n completions a request: (choice, tokens) of each sample, in order
        self.choices: dict[int, list[tuple[int | None, Seq]]] = {}

    def alpha_share(self, audit: EngineAudit) -> float:
        return COMPLETIONS_ALPHA_SHARE if audit.values("completions") else 0.0

    def start(self, audit: EngineAudit) -> None:
        values = audit.values("completions")
        if values:
            audit.result.completions = CompletionsResult(max(values))

    def sample(self, audit: EngineAudit, runner: CaseRunner, r: EngineCaseResult, g: Generation) -> None:
        if (r.case.completions or 1) > 1:
            self.choices.setdefault(r.case.index, []).append((g.choice, g.tokens))

    def run(self, audit: EngineAudit) -> None:
        out = audit.result.completions
        if out is None:
            return
        cases = [r for r in audit.result.cases if (r.case.completions or 1) > 1]
        alpha = audit.config.alpha * COMPLETIONS_ALPHA_SHARE / max(1, len(cases))
        for r in cases:
            seen = self.choices.get(r.case.index, [])
            out.tests.append(independence_test(seen, alpha, r.case.name, out.completions))

    def findings(self, audit: EngineAudit) -> list[Finding]:
        out = audit.result.completions
        if out is None or not out.rejected:
            return []
        return [Finding(Verdict.LOSSY, factor=out.factor())]
