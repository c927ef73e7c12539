"""Checks of the contract stage beside seed use (:mod:`.audit`): room for a whole speculative
step in the horizon, and request parameters the engine must apply (read from its laws)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specproof.properties.engine.contract import Engine, Sampling, WorkerFault
from specproof.properties.engine.results import EngineCase
from specproof.properties.engine.runner import CaseRunner, EngineViolation

__all__ = ["check_applied", "check_room"]


def check_room(rn: CaseRunner, notes: list[str]) -> None:
    """Say so when M leaves no room for a whole speculative step: the first token comes from
    the prompt's forward pass, so a step of ``k`` drafts needs ``M >= k + 2`` to be verified
    and its bonus token emitted within the samples; an engine that drafts only when k tokens
    remain never speculates inside them (OpenVINO GenAI at M = 2), and passes untested."""
    k = rn.optional("draft_tokens")
    if not isinstance(k, int) or k < 1 or rn.case.tokens >= k + 2:
        return
    note = (
        f"M = {rn.case.tokens} is not above the first token plus the engine's {k} drafted tokens: "
        f"no whole speculative step fits in the samples (use M >= {k + 2}); what is not "
        "drafted inside them is not tested"
    )
    if note not in notes:
        notes.append(note)


def check_applied(
    rn: CaseRunner, engines: dict[Sampling, Engine], build: Callable[[Sampling], Engine], notes: list[str]
) -> None:
    """A request parameter the engine silently ignores is a finding, not a pass: where the
    parameter changes the law after the prompt (by the reference's semantics, applied to the
    engine's own law without it), the engine's law with it must differ from its law without
    (``ignored_parameter``). Read from the engine, never assumed."""
    s = rn.case.sampling
    if s.plain or s.greedy:
        return
    bare = Sampling(s.temperature, eos=s.eos)
    if bare not in engines:
        try:
            engines[bare] = build(bare)
        except WorkerFault:  # the audit's own side failed: not a finding about the engine
            raise
        except Exception as e:  # an engine built for this setting only: nothing to compare with
            notes.append(
                f"{rn.case.name}: whether the engine applies its request parameters was not checked: "
                f"it cannot be built without them ({type(e).__name__}: {e})"
            )
            return
    plain = CaseRunner(
        engines[bare], EngineCase(rn.case.index, rn.case.prompt, bare, rn.case.tokens), rn.vocab
    )
    without = np.asarray(plain.law(()))
    logits = np.log(np.clip(without, 1e-300, None)) * s.temperature
    expected = np.asarray(s.law(list(logits), rn.case.prompt, len(rn.case.prompt), margin=None))
    if np.abs(expected - without).max() < 1e-9:
        return  # the parameter changes nothing here: no evidence either way
    if np.abs(np.asarray(rn.law(())) - without).max() < 1e-12:
        names = ", ".join(name for name, _ in s.asked() if name not in ("temperature", "eos"))
        raise EngineViolation(
            "ignored_parameter",
            f"the engine's law after {list(rn.case.prompt)} is the same with and without {names}, "
            "which must change it there: the engine ignores a request parameter",
            rn.case,
        )
