"""``specproof e2e``: decoding with a proposer and a rule on a transformer target.

* :mod:`.check` — the entry point: :func:`~.check.run` composes the checks of one (proposer,
  process, rule), :func:`~.check.optimized_run` the same on the optimized loop; it re-exports
  the names of the modules below that ``specproof e2e`` uses.
* :mod:`.results` — the reports: one dataclass per check and :class:`~.results.E2EResult`.
* :mod:`.exact_law` — the exact multi-step law on a small target (and a moved baseline).
* :mod:`.sampled` — the sampled loop and the statistical check on a larger one.
* :mod:`.coupling` — the optimized loop: coupled to the reference loop on shared tapes, sampled
  and tested statistically.
* :mod:`.mismatch_report` — a staged mismatched deployment's acceptance against its own target.
* :mod:`.table` — the acceptance table and its Markdown.
* :mod:`.calibration_report` — ``--calibration``: the report and its text lines.
* :mod:`.report` — ``--report``: the run as Markdown, HTML or SVG.
* :mod:`.draft_calibration` — draft confidence against acceptance (EAGLE-2's premise).
* :mod:`.mismatch` — mismatched auxiliary weights: refused or reported with both rates.
"""
