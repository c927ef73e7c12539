"""Block verification (Sun et al., "Block Verification Accelerates Speculative Decoding", 2025).

Chain ``X_1..X_K``; node i carries ``X_i``; ``p(.|X_<=i)`` is ``target_probs[i]`` and
``q(.|X_<=i)`` is ``draft_probs[i]`` (one-hot at ``X_{i+1}`` for a deterministic draft).

    p_0 = 1,  p_i = min(1, p_{i-1} p(X_i|X_<i) / q(X_i|X_<i))
    Z_{i+1} = sum_x (p_i p(x|X_<=i) - q(x|X_<=i))+
    h_i = Z_{i+1} / (Z_{i+1} + 1 - p_i)  for i < K  (1 when that denominator is 0),  h_K = p_K
    tau = max{i >= 1 : eta_i < h_i} (0 if none), the eta_i independent uniforms
    tau = K: Y ~ p(.|X_<=K);  else Y ~ norm((p_tau p(.|X_<=tau) - q(.|X_<=tau))+)

The step emits ``X_1..X_tau, Y``. The coins are read from i = K downwards, stopping at the first
success, which gives the same tau. A zero denominator needs p_i = 1 and Z_{i+1} = 0; then
tau > i surely, so h_i is never decisive (proofs_notes/block.md).

Claims (proofs_notes/block.md): lossless for chains drawn from q and for deterministic chains;
with one-hot drafts its law equals token-level's; its expected emitted length is at least
token-level's on the same drafts.

Tape: ``("eta", i)`` for i = K, K-1, ... until the first success, ``("final", 0)``.
"""

from __future__ import annotations

from ..choices import Choices
from ..errors import NotAChainError
from ..laws import Law, normalize, onehot, positive_part
from ..step import Outcome, Step


def _q(step: Step, i: int) -> Law:
    """q(.|X_<=i): the law node i's child was drawn from."""
    return step.draft_probs[i] or onehot(step.tokens[i + 1], step.vocab, step.target_probs[i][0])


def block(ch: Choices, step: Step) -> Outcome:
    if not step.tree.is_chain:
        raise NotAChainError("parents", "block verification takes a chain; this tree branches")
    K = step.tree.n - 1
    P, X = step.target_probs, step.tokens
    pw = [P[0][0] * 0 + 1]  # p_0 = 1 in the laws' number type
    for i in range(1, K + 1):
        r = pw[i - 1] * P[i - 1][X[i]] / _q(step, i - 1)[X[i]]
        pw.append(r if r < 1 else r / r)

    def residual_weights(i: int) -> Law:
        return positive_part([pw[i] * a - b for a, b in zip(P[i], _q(step, i))])

    def h(i: int) -> object:
        if i == K:
            return pw[K]
        Z = sum(residual_weights(i))
        den = Z + 1 - pw[i]
        r = Z / den if den > 0 else den * 0 + 1
        return r if r < 1 else r * 0 + 1  # <= 1 exactly; the clamp only absorbs float rounding

    tau = 0
    for i in range(K, 0, -1):
        if ch.bernoulli(h(i), ("eta", i)):
            tau = i
            break
    if tau == K:
        return Outcome(tuple(range(K + 1)), ch.categorical(P[K], ("final", 0)))
    w = residual_weights(tau)
    law = normalize(w) if sum(w) > 0 else P[tau]
    return Outcome(tuple(range(tau + 1)), ch.categorical(law, ("final", 0)))
