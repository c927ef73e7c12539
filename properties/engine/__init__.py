"""The engine-level audit: is a whole speculative ``generate`` loop lossless, end to end?

* :mod:`.registry` — the engine contract (``generate``, ``target_law``), the registered engines
  (the reference loop for every proposer x rule, its mutants, the optimized loop, adapters).
* :mod:`.audit` — ``audit_engine``: contract checks, a plan, the sequence statistics with early
  stopping, verdicts and reports; ``specproof audit engine``.
* :mod:`.pytest_plugin` — ``--specproof-engine`` and the ``specproof_engine_audit`` fixture.
"""
