"""The findings in third-party engines: the one table (:data:`FINDINGS`) and lookup by name.

The shape of an entry is :class:`.finding.Finding` (the engine and version, the source lines,
the evidence, the tests, the fix); the entries are in :mod:`.served` (vLLM's CPU build, OpenVINO
GenAI, mistral.rs) and :mod:`.libraries` (HF transformers, llama.cpp, llama-cpp-python, EAGLE-1,
Medusa-1). The pages under docs/findings/ are written from this table and the measurement JSON
(:mod:`.pages`).
"""

from __future__ import annotations

from specproof.properties.measure.finding import CHECKED, Evidence, Finding, Where
from specproof.properties.measure.libraries import LIBRARIES
from specproof.properties.measure.served import SERVED

__all__ = ["CHECKED", "FINDINGS", "Evidence", "Finding", "Where", "by_slug"]

FINDINGS: tuple[Finding, ...] = SERVED + LIBRARIES


def by_slug(slug: str) -> Finding:
    for f in FINDINGS:
        if f.slug == slug:
            return f
    from specproof.reference.errors import UsageError

    raise UsageError(
        f"finding {slug!r}: no such finding; the findings are {', '.join(f.slug for f in FINDINGS)}"
    )
