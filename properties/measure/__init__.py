"""Measurement above the audits: what specproof found in third-party engines, as data.

:mod:`.findings` is the table of findings (one entry per defect: the engine and version, the
source lines, the measurement JSON that holds the evidence, the tests that reproduce it);
:mod:`.pages` writes one page per finding under docs/findings/ from that table and the JSON, and
re-runs a finding's reproduction against the engine installed here (``specproof findings``).
"""
