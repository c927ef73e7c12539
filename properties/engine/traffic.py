"""Recorded traffic, audited: what a server actually served, scored token by token against its
twin's laws, no seeds needed.

A deployer samples production requests and writes one JSON object a line::

    {"prompt": [1, 2, 3], "tokens": [7, 0, 4, ...], "sampling": {"temperature": 0.7, "top_k": 40}}

(``sampling`` takes :class:`~specproof.reference.sampling.Sampling`'s fields, temperature 1
when left out; ``steps``, the tokens each speculative step emitted, where the server told them;
``lora``, the LoRA adapter scales the request asked for, ``[{"id": 0, "scale": 0.5}]``, its laws
then read with the same scales; ``finish_reason``, how the output ended, ``"stop"`` or
``"length"`` as an OpenAI-style answer says it).
:func:`audit_traffic` reads the laws along every recorded path from the twin (the same model
served with speculation off, by its family's recipe, or from an engine's own ``target_law``) and
feeds the token test (:mod:`specproof.properties.tokens`), one case per distinct setting, in the
file's order. The token test needs no prefix to repeat and no seed: a record is one draw of the
server's law, and under a lossless server every token's transform is uniform given its past
(proofs_notes/token_audit.md). The verdict is ``lossy`` when the wealth crosses ``1/alpha`` (the
record, position and statistic named), ``pass`` when the traffic held the tokens the plan asks for
per setting without a deviation, ``underpowered`` when it held fewer (the TV they do vouch for is
stated).

Where a setting names an end of sequence (``eos``) or stop strings and each of its records says how
it ended (``finish_reason``), the token test scores the stopping event too (the ``eos``
statistic: the output ended at a position against the law's mass on the ids that would have ended
it there). A record ``"stop"`` whose tokens
leave the end of sequence out (as servers return them) is scored with it put back. Where some
record does not say, the event is not scored for that setting (a record that ended on a left-out
end of sequence would read as one that went on, biasing the statistic): the setting's entry says
which records did not say. Whether the event is scored is read from the records' fields alone,
never from their tokens: a choice made on the outcomes would bias it too.

Where the laws are read along a whole path in one request (teacher forcing: a twin's prompt
log-probabilities, a forced path) and the laws' reader can also read one law at a prefix alone
(:class:`~specproof.properties.endpoint.traffic.TwinLaws`), one record in eight is checked at one
position (both drawn from the plan's seed and the record's place in the file) against that read,
as the engine audit does while sampling (proofs_notes/token_audit.md, claim 8): a total variation
above the tolerance is ``contract_violation`` (``teacher_forcing_differs``), naming the record's
line and position, since the token test would score the served tokens against a wrong law.
"""

from __future__ import annotations

import inspect
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from specproof.properties.engine.config import EngineAuditConfig, check_adapter
from specproof.properties.engine.endings import Endings
from specproof.properties.engine.token_stage import FORCING_TOLERANCE, ForcingCheck
from specproof.properties.tokens import power
from specproof.properties.tokens.case import Sample, TokenTest
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import SpecproofInputError, UsageError
from specproof.reference.sampling import Sampling

#: laws along a path: (prompt, tokens, setting) -> [len(tokens), V]
LawsAlong = Callable[[tuple[int, ...], tuple[int, ...], Sampling], np.ndarray]
SAMPLING_FIELDS = {f.name for f in fields(Sampling)} - {"extra", "grammar"}
#: how a record's output ended (its ``finish_reason``, as OpenAI-style answers name it)
FINISH_REASONS = ("stop", "length")


