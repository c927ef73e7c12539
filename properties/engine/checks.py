"""What an engine audit checks beside the law: that speculation ran, that the probabilities the
engine reports are the law's, and how close the laws it was tested against are to the ones the
engine decodes with.

Each check reads an optional capability of the engine (:mod:`.contract`) and says so when the
engine does not offer it; none of them is a statistical test, so none costs the law test any of
its alpha.

* :class:`Speculation` — the engine's own counters, summed over the law test's samples: an
  engine that drafted nothing, or accepted nothing, was not tested as a speculative engine
  (verdict ``no_speculation``). The same counters on the samples drawn with probabilities
  requested show whether asking for them switches speculation off.
* :class:`Reports` — for samples drawn with ``report=True``, the probability the engine reports
  for each emitted token against the law ``target_law`` gives at that prefix. A report that
  differs by more than the tolerance, or a missing one, is a finding (verdict ``misreported``).
* :class:`Control` — with a ``twin`` (the same engine, speculation off): the largest difference
  between the probabilities the twin reports while decoding and the laws read by the audit's
  recipe. It is the numerical tolerance a pass holds within (a server verifies k+1 rows in one
  batch where plain decoding runs one, so its laws differ in the last bits), and it sets the
  report check's tolerance. The seed-coupled comparison (same seeds, speculation on and off)
  gives the share of identical outputs: all of them for a server whose verifier draws the target
  once per emitted token and compares with the draft.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specproof.properties.engine.contract import Generation, Seq
from specproof.properties.verdicts import CheckStatus

#: the smallest tolerance of a reported probability: about 16 float32 ulps at 1 (a server
#: computes and prints probabilities in float32); the control's measured difference, times
#: :data:`TOLERANCE_FACTOR`, takes over when it is larger
TOLERANCE_FLOOR = 1e-6
TOLERANCE_FACTOR = 4.0
#: a difference larger than this between the twin's reports and the recipe's laws is not
#: rounding: the twin's reports are not its law there (or the recipe does not read it)
NUMERIC_LIMIT = 1e-3
#: how many (law, reported) pairs the reports check keeps for the report's scatter
REPORT_PAIRS = 400


@dataclass
class Speculation:
    """The engine's draft and acceptance counters over the samples that carried them."""

    samples: int = 0  # samples drawn
    counted: int = 0  # samples that carried counters
    drafted: int = 0
    accepted: int = 0
    #: the same counts over the samples drawn with probabilities requested (None: none drawn)
    reported: dict[str, int] | None = None
    #: samples whose counters contradict themselves (more accepted than drafted), and the first
    contradictory: int = 0
    first_contradiction: dict[str, int] | None = None

    def add(self, g: Generation) -> None:
        self.samples += 1
        if g.drafted is not None:
            self.counted += 1
            self.drafted += g.drafted
            self.accepted += g.accepted or 0
            if (g.accepted or 0) > g.drafted:
                self.contradictory += 1
                if self.first_contradiction is None:
                    self.first_contradiction = {
                        "sample": self.samples - 1,
                        "drafted": g.drafted,
                        "accepted": g.accepted or 0,
                    }

    @property
    def status(self) -> CheckStatus:
        """``ran``, ``none`` (counters read, nothing drafted or nothing accepted), or
        ``unobservable`` (the engine reports no counters)."""
        if self.counted == 0:
            return CheckStatus.UNOBSERVABLE
        return CheckStatus.RAN if self.drafted > 0 and self.accepted > 0 else CheckStatus.NONE

    @property
    def off_with_reports(self) -> bool:
        """Speculation ran on plain requests but not on those asking for probabilities."""
        r = self.reported
        return self.status == CheckStatus.RAN and r is not None and r["counted"] > 0 and r["drafted"] == 0

    @property
    def idle(self) -> str:
        """Why speculation was not tested, where it was not: ``nothing drafted`` or ``drafts never
        accepted`` (empty when it ran or cannot be seen)."""
        if self.status != CheckStatus.NONE:
            return ""
        return "nothing drafted" if self.drafted == 0 else "drafts never accepted"

    def line(self) -> str:
        if self.status == CheckStatus.UNOBSERVABLE:
            return "speculation: not observable (the engine reports no draft or acceptance counters)"
        rate = self.accepted / self.drafted if self.drafted else 0.0
        head = {CheckStatus.RAN: "ran", CheckStatus.NONE: "NONE"}[self.status]
        text = (
            f"speculation {head}: {self.drafted:,} tokens drafted, {self.accepted:,} accepted "
            f"({rate:.1%}) over {self.counted:,} samples"
        )
        if self.idle == "drafts never accepted":
            text += (
                "; drafts were made but none was accepted: the draft and the target disagree on "
                "every token (another vocabulary or tokenizer, a draft of another model, a draft "
                "read at the wrong position), or the samples are too short to reach a drafted token "
                "(M not above the first token plus the draft length)"
            )
        if self.off_with_reports:
            text += "; switched OFF when probabilities are requested"
        if self.contradictory:
            f = self.first_contradiction or {}
            text += (
                f"; COUNTERS CONTRADICT THEMSELVES in {self.contradictory:,} samples: more accepted "
                f"than drafted (sample {f.get('sample')}: {f.get('drafted')} drafted, "
                f"{f.get('accepted')} accepted)"
            )
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "samples": self.samples,
            "counted": self.counted,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "with_probabilities_requested": self.reported,
            "off_when_probabilities_requested": self.off_with_reports,
            "idle": self.idle or None,
            "contradictory": self.contradictory,
            "first_contradiction": self.first_contradiction,
        }


