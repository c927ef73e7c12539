"""The two comparisons of laws the endpoint audit makes before sampling
(:meth:`~specproof.properties.endpoint.engine.Endpoint.check`): how far two of a server's laws
lie apart, and whether a setting's cut-offs could move a law at all (where they could not, a law
they left unchanged proves nothing about the server applying them)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specproof.reference.sampling import Sampling


def tv(p: Sequence[float], q: Sequence[float]) -> float:
    """The total variation between two laws over the same ids."""
    return float(0.5 * np.abs(np.asarray(p) - np.asarray(q)).sum())


def cut_changes(law: Sequence[float], s: Sampling) -> bool:
    """Whether ``s``'s cut-offs would remove mass from ``law`` under any usual order (the law at
    the setting's temperature: if even its own cut keeps every token, an unchanged law proves
    nothing)."""
    if not s.truncated or s.greedy:
        return False
    logits = np.log(np.clip(np.asarray(law, dtype=np.float64), 1e-300, None))
    kept = Sampling(1.0, s.top_k, s.top_p, s.min_p).law(list(logits))
    return sum(v > 0 for v in kept) < sum(v > 0 for v in law)