@dataclass(frozen=True)
class Record:
    """One served request: its prompt, the tokens served, the setting, the steps where told."""

    line: int
    prompt: tuple[int, ...]
    tokens: tuple[int, ...]
    sampling: Sampling
    steps: tuple[int, ...] | None = None
    #: the LoRA adapter scales it asked for, (id, scale) each (a server's; empty: its defaults)
    adapter: tuple[tuple[int, float], ...] = ()
    #: how its output ended, where the record says (``finish_reason``): "stop" or "length"
    finish: str | None = None

    def ended(self) -> tuple[int, ...] | None:
        """The tokens the stopping event is scored over (with a left-out end of sequence put back
        where the record says it stopped), or None where the record does not say how it ended.
        A record whose words and tokens disagree is a usage error naming its line."""
        s, where = self.sampling, f"line {self.line}: finish_reason"
        try:
            end = s.end(self.tokens) if s.ends else None
        except SpecproofInputError as e:
            raise UsageError(f"line {self.line}: tokens: {e}") from e
        if end is not None and end < len(self.tokens):
            if self.finish is None:
                return None  # tokens past the output's end: the event cannot be read
            raise UsageError(
                f"{where}: {self.finish!r}, yet the output ends at token {end} of {len(self.tokens)} (its "
                "end of sequence or a stop string) and the record goes on"
            )
        if self.finish is None:
            return None  # not said: whether it ended is read from no outcome (a predictable choice)
        if self.finish == "length":
            if end is not None:
                raise UsageError(f"{where}: 'length', yet token {end} ends the output")
            return self.tokens
        if end is not None:
            return self.tokens
        if s.eos is not None:
            return self.tokens + (s.eos,)  # the server left the end of sequence out of its tokens
        if s.stop:
            raise UsageError(
                f"{where}: 'stop', yet no token completes a stop string of {list(s.stop)} and the "
                "setting names no end of sequence: record the token that completed it"
            )
        return None  # the server stopped on an end the setting does not name: the event unscored


def _tuples(value: Any) -> Any:
    """JSON lists as the tuples a Sampling holds (logit bias pairs, bad words)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _record(line: int, obj: Any, vocab: int) -> Record:
    where = f"line {line}"
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: expected a JSON object with prompt and tokens")
    try:
        prompt = tuple(int(x) for x in obj["prompt"])
        tokens = tuple(int(x) for x in obj["tokens"])
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"{where}: prompt and tokens must be lists of token ids ({e})") from e
    if not prompt:
        raise UsageError(f"{where}: an empty prompt")
    bad = [x for x in prompt + tokens if not 0 <= x < vocab]
    if bad:
        raise UsageError(f"{where}: id {bad[0]} outside the vocabulary [0, {vocab})")
    given = obj.get("sampling") or {}
    unknown = sorted(set(given) - SAMPLING_FIELDS)
    if unknown:
        raise UsageError(f"{where}: {unknown[0]!r} is not a sampling parameter")
    try:
        sampling = Sampling(**{k: _tuples(v) for k, v in given.items()})
    except (TypeError, ValueError) as e:
        raise UsageError(f"{where}: sampling: {e}") from e
    steps = obj.get("steps")
    finish = obj.get("finish_reason")
    if finish is not None and finish not in FINISH_REASONS:
        raise UsageError(f"{where}: finish_reason {finish!r}: expected one of {list(FINISH_REASONS)}")
    return Record(
        line,
        prompt,
        tokens,
        sampling,
        None if steps is None else tuple(int(x) for x in steps),
        _lora(where, obj.get("lora")),
        finish,
    )


def _lora(where: str, value: Any) -> tuple[tuple[int, float], ...]:
    """A record's ``lora`` field (the LoRA adapter scales its request asked for, llama-server's
    shape: ``[{"id": 0, "scale": 0.5}]``) as (id, scale) pairs; absent: none named."""
    if value is None:
        return ()
    try:
        if not isinstance(value, list):
            raise UsageError(f"expected a list of {{id, scale}} objects, got {value!r}")
        pairs = [(entry["id"], entry["scale"]) for entry in value]
        return check_adapter(pairs)
    except (KeyError, TypeError) as e:
        raise UsageError(f"{where}: lora: expected a list of {{id, scale}} objects ({e!r})") from e
    except UsageError as e:
        raise UsageError(f"{where}: lora: {e}") from e


def read_traffic(path: str, vocab: int) -> list[Record]:
    """The records of a JSON-lines file (blank lines skipped); a bad line is a usage error naming
    its number."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise UsageError(f"TRAFFIC: cannot read {path!r}: {e}") from e
    out = []
    for i, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise UsageError(f"line {i}: not JSON: {e}") from e
        out.append(_record(i, obj, vocab))
    if not out:
        raise UsageError(f"TRAFFIC: {path!r} holds no record")
    return out