@dataclass
class Reports:
    """Reported probabilities of emitted tokens against the law."""

    status: CheckStatus = CheckStatus.NOT_OFFERED  # consistent, wrong, absent, not_offered, stopped
    samples: int = 0
    checked: int = 0  # tokens whose reported probability was compared
    missing: int = 0  # emitted tokens with no reported probability
    max_error: float = 0.0
    tolerance: float = TOLERANCE_FLOOR
    tolerance_from: str = "floor"  # "control" when the twin's measured difference set it
    worst: dict[str, Any] | None = None
    #: the first :data:`REPORT_PAIRS` tokens compared, as ``(law, reported)``: the report's scatter
    pairs: list[tuple[float, float]] = field(default_factory=list)
    #: why the check stopped before its samples were read (status ``stopped``): it was offered
    #: but did not run to the end, which is neither ``not_offered`` nor a pass
    stopped: str | None = None

    def stop(self, why: str) -> None:
        self.status, self.stopped = CheckStatus.STOPPED, why

    def line(self) -> str:
        if self.status == CheckStatus.STOPPED:
            return (
                f"reported probabilities: NOT CHECKED: the check stopped after {self.samples} samples: "
                f"{self.stopped}"
            )
        if self.status == CheckStatus.NOT_OFFERED:
            return "reported probabilities: not offered by this engine (not checked)"
        if self.status == CheckStatus.ABSENT:
            return f"reported probabilities: MISSING for {self.missing} of the emitted tokens"
        what = "consistent with the law" if self.status == CheckStatus.CONSISTENT else "WRONG"
        text = (
            f"reported probabilities: {what}: {self.checked} tokens of {self.samples} samples, largest "
            f"difference {self.max_error:.2g} (tolerance {self.tolerance:.2g}, {self.tolerance_from})"
        )
        if self.missing:
            text += f"; {self.missing} tokens reported none"
        if self.status == CheckStatus.WRONG and self.worst:
            w = self.worst
            text += (
                f"; e.g. after {w['prefix']} token {w['token']}: reported {w['reported']:.6g}, "
                f"law {w['law']:.6g}"
            )
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "samples": self.samples,
            "checked": self.checked,
            "missing": self.missing,
            "max_error": self.max_error,
            "tolerance": self.tolerance,
            "tolerance_from": self.tolerance_from,
            "worst": self.worst,
            "stopped": self.stopped,
            "pairs": [list(p) for p in self.pairs],
        }


