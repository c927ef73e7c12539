"""The mutant corpus: known-buggy verifiers, one per bug class seen in public trackers.

Each mutant is a registered backend ``mutant.<name>`` whose ``expect`` says how the audit must
flag it: ``lossy`` (the law is wrong) or ``contract_violation`` (the output breaks the
contract). The correct alternatives (``torch.*``) and the reference rules are the other half:
they must pass. ``tests/test_mutants.py`` asserts both and prints the mutation score.

The bug classes (each seen in a public tracker, or the class a deep-position test must see):

========================  ==================================================================
mutant                    bug class
========================  ==================================================================
residual_from_p           recovered token resampled from p instead of norm((p - q)+)
stale_draft_probs         relu(p - draft_probs) on a buffer holding another row's values
one_sided_temperature     acceptance from processed (sharpened) probs, residual from raw ones
count_after_reject        accepted count includes accepts after the first rejection
sentinel_index            the "no rejection" sentinel -1 used as an index
block_tokenwise_residual  block verification with the token-wise residual (p - q)+
block_zero_h              block verification with h = 0 where its denominator is 0
target_off_by_one         draft i checked against the target law one position later
shared_uniforms           one uniform per position for the whole batch (rows not independent)
fixed_seed                generator ignored; a private generator with a fixed seed
global_rng                generator ignored; torch's global RNG (not reproducible)
int16_ids                 token ids kept in 16 bits (large vocabularies: ids >= 2**16 wrap)
bf16_ids                  token ids passed through bfloat16 (ids above 256 are rounded)
deep_residual_from_p      residual drawn from p, only at draft positions >= 5 (a deep-only bug)
tree_sentinel_child       tree walk: "no child accepted" = -1, used as an index (a non-path)
tree_shared_q             tree rule that reuses p, q for every sibling (token-level per sibling)
========================  ==================================================================

Typical acceptance (``reference.typical``) and relaxed thresholds
(``reference.target_only[threshold_single=0.3]``, ``reference.target_only[threshold_acc=0.5]``)
are non-preserving rules of the reference itself; the corpus lists them too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from specproof.properties.conformance.backends import CHAIN_PROCESSES, REGISTRY, Backend, register
from specproof.properties.conformance.backends import reference as _ref
from specproof.properties.conformance.backends import torch_chain as _tc
from specproof.properties.verdicts import Planted, Verdict, planted
from specproof.reference.rules import RULES

LOSSY, VIOLATION = Verdict.LOSSY, Verdict.CONTRACT_VIOLATION

CHAIN_MUTANTS: dict[str, Planted] = planted(
    Planted("residual_from_p", LOSSY, "recovered token drawn from p instead of norm((p - q)+)"),
    Planted("stale_draft_probs", LOSSY, "relu(p - draft_probs) with another row's draft probs"),
    Planted("one_sided_temperature", LOSSY, "acceptance ratio from sharpened p, residual from p"),
    Planted("count_after_reject", LOSSY, "as many drafts emitted as accepts, even after a rejection"),
    Planted("sentinel_index", VIOLATION, "no-rejection sentinel -1 used as an index"),
    Planted("target_off_by_one", LOSSY, "draft i tested against target_probs[i + 1]"),
    Planted("shared_uniforms", LOSSY, "one uniform per position shared by all rows"),
    Planted(
        "fixed_seed", LOSSY, "generator ignored: a fixed private seed, so every call reuses the same uniforms"
    ),
    Planted("global_rng", VIOLATION, "generator ignored: torch's global RNG"),
    Planted("int16_ids", VIOLATION, "token ids kept in 16 bits: ids of 2**16 and above wrap around"),
    Planted("bf16_ids", VIOLATION, "token ids passed through bfloat16: ids above 256 are rounded"),
)


def _chain_mutant(name: str) -> Callable[..., Any]:
    bugs = _tc.Bugs(**{name: True})
    return functools.partial(_tc.token_chain, bugs=bugs)


def _tree_sentinel_child(inner: Callable[..., Any]) -> Callable[..., Any]:
    """After a rejection at a node with children, append ``children[-1]``: the last node."""

    def verify(
        parents: torch.Tensor,
        tokens: torch.Tensor,
        draft_probs: Any,
        target_probs: torch.Tensor,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        acc, nxt = inner(parents, tokens, draft_probs, target_probs, generator)
        B, N = parents.shape
        L = (acc >= 0).sum(dim=1)
        last = acc[torch.arange(B), L - 1]
        has_children = (parents == last[:, None]).any(dim=1)
        room = L < N
        fix = has_children & room
        acc = acc.clone()
        acc[fix, L[fix]] = N - 1
        return acc, nxt

    return verify


def _register() -> None:
    for name, m in CHAIN_MUTANTS.items():
        register(
            Backend(
                f"mutant.{name}",
                "chain",
                _chain_mutant(name),
                CHAIN_PROCESSES,
                m.expect.value,
                doc=m.doc,
                group="mutant",
            )
        )
    register(
        Backend(
            "mutant.deep_residual_from_p",
            "chain",
            functools.partial(_tc.token_chain, bugs=_tc.Bugs(deep_residual_from_p=5)),
            CHAIN_PROCESSES,
            "lossy",
            doc="recovered token drawn from p instead of norm((p - q)+), only at draft positions >= 5",
            group="mutant",
        )
    )
    register(
        Backend(
            "mutant.block_tokenwise_residual",
            "chain",
            functools.partial(_tc.block_chain, tokenwise_residual=True),
            ("iid_chain",),
            "lossy",
            doc="block verification with the token-wise residual (p - q)+",
            group="mutant",
        )
    )
    register(
        Backend(
            "mutant.block_zero_h",
            "chain",
            functools.partial(_tc.block_chain, zero_h_on_zero_denominator=True),
            ("iid_chain",),
            "lossy",
            doc="block verification with h = 0 where its denominator is 0",
            group="mutant",
        )
    )
    register(
        Backend(
            "mutant.tree_sentinel_child",
            "tree",
            _tree_sentinel_child(_ref.tree_backend(RULES["mss"])),
            ("iid_siblings",),
            "contract_violation",
            doc="no accepted child = -1, used as an index",
            group="mutant",
            speed="python",
        )
    )
    register(
        Backend(
            "mutant.tree_shared_q",
            "tree",
            _ref.tree_backend(RULES["token"]),
            ("iid_siblings",),
            "lossy",
            doc="each sibling tested with the unmodified p and q",
            group="mutant",
            speed="python",
        )
    )


_register()

#: Non-preserving rules of the reference that the corpus also counts.
NON_PRESERVING = (
    ("chain", "reference.typical"),
    ("chain", "reference.target_only[threshold_single=0.3]"),
    ("chain", "reference.target_only[threshold_acc=0.5]"),
)


def corpus() -> list[Backend]:
    """Every mutant, then the non-preserving reference rules."""
    out = [b for b in REGISTRY.values() if b.group == "mutant"]
    return out + [REGISTRY[k] for k in NON_PRESERVING]


def alternatives() -> list[Backend]:
    """The correct alternatives that must pass."""
    return [b for b in REGISTRY.values() if b.group == "alternative"]