@dataclass
class TrafficResult:
    """The verdict on recorded traffic (module docstring)."""

    source: str
    vocab: int
    config: EngineAuditConfig
    verdict: Verdict = Verdict.PASS
    records: int = 0
    tokens: int = 0
    settings: list[dict[str, Any]] = field(default_factory=list)
    token_test: dict[str, Any] = field(default_factory=dict)
    finding: dict[str, Any] | None = None
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def summary(self) -> str:
        lines = [f"traffic {self.source}: {self.verdict.value.upper()}"]
        if self.finding is not None:
            lines.append(f"  witness: {self.finding['text']}")
        e = math.exp(min(700.0, self.token_test.get("log_wealth", 0.0)))
        lines.append(
            f"  token test: e-value {e:.3g} (1/alpha = {1 / self.config.alpha:.3g}; anytime-valid) over "
            f"{self.records:,} records, {self.tokens:,} tokens"
        )
        for s in self.settings:
            lines.append(
                f"    {s['setting']}: {s['records']:,} records, {s['tokens']:,} tokens "
                f"(plan {s['planned']:,}): "
                f"detects a per-token TV of {power.tv_text(s['detects']['mean'])} (sharpening), "
                f"{power.tv_text(s['detects']['greedy'])} (to the argmax)"
            )
            if s["stopping"] == "scored" or "no end of sequence" not in s["stopping"]:
                lines.append(f"      stopping event: {s['stopping']}")
        forced = self.token_test.get("teacher_forcing_checked")
        if forced:
            lines.append(
                "  laws read along each path in one request, checked against the one-token recipe in "
                f"{forced['checked']} records: largest TV {forced['largest_tv']:.2g} (tolerance "
                f"{forced['tolerance']:g})"
            )
        lines.append(f"  laws read from the twin in {self.seconds:.1f} s")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "source": self.source,
            "vocab": self.vocab,
            "alpha": self.config.alpha,
            "tv": self.config.tv,
            "power": self.config.power,
            "records": self.records,
            "tokens": self.tokens,
            "settings": self.settings,
            "finding": self.finding,
            "token_test": self.token_test,
            "seconds": self.seconds,
        }


def _by_setting(records: Sequence[Record]) -> dict[Sampling, list[Record]]:
    out: dict[Sampling, list[Record]] = {}
    for r in records:
        out.setdefault(r.sampling, []).append(r)
    return out


def _blocks(steps: tuple[int, ...] | None, m: int) -> np.ndarray | None:
    if not steps:
        return None
    idx = np.concatenate([np.arange(e) for e in steps if e > 0])
    return idx[:m] if len(idx) >= m else None


