"""The statistical audit of a black-box verifier (an instrument: plan, smoke, sample, test, verdict).

* :mod:`.stages` — ``audit(backend, config)`` and its stages, ``AuditConfig``, the results.
* :mod:`.battery` — the cases: draft-tree shapes, vocabularies, context-dependent model pools.
* :mod:`.partition`, :mod:`.conditional`, :mod:`.stats` — the cells of the joint law, the
  per-position tests, the planner, Holm, the TV interval.
* :mod:`.probes` — the id-range probes of the smoke stage.
* :mod:`.sequence_test` — the same statistics for sampled sequences (``specproof e2e``, engines).
* :mod:`.report`, :mod:`.replay`, :mod:`.robustness`, :mod:`.calibration` — reports, witnesses as
  pytest tests, malformed inputs, measured false alarms and power.
* :mod:`.cli` — ``specproof audit``, ``specproof replay``, ``specproof robustness``.
"""

from specproof.properties.audit.stages import (
    Audit,
    AuditConfig,
    AuditResult,
    Budget,
    CaseResult,
    audit,
    default_cases,
)

__all__ = ["Audit", "AuditConfig", "AuditResult", "Budget", "CaseResult", "audit", "default_cases"]
