"""The ``ids`` statistic: a likelihood ratio for a tilt of the law over the token ids, learned from
the tokens the engine emitted before.

The other statistics read each token through its transform, whose cells follow the law's order by
probability. A deviation that moves mass from some ids to others while keeping that order (a logit
bias, a key left out of attention by a mask built from the ids: ``bugs.py:pad_mask``) leaves the
transform's law nearly unchanged; the same ids gain at every position, though. This bettor
learns which: before the token at ``t`` it holds a weight per id,

    w(x) = (n(x) + a) / (e(x) + a),

``n(x)`` the times ``x`` was emitted before ``t`` in the case, ``e(x)`` its expected count (the sum
of the laws before ``t``), ``a`` = :data:`PSEUDO` a pseudo-count that keeps ``w`` near 1 until the
counts say otherwise, and it bets on the tilted law ``q_t(x) = p_t(x) w(x) / sum_y p_t(y) w(y)``:
its wealth is multiplied by

    q_t(x_t) / p_t(x_t) = w(x_t) / sum_y p_t(y) w(y).

Under a lossless engine ``x_t`` follows ``p_t`` given everything before it, and ``w`` is fixed by
what came before, so the factor's conditional mean is ``sum_x p_t(x) w(x) / sum_y p_t(y) w(y) = 1``:
a test martingale whatever ``a`` and the counts (proofs_notes/token_audit.md, claim 5). Where a
law is censored, the tail is one cell with weight 1 (its factor ``1 / sum``), the mean is 1 the
same way, and the counts learn from the known ids only.

Its cost: one product of each law with ``w`` and one sum of the laws, two passes over each law.
Its power: against a tilt that repeats across positions, growing as the counts learn it; the
measured row is in docs/token-audit.md ("What a pass does not cover").
"""

from __future__ import annotations

import numpy as np

from specproof.properties.tokens.law import TokenLaw

#: the pseudo-count ``a`` of the weights (module docstring): chosen on the planted pad-mask engine
#: at V = 4,096, the one the docs then report it finds (so that reading is not an out-of-sample test
#: of the choice): of 300, 1,000 and 3,000, 300 gained most over the plan's 225,000 tokens
#: (``python scripts/order_keeping.py --samples 0 --learn 225000 --pseudo 300 --pseudo 1000
#: --pseudo 3000``); validity does not depend on it
PSEUDO = 300.0


class TiltLearner:
    """One case's counts and weights (module docstring); sized at the first law it reads."""

    def __init__(self, pseudo: float = PSEUDO) -> None:
        self.pseudo = pseudo
        self.seen = np.zeros(0)
        self.expected = np.zeros(0)
        self.weights = np.ones(0)

    def sized(self, vocab: int) -> np.ndarray:
        """The weights, the arrays grown to ``vocab`` ids (a new id's weight is 1)."""
        if len(self.seen) < vocab:
            grow = vocab - len(self.seen)
            self.seen = np.append(self.seen, np.zeros(grow))
            self.expected = np.append(self.expected, np.zeros(grow))
            self.weights = np.append(self.weights, np.ones(grow))
        return self.weights

    def learn(self, tokens: np.ndarray, mass: np.ndarray) -> None:
        """Count ``tokens`` (the known ids among those just scored) and ``mass`` (their laws'
        sum over ids), then set the weights the next token is scored with."""
        self.sized(len(mass))
        np.add.at(self.seen, np.asarray(tokens, dtype=np.int64), 1.0)
        self.expected[: len(mass)] += mass
        self.weights = (self.seen + self.pseudo) / (self.expected + self.pseudo)


def sparse_factors(
    laws: list[TokenLaw], tokens: list[int], weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For laws given as :class:`TokenLaw` rows: each token's log factor under ``weights``, the
    known tokens (to count) and the known mass per id (module docstring)."""
    logs = np.zeros(len(laws))
    vocab = max((law.vocab for law in laws), default=len(weights))
    mass = np.zeros(max(vocab, len(weights)))
    known = []
    for t, (law, x) in enumerate(zip(laws, tokens)):
        w = weights[law.ids] if len(weights) else np.ones(len(law.ids))
        total = float(law.probs @ w) + law.tail
        hit = np.flatnonzero(law.ids == int(x))
        logs[t] = np.log((w[hit[0]] if len(hit) else 1.0) / total)
        if len(hit):
            known.append(int(x))
        np.add.at(mass, law.ids, law.probs)
    return logs, np.asarray(known, dtype=np.int64), mass
