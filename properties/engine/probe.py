"""The engine audit's probe: before sampling, one chunk drawn, its laws read and its tokens scored
as sampling does it, on seeds of its own, to time the plan; and, from its samples' counters, the
fail-fast rule: an engine whose probe drafted nothing stops here, ``no_speculation``, with the
likely cause (docs/endpoint-audit.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specproof.properties.engine.case import EngineCase
from specproof.properties.engine.contract import Generation
from specproof.properties.engine.drawing import Drawer
from specproof.properties.engine.runner import CaseRunner, sample_seed
from specproof.reference.errors import SpecproofError

if TYPE_CHECKING:
    from specproof.properties.engine.audit import EngineAudit

#: samples of the probe that must all say nothing was drafted before the audit stops, before
#: sampling, as ``no_speculation`` (:func:`drafts_at_all`)
FAIL_FAST = 8


class NotSpeculating(SpecproofError):
    """The probe's samples all said nothing was drafted: the plan is not sampled (``no_speculation``)."""

    def __init__(self, samples: int, tokens: int, case: EngineCase, hint: str) -> None:
        super().__init__(f"{samples} samples")
        self.samples, self.tokens, self.case, self.hint = samples, tokens, case, hint

    def text(self) -> str:
        """Why the audit stopped, in a line."""
        return (
            f"stopped before sampling: none of the {self.samples} samples of {self.tokens} tokens the "
            f"probe drew in {self.case.name} drafted a token (the engine's own counters), so the law "
            "under speculation cannot be tested" + (f"; likely cause: {self.hint}" if self.hint else "")
        )


def probe_chunk(audit: EngineAudit, rn: CaseRunner) -> None:
    """Time one chunk drawn, its laws read and its tokens scored as sampling does it (many at once
    where the engine draws many: one call at a time overstates the time of an engine that serves
    many at once, a server at concurrency 8 announced 2,816 s for a run of 609 s; two samples where
    it draws one at a time), on seeds of its own; then :func:`drafts_at_all`. Only the plan's
    estimate reads the time; no sample of the probe is tested."""
    chunk = Drawer().chunk(rn)  # here, by the case's own engine: workers draw only the law test's
    seeds = [sample_seed(audit.config.seed, rn.case.index, 4 * 10**6 + j) for j in range(max(2, chunk))]
    t0 = audit.clock()
    gens = rn.draw(seeds) if chunk > 1 else [g for s in seeds for g in rn.draw([s])]
    for group in audit.groups(gens):
        rn.prefetch([g.tokens for g in group])
        if audit.tokens is not None:
            for g in group:
                audit.tokens.probe(rn, g)
        rn.end_chunk()
    audit.per_sample = (audit.clock() - t0) / len(seeds)
    audit.probe_chunk = len(seeds)
    drafts_at_all(audit, rn, gens)


def drafts_at_all(audit: EngineAudit, rn: CaseRunner, gens: list[Generation]) -> None:
    """Fail fast: where the engine's counters say that none of at least :data:`FAIL_FAST` samples
    of the probe (more drawn where it drew fewer) drafted a token, at a horizon with room for drafts
    and a law that is not a point mass, sampling the whole plan would end ``no_speculation``: raise
    :class:`NotSpeculating` here, before sampling, with the likely cause."""
    if audit.spec.tokens < 2 or rn.point_mass() or not gens or any(g.drafted is None for g in gens):
        return
    extra = 0
    while not any(g.drafted for g in gens) and len(gens) < FAIL_FAST:
        gens = gens + rn.draw([sample_seed(audit.config.seed, rn.case.index, 5 * 10**6 + extra)])
        extra += 1
    if any(g.drafted for g in gens) or any(g.drafted is None for g in gens):
        return
    for g in gens:  # the evidence: the probe's counters (none of its samples is tested)
        audit.result.speculation.add(g)
    hint = str(getattr(rn.engine, "no_draft_hint", "") or "")
    raise NotSpeculating(len(gens), audit.spec.tokens, rn.case, hint)
