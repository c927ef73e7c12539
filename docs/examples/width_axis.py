"""A worked example of docs/adding-an-axis-or-check.md: a workload axis and a side check, each in
this one module, joined to the engine audit by one line each in ``properties/engine/plugins.py``.

* :class:`WidthAxis` audits every case at each draft-tree width asked (``EngineSpec.axes =
  (("width", (1, 2)),)``): the engine at a width is its ``at_width(w)``. A deviation at one width
  alone reads "lossy only at width 2 (the same prompt and setting held at width 1)".
* :class:`StepsCheck` reads the tokens an engine says each of its target steps emitted
  (``last_steps``) and requires them to add up to the tokens it returned: a count that does not is
  ``misreported`` (a dashboard's tokens-per-step would be wrong).
* :class:`WidthEngine` is an engine to try them on: exact at every width unless built with a
  ``bug``: ``"lossy_at_2"`` (at width 2 the first token is always 0) or ``"steps"`` (it reports
  one step too many).

tests/test_plugins.py runs both through the audit with the table extended by these two lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specproof.properties.engine.contract import Generation, Sampling
from specproof.properties.engine.loops import DirectEngine, direct_engine
from specproof.properties.engine.plugin import Axis, Check, Finding
from specproof.properties.verdicts import Verdict

if TYPE_CHECKING:
    from specproof.properties.engine.audit import EngineAudit
    from specproof.properties.engine.case import EngineCaseResult
    from specproof.properties.engine.runner import CaseRunner


class WidthAxis(Axis):
    """Every case at each draft-tree width asked; the engine at a width is ``at_width(w)``."""

    name, capability, attr, option = "width", "width", "at_width", "width"
    why = "it cannot be set to a draft-tree width"
    docs = "docs/adding-an-axis-or-check.md#a-workload-axis"
    signoff = "the law holds at every draft-tree width"

    def suffix(self, value: Any) -> str:
        return f" at width {value}"


@dataclass
class StepsReport:
    """What :class:`StepsCheck` saw: samples whose steps were read, and those that did not add up."""

    read: int = 0
    wrong: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        if not self.read:
            return "steps: not offered (the engine reports no tokens per step)"
        if self.wrong:
            w = self.wrong[0]
            return (
                f"steps: MISREPORTED in {len(self.wrong)} of {self.read} samples (first: sample "
                f"{w['sample']} of {w['case']}, steps {w['steps']} add up to {sum(w['steps'])}, "
                f"{w['tokens']} tokens returned)"
            )
        return f"steps: {self.read} samples, their steps add up to their tokens"

    def to_json(self) -> dict[str, Any]:
        return {"read": self.read, "wrong": self.wrong}

    def item(self) -> tuple[str, str, str]:
        q = "the tokens per step add up to the tokens returned"
        answer = "not tested" if not self.read else "no" if self.wrong else "yes"
        return q, answer, self.line().split(": ", 1)[1]


class StepsCheck(Check):
    """The steps an engine reports add up to the tokens it returned (module docstring)."""

    name = "steps"
    docs = "docs/adding-an-axis-or-check.md#a-side-check"
    signoff = "the tokens per step add up to the tokens returned"

    def start(self, audit: EngineAudit) -> None:
        self.report = StepsReport()
        audit.result.plugins[self.name] = self.report

    def sample(self, audit: EngineAudit, runner: CaseRunner, r: EngineCaseResult, g: Generation) -> None:
        if g.steps is None:
            return
        self.report.read += 1
        if sum(g.steps) != len(g.tokens):
            self.report.wrong.append(
                {"case": r.case.name, "sample": r.n, "steps": list(g.steps), "tokens": len(g.tokens)}
            )

    def findings(self, audit: EngineAudit) -> list[Finding]:
        return [Finding(Verdict.MISREPORTED)] if self.report.wrong else []


class WidthEngine:
    """An exact engine (the reference engines' target, sampled directly) that takes a draft-tree
    width and reports its steps (module docstring)."""

    def __init__(self, sampling: Sampling, bug: str | None = None, width: int = 1) -> None:
        self.inner: DirectEngine = direct_engine(sampling)
        self.vocab, self.bug, self.width = self.inner.vocab, bug, width
        self.sampling = sampling
        self.last_steps: list[int] = []

    def at_width(self, width: int) -> WidthEngine:
        return WidthEngine(self.sampling, self.bug, width)

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        out = self.inner.generate(prompt_ids, max_new_tokens, seed)
        if self.bug == "lossy_at_2" and self.width == 2:
            out[0] = 0
        self.last_steps = [1] * len(out) + ([1] if self.bug == "steps" else [])
        return out

    def target_law(self, context: Any, prompt_len: int | None = None) -> Any:
        return self.inner.target_law(context, prompt_len)
