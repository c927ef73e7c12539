"""Measurement above the audits: the suites that audit real engines, and what they found.

:mod:`.llamacpp_suite` and :mod:`.vllm_suite` serve llama.cpp's and vLLM's CPU build's
configurations on loopback and audit each (``specproof llamacpp table``, ``specproof vllm
table``).

:mod:`.findings` is the table of findings (one entry per defect: the engine and version, the
source lines, the measurement JSON that holds the evidence, the tests that reproduce it);
:mod:`.pages` writes one page per finding under docs/findings/ from that table and the JSON, and
re-runs a finding's reproduction against the engine installed here (``specproof findings``).
"""
