"""The strict rule on trees, batched (reference: ``rules/strict.py``).

``strict(parents, tokens, target_probs, u_y) -> (accepted_nodes [B, N], next_token [B])``:
``u_y[b, v]`` is the uniform of site ``("y", v)`` of row b. At each visited node a target
sample ``y`` is drawn by the reference's inverse CDF; the walk moves to the child carrying it, or
emits it. Equal to the reference on the same uniforms (tests/test_optimized_strict.py). No draft
law is read; the rule is exact for every proposal process (proofs_notes/strict.md). Coupling:
proofs_notes/optimized_coupling.md.
"""

from __future__ import annotations

import torch

from ._contract import check_unread_draft
from ._device import on_kernel_device
from ._split import LAUNCH, block_size
from ._tree import f64, prepare
from .kernels.strict_tree import strict_tree_kernel


@on_kernel_device
def strict(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    target_probs: torch.Tensor,
    u_y: torch.Tensor,
    block: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    t = prepare(parents, tokens, None, target_probs, {"u_y": (u_y, "node")})
    if t.B == 0:
        return t.accepted, t.next_token
    strict_tree_kernel[(t.B,)](
        t.parents,
        t.tokens,
        t.target,
        f64(u_y, t.target.device),
        t.accepted,
        t.next_token,
        t.N,
        t.V,
        NB=t.NB,
        BLOCK=block_size(block),
        **LAUNCH,
    )
    return t.accepted, t.next_token


def compile_specs() -> list[tuple[str, object, dict[str, str], dict[str, object]]]:
    """The kernel's signatures for :mod:`specproof.properties.bench.compile_check` (via tree_attention)."""
    specs: list[tuple[str, object, dict[str, str], dict[str, object]]] = []
    for dt in ("fp32", "bf16"):
        consts: dict[str, object] = {"NB": 16, "BLOCK": 1024}
        sig = {
            "par_ptr": "*i64",
            "tok_ptr": "*i64",
            "p_ptr": f"*{dt}",
            "uy_ptr": "*fp64",
            "acc_ptr": "*i64",
            "nxt_ptr": "*i64",
            "N": "i32",
            "V": "i32",
            **dict.fromkeys(consts, "constexpr"),
        }
        specs.append((f"strict_tree[{dt}]", strict_tree_kernel, sig, consts))
    return specs


def strict_verifier(parents, tokens, draft_probs, target_probs, generator):
    """The tree contract: one uniform per node (site ``("y", node)``), drawn from ``generator``."""
    check_unread_draft((parents, tokens, draft_probs, target_probs), chain=False)
    u = torch.rand(parents.shape[0], parents.shape[1], generator=generator, dtype=torch.float64)
    return strict(parents, tokens, target_probs, u)
