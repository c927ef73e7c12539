"""The statistical audit of a black-box verifier (an instrument: smoke, plan, sample, test, verdict).

* :mod:`.stages` — ``audit(backend, config)``, its stages and ``AuditConfig``.
* :mod:`.results` — ``CaseResult`` and ``AuditResult``: verdict, witness, summary, JSON.
* :mod:`.shrink` — a smaller witness after a lossy verdict.
* :mod:`.battery` — the cases: draft-tree shapes, vocabularies, context-dependent model pools.
* :mod:`.partition`, :mod:`.conditional`, :mod:`.stats` — the cells of the joint law, the
  per-position tests, the planner, Holm, the TV interval.
* :mod:`.probes` — the id-range probes of the smoke stage.
* :mod:`.sequences` — the same statistics for sampled sequences (``specproof e2e``, engines).
* :mod:`.report`, :mod:`.replay`, :mod:`.robustness`, :mod:`.calibration` — reports, witnesses as
  pytest tests, malformed inputs, measured false alarms and power.
* :mod:`.main_job` — every built-in verifier against what it declares, under fixed plans.

Importing this package imports none of them (so ``import specproof.properties.audit.stats``
loads the statistics alone, not the backend registry).
"""
