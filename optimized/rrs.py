"""Recursive rejection sampling (multi-draft without replacement) on trees, batched
(reference: ``rules/rrs.py``).

Same kernel and tape layout as :mod:`specproof.optimized.mss` (``u_accept[b, c]`` for site
``("accept", c)``, ``u_final[b]`` for ``("final", 0)``); after each rejection the draft law
loses the rejected token and is renormalized. Backend ``optimized.rrs``. Rule: Jeon et al.
2024, proofs_notes/rrs.md; coupling: proofs_notes/optimized_coupling.md.
"""

from __future__ import annotations

from ._contract import tree_verifier
from .mss import multi_draft_rule

rrs = multi_draft_rule(True, "rrs")


rrs_verifier = tree_verifier(rrs, "u_accept")
