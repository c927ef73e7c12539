"""The workload axis of an engine audit: the same cases alone and with N requests in flight.

A server batches the requests it has in flight, and the bugs that live there (a draft-probability
row taken from another request of the batch, a seed ignored while another request runs, seeded
and unseeded requests sharing one generator) never show to an audit that sends one kind of
request to a quiet server. An engine that offers ``at_load(level)`` (capability ``load``) gives,
per level, an engine whose calls run with ``level`` requests in flight: at 1 each request alone;
above, the case's requests share the server with *background* requests the engine makes itself
(other prompts and lengths, other settings, seeded and unseeded), which it returns, with the laws
along their paths, from ``background()`` (capability ``background``).

With ``EngineSpec.loads`` (``--load N``, repeatable) the audit

* runs every (prompt, setting) case once per level, so a deviation names its level and the verdict
  says "lossy only with 8 in flight" where the same prompt and setting held at the other levels
  (:func:`only_at`);
* checks seed use per level (:class:`LoadSeeds`): each of ``report_samples`` seeds is drawn twice,
  in two calls with other requests beside it; a sample is a function of its seed alone (the
  contract), so a seed that gives two outputs is a contract violation
  (``nondeterministic_under_load``) whether or not the law holds;
* scores the background requests' tokens with the token test against their own laws
  (:func:`background_test`, the recorded-traffic audit's test: a lossless server's every token is a
  draw of its law given its past, whoever asked for it; proofs_notes/token_audit.md), at a quarter
  of the audit's alpha (:data:`BACKGROUND_ALPHA_SHARE`), the law tests of the cases sharing the
  rest.

The checks here are exact or the token test's; none is timed (the levels are counts of requests,
never of seconds), so a verdict is fixed by the plan and the seed, with one caveat said in the
report: which requests a server batches together is the server's scheduling, so a fault that
lives only in some batches can show in one run and not the next.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specproof.properties.engine.config import MAX_LOAD, EngineAuditConfig, check_loads
from specproof.properties.engine.contract import EngineSpec, EngineUnavailable, Seq
from specproof.properties.engine.plugin import Axis, Check, Finding
from specproof.properties.engine.runner import CaseRunner, sample_seed
from specproof.properties.verdicts import Verdict

if TYPE_CHECKING:
    from specproof.properties.engine.audit import EngineAudit

__all__ = [
    "BACKGROUND_ALPHA_SHARE",
    "MAX_LOAD",
    "LoadAxis",
    "LoadCheck",
    "LoadResult",
    "LoadSeeds",
    "background_test",
    "load_checks",
    "load_violation",
    "check_loads",
    "level_name",
]

#: the share of the audit's alpha the background requests' token test spends when loads are asked
BACKGROUND_ALPHA_SHARE = 0.25


def level_name(level: int | None) -> str:
    """How a case's load level reads in its name (empty without a load axis)."""
    if level is None:
        return ""
    return " alone" if level == 1 else f" with {level} in flight"


class LoadAxis(Axis):
    """Every case at each number of requests in flight asked (``--load N``, repeatable): the engine's
    ``at_load(level)``."""

    docs = "docs/endpoint-audit.md#under-load---load-1---load-8"
    bug = "batch_rows"
    signoff = "the same law alone and at production concurrency"
    calibration = "docs/measurements/load-calibration.md"

    name, capability, attr, option = "load", "load", "at_load", "loads"
    why = "it cannot be audited with a given number of requests in flight (a served engine can)"
    extra_requests = "the load axis's background requests draft too"

    def values(self, spec: EngineSpec) -> tuple[Any, ...]:
        return check_loads(spec.loads)

    def exclusive(self, asked: Sequence[Axis]) -> None:
        return None  # the axes asked beside it refuse it themselves

    def suffix(self, value: Any) -> str:
        return level_name(value)

    def base(self, value: Any, values: tuple[Any, ...]) -> bool:
        return bool(value == min(values))

    def reference(self, value: Any) -> bool:
        return bool(value == 1)


