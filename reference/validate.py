"""Validation of the black-box contracts' batched inputs (tensors), shared by every engine.

The chain and tree contracts (``draft_token_ids``/``parents``, ``tokens``, ``draft_probs``,
``target_probs``) are checked here once, for the optimized kernels before any launch, for the
batched PyTorch verifiers of the audit and for any user who wants the project's checks. Raises
the reference's exception classes (:mod:`.errors`) naming the argument and the first offending
entry, e.g. ``target_probs[1, 2]: sums to 0.9, not 1``. (:mod:`.laws` validates one law given as
Python numbers, for the reference rules.)

Low precision: a law given in float16 or bfloat16 is read exactly (every value widened to
float64) and must sum to 1 within ``max(1e-6, 2 eps(dtype)) + V s``, where s is the dtype's
subnormal spacing: storing a normalized law rounds each normal value by at most ``eps / 2``
relative (the sum moves by at most ``eps / 2``) and each subnormal one by at most ``s / 2``
absolute. The second term matters only for float16 at large V (s = 2^-24: 0.0076 at V =
128,256, where a near-uniform law's entries are subnormal; a GPU run found such a law summing to
0.9974); for bfloat16 and float32 it is below 1e-30. The kernels never renormalize: they
compute in float64 on the values as given, exactly as the reference does on the same numbers.
"""

from __future__ import annotations

import torch

from .errors import (
    DTypeError,
    NegativeMassError,
    NonFiniteError,
    NotNormalizedError,
    ShapeError,
    TokenOutOfRangeError,
    ZeroDraftProbabilityError,
)

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def tolerance(dtype: torch.dtype, vocab: int = 0) -> float:
    """How far from 1 a law of ``vocab`` entries stored in ``dtype`` may sum."""
    fi = torch.finfo(dtype)
    return max(1e-6, 2 * fi.eps) + vocab * fi.smallest_normal * fi.eps


def _where(mask: torch.Tensor) -> str:
    idx = mask.nonzero()[0].tolist()
    return ", ".join(str(i) for i in idx)


def check_laws(probs: torch.Tensor, argument: str, rows: torch.Tensor | None = None) -> None:
    """Rank 3 [B, N, V], a float dtype, finite, nonnegative, rows summing to 1 (only the rows
    where the boolean ``rows [B, N]`` is True, when it is given)."""
    if not isinstance(probs, torch.Tensor):
        raise DTypeError(argument, f"expected a torch.Tensor, got {type(probs).__name__}")
    if probs.dtype not in FLOAT_DTYPES:
        raise DTypeError(
            argument, f"expected a float dtype (float16, bfloat16, float32, float64), got {probs.dtype}"
        )
    if probs.dim() != 3 or probs.shape[-1] == 0:
        raise ShapeError(argument, f"expected a [B, N, V] tensor with V > 0, got shape {tuple(probs.shape)}")
    bad = ~torch.isfinite(probs)  # in the law's own dtype: no float64 copy of a large batch
    if bad.any():
        at = _where(bad)
        raise NonFiniteError(f"{argument}[{at}]", "is not a finite probability")
    neg = probs < 0
    if neg.any():
        at = _where(neg)
        raise NegativeMassError(f"{argument}[{at}]", f"is negative ({float(probs[tuple(neg.nonzero()[0])])})")
    sums = probs.sum(dim=-1, dtype=torch.float64)  # every value widened exactly, summed in float64
    tol = tolerance(probs.dtype, probs.shape[-1])
    off = (sums - 1).abs() > tol
    if rows is not None:
        off &= rows
    if off.any():
        b, i = off.nonzero()[0].tolist()
        raise NotNormalizedError(
            f"{argument}[{b}, {i}]", f"sums to {float(sums[b, i])!r}, not 1 (tolerance {tol:g})"
        )


def check_tokens(tokens: torch.Tensor, argument: str, vocab: int) -> None:
    if not isinstance(tokens, torch.Tensor):
        raise DTypeError(argument, f"expected a torch.Tensor, got {type(tokens).__name__}")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise DTypeError(argument, f"expected integer token ids, got {tokens.dtype}")
    out = (tokens < 0) | (tokens >= vocab)
    if out.any():
        at = tuple(out.nonzero()[0].tolist())
        raise TokenOutOfRangeError(
            f"{argument}[{', '.join(map(str, at))}]",
            f"is {int(tokens[at])}, outside [0, {vocab}) (vocabulary {vocab})",
        )


def check_uniforms(u: torch.Tensor, argument: str, shape: tuple[int, ...]) -> None:
    if not isinstance(u, torch.Tensor) or not u.dtype.is_floating_point:
        raise DTypeError(argument, "expected a float tensor of uniforms")
    if tuple(u.shape) != shape:
        raise ShapeError(argument, f"has shape {tuple(u.shape)}, expected {shape}")
    bad = ~((u >= 0) & (u < 1))
    if bad.any():
        at = _where(bad)
        raise ShapeError(f"{argument}[{at}]", "is not a uniform in [0, 1)")