def audit_traffic(
    records: Sequence[Record],
    laws: LawsAlong,
    vocab: int,
    config: EngineAuditConfig | None = None,
    source: str = "records",
    progress: Callable[[str, float], None] | None = None,
) -> TrafficResult:
    """The token test of ``records`` against the laws ``laws`` reads along each path (module
    docstring). Records are scored in the file's order, one case per distinct setting; the
    wealth is looked at after each record."""
    config = config or EngineAuditConfig()
    _check_adapted(records, laws)
    config.validate()
    say = progress or (lambda what, frac: None)
    res = TrafficResult(source, vocab, config)
    groups = _by_setting(records)
    scored = {r.line: r.ended() for r in records}
    stopping = {s: _stopping(s, rs, scored) for s, rs in groups.items()}
    test = TokenTest(config.alpha, config.seed)
    cases = _cases(test, groups, scored, stopping)
    endings = {s: Endings(s) for s in groups if stopping[s] == "scored" and s.stop}
    t0 = time.perf_counter()
    seen: dict[Sampling, int] = dict.fromkeys(groups, 0)
    forcing = ForcingCheck()
    for n, r in enumerate(records):
        say(f"record {r.line}", n / len(records))
        if stopping[r.sampling] == "scored":
            r = replace(r, tokens=scored[r.line] or r.tokens)
        if not r.tokens:
            continue
        along = _along(r, laws, vocab)
        differs = _forcing(forcing, r, n, along, laws, config.seed)
        if differs is not None:
            res.finding, res.verdict = differs, Verdict.CONTRACT_VIOLATION
            break
        case = cases[r.sampling]
        ender = endings.get(r.sampling)
        stops = None if ender is None else ender.after_output(r.tokens)
        blocks = _blocks(r.steps, len(r.tokens))
        test.score(case, [Sample(seen[r.sampling], r.tokens, along, blocks, None, stops)])
        seen[r.sampling] += 1
        res.records += 1
        res.tokens += len(r.tokens)
        if test.rejected:
            break
    res.seconds = time.perf_counter() - t0
    res.token_test = {
        "alpha": config.alpha,
        "log_wealth": test.log_wealth,
        "pvalue": test.pvalue(),
        "trace": test.trace.to_json(test.point(), config.alpha),
        **({"teacher_forcing_checked": forcing.to_json()} if forcing.checked else {}),
    }
    if res.verdict == Verdict.CONTRACT_VIOLATION:
        return res
    planned = power.plan_tokens(config.tv, config.alpha, config.power, len(cases))
    res.settings = [_setting(s, case, planned, stopping[s], config, len(cases)) for s, case in cases.items()]
    found = test.finding() if test.rejected else None
    if found is not None:
        res.finding = _finding(found, cases, groups)
        res.verdict = Verdict.LOSSY
    elif any(c.tokens < planned for c in cases.values()):
        res.verdict = Verdict.UNDERPOWERED
    return res


def _cases(
    test: TokenTest,
    groups: dict[Sampling, list[Record]],
    scored: dict[int, tuple[int, ...] | None],
    stopping: dict[Sampling, str],
) -> dict[Sampling, Any]:
    """One case of ``test`` per setting, its horizon the longest record's (with a left-out end of
    sequence put back where the stopping event is scored), the eos statistic fed where it is."""
    cases = {}
    for i, (s, rs) in enumerate(groups.items()):
        ends = stopping[s] == "scored"
        horizon = max(len(scored[r.line] or r.tokens) if ends else len(r.tokens) for r in rs) or 1
        cases[s] = test.add_case(i, horizon, eos=s.eos if ends else None, stops=ends and bool(s.stop))
    return cases


def _setting(
    s: Sampling, case: Any, planned: int, stopping: str, config: EngineAuditConfig, n_cases: int
) -> dict[str, Any]:
    """One setting's entry of the result: its records and tokens against the plan, whether its
    stopping event was scored, what its tokens detect."""
    w = power.shares(False, False, case.family.eos)
    return {
        "setting": s.label,
        "sampling": s.to_json(),
        "records": case.samples,
        "tokens": case.tokens,
        "planned": planned,
        "stopping": stopping,
        "detects": {
            k: power.detectable(k, case.tokens, config.alpha, config.power, n_cases, w)
            for k in ("mean", "greedy", "uniform")
        },
        "log_wealth": case.log_wealth,
        "pit": [int(c) for c in case.pit],
    }


