"""``specproof e2e``: decoding with a proposer and a rule on a transformer target.

* :mod:`.check` — the exact multi-step law on a small target, the sampled loop and the
  statistical check on a larger one, the acceptance table.
* :mod:`.draft_calibration` — draft confidence against acceptance (EAGLE-2's premise).
* :mod:`.mismatch` — mismatched auxiliary weights: refused or reported with both rates.
"""