@dataclass
class Control:
    """What the twin (speculation off) measured."""

    samples: int = 0
    tolerance: float | None = None  # largest |reported - law| on the twin; None: not measured
    coupled: int = 0  # seeds compared between the engine and its twin
    identical: int = 0  # of them, identical outputs
    identical_tokens: float | None = None  # share of positions with the same token
    notes: list[str] = field(default_factory=list)

    @property
    def numeric(self) -> bool:
        """Whether the measured difference is rounding (below :data:`NUMERIC_LIMIT`)."""
        return self.tolerance is not None and self.tolerance <= NUMERIC_LIMIT

    def line(self) -> str:
        if self.tolerance is None and not self.coupled:
            return "control: no speculation-off twin, so the laws' numerical tolerance is not measured"
        parts = []
        if self.tolerance is not None and not self.numeric:
            parts.append(
                f"the twin's own decode-time probabilities differ from the recipe's laws by up to "
                f"{self.tolerance:.2g}, which is not rounding: that server's reported probabilities are "
                "not its law there (the tolerance is left unmeasured)"
            )
        elif self.tolerance is not None:
            parts.append(
                f"the laws hold to within {self.tolerance:.2g} (largest difference between the twin's "
                f"decode-time probabilities and the recipe's laws over {self.samples} samples)"
            )
        if self.coupled:
            parts.append(
                f"same seed with and without speculation: {self.identical}/{self.coupled} identical "
                f"outputs ({100 * (self.identical_tokens or 0):.1f}% of tokens)"
            )
        return "control: " + "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "tolerance": self.tolerance,
            "numeric": self.numeric,
            "seed_coupled": {
                "seeds": self.coupled,
                "identical": self.identical,
                "tokens": self.identical_tokens,
            },
            "notes": self.notes,
        }


@dataclass
class Streaming:
    """Streamed answers against the same seeds' answers in one piece: tokens, text and reported
    probabilities must be equal (a sample is a function of its seed alone, however it is sent)."""

    #: equal; differs (tokens or text: a contract violation); reports_differ (only the reported
    #: probabilities or counters: misreported); not_offered; stopped
    status: CheckStatus = CheckStatus.NOT_OFFERED
    samples: int = 0
    differing: int = 0
    first: dict[str, Any] | None = None  # the first seed whose two answers differ, and how
    stopped: str | None = None
    #: the streamed answers' reported probabilities against the law (which of the two is right)
    reports: Reports = field(default_factory=Reports)
    hard: int = 0  # seeds whose tokens or text differ
    #: why streaming was found not offered although the engine declares it (a server that answers
    #: a streamed request in one piece); empty where it does not declare it
    why: str = ""

    def add(self, seed: int, whole: Generation, streamed: Generation, tolerance: float) -> None:
        self.samples += 1
        found = _stream_difference(whole, streamed, tolerance)
        if found is None:
            return
        hard, what = found
        self.differing += 1
        self.hard += hard
        if self.first is None or (hard and not self.first["hard"]):
            self.first = {
                "seed": seed,
                "what": what,
                "hard": hard,
                "whole": list(whole.tokens),
                "streamed": list(streamed.tokens),
            }

    def judge(self) -> None:
        if self.status == CheckStatus.STOPPED:
            return
        if not self.samples:
            self.status = CheckStatus.NOT_OFFERED
        elif self.hard:
            self.status = CheckStatus.DIFFERS
        else:
            self.status = CheckStatus.REPORTS_DIFFER if self.differing else CheckStatus.EQUAL

    def line(self) -> str:
        if self.status == CheckStatus.NOT_OFFERED:
            if self.why:
                return f"streaming: not offered: {self.why} (not checked)"
            return "streaming: not offered by this engine (not checked)"
        if self.status == CheckStatus.STOPPED:
            return f"streaming: NOT CHECKED: the check stopped after {self.samples} samples: {self.stopped}"
        if self.status == CheckStatus.EQUAL:
            return (
                f"streaming: {self.samples} seeds streamed and whole: equal tokens, text and reported "
                "probabilities"
            )
        f = self.first or {}
        if self.hard:
            soft = self.differing - self.hard
            what = f"{self.hard} of {self.samples} seeds DIFFER in tokens or text" + (
                f" ({soft} more in reported probabilities or counters only)" if soft else ""
            )
        else:
            what = (
                f"{self.differing} of {self.samples} seeds differ in reported probabilities or counters only"
            )
        text = f"streaming: {what}, streamed from whole (seed {f.get('seed')}: {f.get('what')})"
        if self.reports.status not in (CheckStatus.NOT_OFFERED, CheckStatus.STOPPED):
            text += f"; the streamed answers' {self.reports.line()}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "samples": self.samples,
            "differing": self.differing,
            "tokens_or_text_differ": self.hard,
            "first": self.first,
            "stopped": self.stopped,
            "streamed_reports": self.reports.to_json(),
            **({"why": self.why} if self.why else {}),
        }