def _stopping(s: Sampling, records: Sequence[Record], scored: dict[int, tuple[int, ...] | None]) -> str:
    """Whether the stopping event is scored for setting ``s`` ("scored"), else why not: the
    setting names no end, or some record does not say how it ended."""
    if not s.ends:
        return "not scored: the setting names no end of sequence or stop string"
    silent = [r.line for r in records if scored[r.line] is None]
    if silent:
        lines = ", ".join(map(str, silent[:5])) + (", ..." if len(silent) > 5 else "")
        return (
            f"not scored: {len(silent)} of {len(records)} records do not say how they ended (no "
            f"finish_reason; lines {lines})"
        )
    return "scored"


def _forcing(
    check: ForcingCheck, r: Record, n: int, along: np.ndarray, laws: LawsAlong, seed: int
) -> dict[str, Any] | None:
    """Record ``r`` (number ``n`` in the file) checked where the engine audit's draw puts it
    (:class:`~.token_stage.ForcingCheck`, keyed by ``n``); the finding where the laws' reader's two
    reads disagree, else None."""
    alone = getattr(laws, "alone", None)
    d = None if alone is None else check.position(seed, (n,), len(r.tokens))
    if alone is None or d is None:
        return None
    one = alone(r.prompt, r.tokens[:d], r.sampling, r.adapter or None)
    if one is None:
        return None  # this setting's laws are read one position at a time: one path
    tv = check.differs(along[d], one)
    if tv is None:
        return None
    text = (
        f"line {r.line}: the law read along the path after {list(r.prompt + r.tokens[:d])} (position "
        f"{d + 1}) differs from the one-token recipe's law there by TV {tv:.3g} (tolerance "
        f"{FORCING_TOLERANCE:g}): the twin's two reads of one law disagree, so its laws along a path "
        "cannot score the traffic"
    )
    return {"kind": "teacher_forcing_differs", "line": r.line, "position": d + 1, "tv": tv, "text": text}


def _check_adapted(records: Sequence[Record], laws: LawsAlong) -> None:
    """Records that name LoRA adapter scales need laws read under them (a twin's)."""
    adapted = next((r for r in records if r.adapter), None)
    if adapted is not None and "adapter" not in inspect.signature(laws).parameters:
        raise UsageError(
            f"line {adapted.line}: lora: these laws are read without LoRA adapters (an engine object's "
            "own); score records that name adapter scales against a twin URL that holds them"
        )


def _along(r: Record, laws: LawsAlong, vocab: int) -> np.ndarray:
    """The laws along record ``r``'s tokens (under the adapter scales it asked for), checked."""
    if r.adapter:
        got = laws(r.prompt, r.tokens, r.sampling, adapter=r.adapter)  # type: ignore[call-arg]
    else:
        got = laws(r.prompt, r.tokens, r.sampling)
    along = np.asarray(got, dtype=np.float64)
    if along.shape != (len(r.tokens), vocab):
        raise UsageError(f"line {r.line}: {along.shape} laws read for {len(r.tokens)} tokens of V = {vocab}")
    return along


def _finding(
    found: dict[str, Any], cases: dict[Sampling, Any], groups: dict[Sampling, list[Record]]
) -> dict[str, Any]:
    """The token test's rejection as the traffic's witness: the record's line where a token had
    probability 0, else the setting, statistic and drift."""
    case = next(c for c in cases.values() if c.index == found["case"])
    setting = next(s for s, c in cases.items() if c is case)
    if found["statistic"] == "impossible":
        d = found["detail"]
        rec = groups[setting][d["sample"]]
        text = (
            f"line {rec.line}: token {d['token']} at position {d['position']} has probability 0 "
            f"under the twin's law ({setting.label})"
        )
    else:
        text = (
            f"{setting.label}: statistic {found['statistic']} ({found['what']}) after "
            f"{found['tokens']:,} tokens, drift {found['drift']:+.3g}: {found['direction']}"
        )
    return {**found, "setting": setting.label, "text": text}