def check_chain(
    draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None, target_probs: torch.Tensor
) -> tuple[int, int, int]:
    """The chain contract's inputs; returns (B, K, V)."""
    check_laws(target_probs, "target_probs")
    B, N, V = target_probs.shape
    K = N - 1
    if not isinstance(draft_token_ids, torch.Tensor) or draft_token_ids.dim() != 2:
        raise ShapeError("draft_token_ids", "expected a [B, K] tensor")
    if tuple(draft_token_ids.shape) != (B, K):
        raise ShapeError(
            "draft_token_ids",
            f"has shape {tuple(draft_token_ids.shape)}, expected {(B, K)} (target_probs is [B, K+1, V])",
        )
    check_tokens(draft_token_ids, "draft_token_ids", V)
    if draft_probs is not None:
        check_laws(draft_probs, "draft_probs")
        if tuple(draft_probs.shape) != (B, K, V):
            raise ShapeError("draft_probs", f"has shape {tuple(draft_probs.shape)}, expected {(B, K, V)}")
        qx = draft_probs.gather(2, draft_token_ids.long()[:, :, None]).squeeze(2)
        zero = qx <= 0
        if zero.any():
            b, k = zero.nonzero()[0].tolist()
            x = int(draft_token_ids[b, k])
            raise ZeroDraftProbabilityError(
                f"draft_probs[{b}, {k}, {x}]",
                f"is 0 but token {x} was drafted from that law (row {b}, draft {k})",
            )
    return B, K, V


def check_tree(
    parents: torch.Tensor,
    tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
) -> tuple[int, int, int]:
    """The tree contract's inputs; returns (B, N, V).

    Each row of ``parents`` must be a draft tree in the reference's convention; a malformed row
    is handed to :func:`specproof.reference.tree.validate_parents` (argument ``parents[b]``),
    which raises the specific error. Only the draft laws of nodes with children are read, so
    only those rows must sum to 1; every row must be finite and nonnegative.
    """
    B, N = check_tree_parents(parents)
    par = parents.detach().to("cpu", torch.int64)
    check_laws(target_probs, "target_probs")
    if tuple(target_probs.shape[:2]) != (B, N):
        raise ShapeError("target_probs", f"has shape {tuple(target_probs.shape)}, expected [{B}, {N}, V]")
    V = target_probs.shape[2]
    if not isinstance(tokens, torch.Tensor) or tuple(tokens.shape) != (B, N):
        got = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ShapeError("tokens", f"has shape {got}, expected {(B, N)}")
    check_tokens(tokens, "tokens", V)
    if draft_probs is not None:
        if not isinstance(draft_probs, torch.Tensor) or tuple(draft_probs.shape) != (B, N, V):
            got = tuple(draft_probs.shape) if isinstance(draft_probs, torch.Tensor) else None
            raise ShapeError("draft_probs", f"has shape {got}, expected {(B, N, V)}")
        has_kids = torch.zeros(B, N, dtype=torch.bool)
        if N > 1:
            has_kids.scatter_(1, par[:, 1:], True)
        check_laws(draft_probs, "draft_probs", rows=has_kids.to(draft_probs.device))
        if N > 1:
            tok = tokens.long().to(draft_probs.device)
            par_d = par[:, 1:].to(draft_probs.device)
            qx = draft_probs.reshape(B, N * V).gather(1, par_d * V + tok[:, 1:])
            zero = qx <= 0
            if zero.any():
                b, c = zero.nonzero()[0].tolist()
                v, x = int(par[b, c + 1]), int(tok[b, c + 1])
                raise ZeroDraftProbabilityError(
                    f"draft_probs[{b}, {v}, {x}]",
                    f"is 0 but token {x} was drafted at node {c + 1} from node {v}'s draft law (row {b})",
                )
    return B, N, V


def check_tree_parents(parents: torch.Tensor) -> tuple[int, int]:
    """A [B, N] batch of parent arrays, each a draft tree; returns (B, N)."""
    if not isinstance(parents, torch.Tensor) or parents.dim() != 2 or parents.shape[1] == 0:
        raise ShapeError("parents", "expected a [B, N] tensor with N >= 1")
    if parents.dtype.is_floating_point or parents.dtype.is_complex or parents.dtype == torch.bool:
        raise DTypeError("parents", f"expected integer parent indices, got {parents.dtype}")
    B, N = parents.shape
    par = parents.detach().to("cpu", torch.int64)
    idx = torch.arange(N)
    ok = (par[:, 0] == -1) & ((par[:, 1:] >= 0) & (par[:, 1:] < idx[1:])).all(dim=1)
    if not bool(ok.all()):
        from .tree import validate_parents

        b = int((~ok).nonzero()[0])
        validate_parents(par[b].tolist(), f"parents[{b}]")
        raise AssertionError("unreachable: the row failed the batched check")  # pragma: no cover
    return B, N


def check_chain_call(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    u_sites: tuple[str, torch.Tensor],
    u_final: torch.Tensor,
    validate: bool,
) -> tuple[int, int, int]:
    """A chain kernel's inputs: the contract's arguments plus ``u_sites`` (name, [B, K+1]) and
    ``u_final [B]``; returns (B, K, V). ``validate=False`` only reads the shapes."""
    if not validate:
        (B, K), V = draft_token_ids.shape, target_probs.shape[2]
        return B, K, V
    B, K, V = check_chain(draft_token_ids, draft_probs, target_probs)
    check_uniforms(u_sites[1], u_sites[0], (B, K + 1))
    check_uniforms(u_final, "u_final", (B,))
    return B, K, V
