"""Measurement above the audits: the calibrations, the suites that audit real engines, and what
they found.

:mod:`.calibrations` is the table ``specproof calibrate`` reads (each mode, the flags it takes,
its defaults, the page quoting it); every calibration (:mod:`.verifier_calibration`,
:mod:`.engine_calibration`, :mod:`.endpoint_calibration`, :mod:`.token_calibration`) measures
through :mod:`.rate`: seeded runs, the rate flagged, its binomial interval.

:mod:`.llamacpp_suite` and :mod:`.vllm_suite` serve llama.cpp's and vLLM's CPU build's
configurations on loopback and audit each (``specproof llamacpp table``, ``specproof vllm
table``).

:mod:`.findings` is the table of findings (one entry per defect: the engine and version, the
source lines, the measurement JSON that holds the evidence, the tests that reproduce it);
:mod:`.pages` writes one page per finding under docs/findings/ from that table and the JSON, and
re-runs a finding's reproduction against the engine installed here (``specproof findings``).
"""