@dataclass
class LoadSeeds:
    """Seed use at one level: seeds drawn twice, and those whose two outputs differ."""

    level: int
    case: str = ""
    seeds: int = 0
    differing: int = 0
    first: dict[str, Any] | None = None  # the first seed that gave two outputs

    def add(self, seed: int, a: Seq, b: Seq) -> None:
        self.seeds += 1
        if a != b:
            self.differing += 1
            if self.first is None:
                self.first = {"seed": seed, "outputs": [list(a), list(b)]}

    def line(self) -> str:
        where = level_name(self.level).strip()
        if not self.differing:
            return f"{where}: {self.seeds} seeds drawn twice, each gave one output"
        f = self.first or {}
        return (
            f"{where}: {self.differing} of {self.seeds} seeds gave two different outputs (seed "
            f"{f.get('seed')}: {f.get('outputs', [[], []])[0]} and {f.get('outputs', [[], []])[1]})"
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class LoadResult:
    """What the load axis found: seed use per level, the background requests' token test."""

    levels: tuple[int, ...]
    seeds: list[LoadSeeds] = field(default_factory=list)
    background: dict[str, Any] | None = None  # the token test of the background requests
    background_text: str = ""  # its verdict in a line
    background_lossy: bool = False
    stopped: str | None = None  # why a check stopped before its end

    @property
    def violation(self) -> LoadSeeds | None:
        """The level whose seeds gave two outputs, first (the contract violation under load)."""
        bad = [s for s in self.seeds if s.differing]
        return bad[0] if bad else None

    def lines(self) -> list[str]:
        out = [f"load: levels {', '.join(map(str, self.levels))} (requests in flight)"]
        out += [f"  seed use {s.line()}" for s in self.seeds]
        if self.background_text:
            out.append(f"  background requests: {self.background_text}")
        if self.stopped:
            out.append(f"  NOT CHECKED to the end: {self.stopped}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "levels": list(self.levels),
            "seeds": [s.to_json() for s in self.seeds],
            "background": self.background,
            "background_text": self.background_text,
            "background_lossy": self.background_lossy,
            "stopped": self.stopped,
        }


LawsAlong = Callable[[Seq, Seq, Any], Any]


def load_checks(
    runners: Sequence[CaseRunner],
    config: EngineAuditConfig,
    vocab: int,
    load: LoadResult,
    say: Callable[[str, float], None],
) -> None:
    """Seed use at each level on the first prompt and setting (each of ``report_samples`` seeds
    drawn twice, in two calls with other requests beside them), then the background requests'
    token test; what they find goes into ``load``."""
    first = runners[0].case if runners else None
    for rn in runners:
        case = rn.case
        if (
            first is None
            or (case.prompt, case.sampling) != (first.prompt, first.sampling)
            or case.load is None
        ):
            continue
        seeds = [sample_seed(config.seed, case.index, 5 * 10**6 + j) for j in range(config.report_samples)]
        say(f"seed use {case.name}", 1.0)
        got = LoadSeeds(case.load, case.name)
        try:
            a, b = rn.draw(seeds), rn.draw(seeds[::-1])[::-1]  # two calls, other requests beside
        except EngineUnavailable as e:
            load.stopped = f"seed use {case.name}: {e.detail}"
            return
        for s, x, y in zip(seeds, a, b):
            got.add(s, x.tokens, y.tokens)
        load.seeds.append(got)
    records: list[Any] = []
    laws = None
    for rn in runners:
        bg = rn.optional("background")
        if bg is not None:
            recs, laws = bg()
            records.extend(recs)
    if not records or laws is None:
        load.background_text = "none sent (no case ran above 1 in flight)"
        return
    say("background requests", 1.0)
    try:
        out = background_test(records, laws, vocab, config)
    except EngineUnavailable as e:
        load.stopped = f"the background requests' laws: {e.detail}"
        return
    load.background = out.to_json()
    adapted = sum(1 for r in records if getattr(r, "adapter", ()))
    load.background["with_adapters"] = adapted
    load.background_lossy = out.verdict == Verdict.LOSSY
    detects = min((s["detects"]["mean"] for s in out.settings), default=1.0)
    text = (
        f"{out.verdict.value}: {out.records:,} requests, {out.tokens:,} tokens scored by the token test "
        f"(alpha {config.alpha * BACKGROUND_ALPHA_SHARE:g}); detects a per-token TV of {detects:.3g} "
        "(sharpening) in its best-served setting"
    )
    if adapted:
        text += f"; {adapted:,} of them asked a LoRA adapter at another scale than the audit's requests"
    if out.finding is not None:
        text += f"; witness: {out.finding['text']}"
    load.background_text = text


def load_violation(seeds: LoadSeeds) -> dict[str, object]:
    """The contract violation a level's seed check found (kind ``nondeterministic_under_load``)."""
    return {
        "kind": "nondeterministic_under_load",
        "detail": (
            f"a seed gave two outputs {seeds.line().split(': ', 1)[1]}; a sample must be a function of "
            "its seed alone, whatever else is in flight"
        ),
        "case": seeds.case,
        "stage": "checks",
    }


def background_test(records: Sequence[Any], laws: LawsAlong, vocab: int, config: EngineAuditConfig) -> Any:
    """The token test of the background requests' records (:func:`audit_traffic`), at
    :data:`BACKGROUND_ALPHA_SHARE` of ``config.alpha``."""
    from specproof.properties.engine.traffic import audit_traffic

    share = dataclasses.replace(config, alpha=config.alpha * BACKGROUND_ALPHA_SHARE)
    return audit_traffic(records, laws, vocab, share, source="background requests")


class LoadCheck(Check):
    """The load axis's checks (module docstring): seed use per level and the background requests'
    token test, at :data:`BACKGROUND_ALPHA_SHARE` of the audit's alpha where loads are asked."""

    docs = "docs/endpoint-audit.md#under-load---load-1---load-8"
    bug = "seed_in_flight"
    signoff = "seeds are honoured with other requests in flight"
    calibration = "docs/measurements/load-calibration.md"

    name = "load"

    def alpha_share(self, audit: EngineAudit) -> float:
        return BACKGROUND_ALPHA_SHARE if audit.values("load") else 0.0

    def start(self, audit: EngineAudit) -> None:
        levels = audit.values("load")
        if levels:
            audit.result.load = LoadResult(levels)

    def run(self, audit: EngineAudit) -> None:
        res = audit.result
        if res.load is not None and not res.fault:
            load_checks(audit.runners, audit.config, audit.spec.vocab, res.load, audit.say)

    def findings(self, audit: EngineAudit) -> list[Finding]:
        load = audit.result.load
        if load is None:
            return []
        out = []
        if load.background_lossy:
            out.append(Finding(Verdict.LOSSY))
        if load.violation is not None:
            out.append(Finding(Verdict.CONTRACT_VIOLATION, violation=load_violation(load.violation)))
        return out