def _stream_difference(a: Generation, b: Generation, tolerance: float) -> tuple[bool, str] | None:
    """How two answers for one seed differ: (whether the tokens or text differ, in words); None
    where they do not."""
    if a.tokens != b.tokens:
        return True, f"tokens {list(a.tokens)} whole, {list(b.tokens)} streamed"
    if a.text is not None and b.text is not None and a.text != b.text:
        return True, f"text {a.text!r} whole, {b.text!r} streamed"
    if a.reported is not None and b.reported is not None:
        for d, (x, y) in enumerate(zip(a.reported, b.reported)):
            if (x is None) != (y is None) or (x is not None and y is not None and abs(x - y) > tolerance):
                return False, f"reported probability of token {d}: {x} whole, {y} streamed"
        if len(a.reported) != len(b.reported):
            return False, f"{len(a.reported)} reported probabilities whole, {len(b.reported)} streamed"
    if (a.drafted, a.accepted) != (b.drafted, b.accepted) and None not in (a.drafted, b.drafted):
        counts = f"{a.drafted}/{a.accepted} whole, {b.drafted}/{b.accepted} streamed"
        return False, f"counters (drafted/accepted) {counts}"
    return None


LawFn = Callable[[Seq], Sequence[float] | np.ndarray]


def compare_reports(
    gens: Sequence[Generation], law: LawFn, out: Reports, end: Callable[[Seq], int | None] | None = None
) -> None:
    """Fold the reported probabilities of ``gens`` into ``out`` (law: the prefix's next-token
    law after the prompt). ``end`` says where a sample's output ended (an eos, a stop string):
    the audit pads an ended sample with its ending token, and a server need not report the
    padding, nor the ending token itself."""
    for g in gens:
        out.samples += 1
        k = None if end is None else end(g.tokens)
        m = len(g.tokens) if k is None else k
        if g.reported is None:
            out.missing += m
            continue
        for d, x in enumerate(g.tokens[:m]):
            got = g.reported[d] if d < len(g.reported) else None
            if got is None and d == m - 1 and k is not None:
                break  # the ending token, unreported
            if got is None:
                out.missing += 1
                continue
            want = float(law(g.tokens[:d])[x])
            out.checked += 1
            if len(out.pairs) < REPORT_PAIRS:
                out.pairs.append((want, float(got)))
            err = abs(float(got) - want)
            if err > out.max_error:
                out.max_error = err
                out.worst = {"prefix": list(g.tokens[:d]), "token": x, "reported": float(got), "law": want}


def reports_against(runner: Any, gens: Sequence[Generation], out: Reports) -> None:
    """:func:`compare_reports` against ``runner``'s law (a
    :class:`~specproof.properties.engine.runner.CaseRunner`), the laws after the samples' prefixes
    read at once first (``prefetch``: through a server whose family reads laws along a path, one
    request a sample instead of one a position) and let go once compared."""
    runner.prefetch([tuple(g.tokens) for g in gens])
    try:
        compare_reports(gens, runner.law, out, runner.end)
    finally:
        runner.end_chunk()


def judge_reports(out: Reports) -> None:
    """``consistent``, ``wrong`` or ``absent`` from what was folded in."""
    if out.samples == 0:
        out.status = CheckStatus.NOT_OFFERED
    elif out.checked == 0:
        out.status = CheckStatus.ABSENT
    elif out.max_error > out.tolerance or out.missing:
        out.status = CheckStatus.WRONG if out.max_error > out.tolerance else CheckStatus.ABSENT
    else:
        out.status = CheckStatus.CONSISTENT


def tolerance_from(control: Control | None) -> tuple[float, str]:
    """The report check's tolerance: the control's measured difference times a factor, never
    below :data:`TOLERANCE_FLOOR`."""
    if control is None or control.tolerance is None:
        return TOLERANCE_FLOOR, "floor: float32 resolution; no control measured"
    if not control.numeric:
        return TOLERANCE_FLOOR, "floor: float32 resolution; the control's difference is not rounding"
    measured = TOLERANCE_FACTOR * control.tolerance
    if measured > TOLERANCE_FLOOR:
        return measured, f"{TOLERANCE_FACTOR:g} x the control's measured difference"
    return TOLERANCE_FLOOR, "floor: float32 resolution (the control measured less)"
