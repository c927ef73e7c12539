"""Two acceptance rules that are not in specproof, for the guide docs/adding-a-rule.md.

Both are token-level speculative sampling (Leviathan et al. 2023; Chen et al. 2023; the
project's ``reference/rules/token.py``) with a top-p nucleus brought into the verifier, and both
declare themselves exact for chains (iid_chain, onehot_chain). Notation: p the target law at a
node, q the draft law its child was drawn from (one-hot at the draft for deterministic drafts),
``S = nucleus_top(p)`` the smallest most-likely set of mass >= top, ``top_p(p) = norm(p 1_S)``.

``top_p_token`` (TOP_P_VERIFIER) -- a deployment mistake. The verifier truncates the target law
to its nucleus and renormalizes before it accepts, ``p' = top_p(p)``, and then runs token-level
sampling against p': accept ``X`` if ``u < min(1, p'(X) / q(X))``, else emit
``Y ~ norm((p' - q)+)``; the bonus token is drawn from ``p'``. That is what happens when the
target's sampling settings (here top-p) are applied in the speculative verifier but not in the
target's own sampling (or the other way round): the step then preserves top_p(p), not p. The
oracle refutes the declaration with a small witness (``specproof rule
docs/examples/top_p_rule.py:TOP_P_VERIFIER`` exits 1).

``nucleus_gated`` (NUCLEUS_GATED) -- a correct use of the nucleus. The verifier only *accepts*
drafts inside the target's nucleus, ``a(x) = min(1, p(x) / q(x)) 1[x in S]``, and on rejection
draws the mass it did not accept, ``Y ~ norm(p - q a)``. The first emitted token has law
``q(y) a(y) + (p(y) - q(y) a(y)) = p(y)``: any acceptance ``a <= min(1, p / q)`` is lossless
with its matched residual, so this preserves p itself (and emits fewer drafts than token-level).
The oracle proves it exact on every instance it draws (``specproof rule
docs/examples/top_p_rule.py:NUCLEUS_GATED`` exits 0).

If top-p *output* is what you want, truncate the target everywhere: the target model is then
``NucleusTarget(target, top)``, and the project's unchanged token rule preserves its law
(``truncated_target_check`` below checks that with the oracle).

Tape: ``("accept", node)`` per tested draft, ``("final", 0)`` for the emitted token, as in
reference/rules/token.py. On a tree both walk the siblings one at a time as token.py does (the
naive extension), which is not exact there and not declared.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from specproof.properties.oracle.exact import Instance, ModelInstance, OracleResult, check
from specproof.reference.choices import Choices
from specproof.reference.laws import Law, acceptance, onehot, residual, top_p
from specproof.reference.models import LM
from specproof.reference.rules import CHAINS, RULES, Rule
from specproof.reference.step import Outcome, Step

TOP = Fraction(4, 5)


def top_p_token(ch: Choices, step: Step, top: Fraction = TOP) -> Outcome:
    """Token-level sampling against the truncated target ``p' = top_p(p)`` (lossy). Witnesses:
    docs/adding-a-rule.md; tests/test_rule_report.py."""
    path, node = [0], 0
    while True:
        p = top_p(step.target_probs[node], top)  # the one-sided truncation
        kids = step.tree.children[node]
        if not kids:
            return Outcome(tuple(path), ch.categorical(p, ("final", 0)))
        for c in kids:
            x = step.tokens[c]
            q = step.draft_probs[node] or onehot(x, step.vocab, p[0])
            if ch.bernoulli(acceptance(p[x], q[x]), ("accept", c)):
                path.append(c)
                node = c
                break
        else:
            return Outcome(tuple(path), ch.categorical(residual(p, q), ("final", 0)))


def nucleus(p: Law, top: Fraction) -> set[int]:
    """``S``: the tokens ``top_p(p, top)`` keeps (the smallest most-likely set of mass >= top)."""
    return {x for x, v in enumerate(top_p(p, top)) if v > 0}


def nucleus_gated(ch: Choices, step: Step, top: Fraction = TOP) -> Outcome:
    """Accept only drafts in the target's nucleus; reject to the unaccepted mass (exact).
    Proof and tests: docs/examples/nucleus_gated.md."""
    path, node = [0], 0
    while True:
        p = step.target_probs[node]
        kids = step.tree.children[node]
        if not kids:
            return Outcome(tuple(path), ch.categorical(p, ("final", 0)))
        S = nucleus(p, top)
        for c in kids:
            x = step.tokens[c]
            q = step.draft_probs[node] or onehot(x, step.vocab, p[0])
            a = [acceptance(p[y], q[y]) if y in S else p[0] * 0 for y in range(step.vocab)]
            if ch.bernoulli(a[x], ("accept", c)):
                path.append(c)
                node = c
                break
        else:
            # p - q a >= 0 everywhere (q min(1, p/q) = min(p, q) <= p), and its mass is the
            # probability of rejecting, so the categorical draws norm(p - q a).
            return Outcome(
                tuple(path), ch.categorical([p[y] - q[y] * a[y] for y in range(step.vocab)], ("final", 0))
            )


TOP_P_VERIFIER = Rule("top_p_token[top=0.8]", top_p_token, CHAINS, params={"top": TOP})
NUCLEUS_GATED = Rule("nucleus_gated[top=0.8]", nucleus_gated, CHAINS, params={"top": TOP})


@dataclass(frozen=True)
class NucleusTarget:
    """The target with top-p applied to its law at every context: the law a deployment that
    samples with top-p is meant to produce."""

    base: LM
    top: Fraction = TOP

    @property
    def vocab(self) -> int:
        return self.base.vocab

    def law(self, context: tuple[int, ...]) -> Law:
        return top_p(self.base.law(context), self.top)


def truncated_target_check(process: str, instance: Instance, top: Fraction = TOP) -> OracleResult:
    """The fix of TOP_P_VERIFIER's mistake, checked exactly: the truncation applied to the target
    everywhere (verifier, bonus token, plain decoding), verified by the project's token rule."""
    truncated = ModelInstance(
        NucleusTarget(instance.target, top), instance.draft, instance.shape, instance.prefix, "top_p target"
    )
    return check(RULES["token"], process, truncated)
