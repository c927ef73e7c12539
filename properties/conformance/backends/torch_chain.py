"""Batched PyTorch chain verifiers: correct alternatives that couple the same law differently.

These exist so the audit can show it accepts *every* correct implementation, not only the
reference's coupling: the residual token can be drawn by inverse CDF, by the Gumbel-max trick
(``argmax log w + G``) or by an exponential race (``argmin E / w``); the strict variant and
block verification emit the same target law with different acceptance. They are also the
bodies the mutant corpus (:mod:`specproof.properties.conformance.mutants`) breaks on purpose, one switch
per real bug.

All follow the chain contract of :mod:`specproof.properties.conformance.contracts` and draw every uniform
from the ``generator`` they are given. Laws are read in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specproof.reference.errors import UsageError
from specproof.reference.validate import check_chain


def check_chain_inputs(
    draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None, target_probs: torch.Tensor
) -> tuple[int, int, int]:
    """The chain contract's inputs (shapes, dtypes, finite normalized laws, ids in range, drafts
    with positive draft probability); raises a specific error naming the argument
    (:mod:`specproof.reference.validate`). Returns (B, K, V)."""
    return check_chain(draft_token_ids, draft_probs, target_probs)


def sample_rows(w: torch.Tensor, generator: torch.Generator, how: str = "icdf") -> torch.Tensor:
    """One index per row of the nonnegative weights ``w [B, V]`` (rows with positive mass)."""
    B, V = w.shape
    if how == "icdf":
        cdf = torch.cumsum(w, dim=1)
        u = torch.rand(B, generator=generator, dtype=torch.float64) * cdf[:, -1]
        return torch.searchsorted(cdf, u[:, None], right=True).squeeze(1).clamp(max=V - 1)
    if how == "gumbel":
        g = -torch.log(
            -torch.log(torch.rand(B, V, generator=generator, dtype=torch.float64).clamp(min=1e-300))
        )
        return torch.argmax(torch.log(w) + g, dim=1)
    if how == "exprace":
        e = -torch.log(torch.rand(B, V, generator=generator, dtype=torch.float64).clamp(min=1e-300))
        return torch.argmin(e / w, dim=1)
    raise UsageError(f"how: unknown sampling method {how!r} (icdf, gumbel, exprace)")


@dataclass(frozen=True)
class Bugs:
    """Switches for the mutant corpus; all off is the correct verifier."""

    residual_from_p: bool = False  # recovered token drawn from p, not norm((p - q)+)
    stale_draft_probs: bool = False  # residual uses another row's draft probs (uninitialized buffer)
    one_sided_temperature: bool = False  # acceptance ratio from sharpened p, residual from p
    count_after_reject: bool = False  # emits as many drafts as accepts, even after a rejection
    sentinel_index: bool = False  # "no rejection" encoded as -1, then used to place tokens
    target_off_by_one: bool = False  # acceptance of draft i reads target_probs[i + 1]
    shared_uniforms: bool = False  # one uniform per position shared by all rows
    fixed_seed: bool = False  # ignores the generator: a private generator with a fixed seed
    global_rng: bool = False  # ignores the generator: draws from torch's global RNG
    int16_ids: bool = False  # token ids kept in 16 bits (ids >= 2**16 wrap around)
    bf16_ids: bool = False  # token ids passed through bfloat16 (ids above 256 round)
    deep_residual_from_p: int = 0  # if > 0: residual drawn from p at draft positions >= this (1-based)


def _draw(shape: tuple[int, ...], gen: torch.Generator | None, bugs: Bugs) -> torch.Tensor:
    if bugs.shared_uniforms:
        return torch.rand((1,) + shape[1:], generator=gen, dtype=torch.float64).expand(shape)
    return torch.rand(shape, generator=gen, dtype=torch.float64)


def _first_true(mask: torch.Tensor, K: int) -> torch.Tensor:
    """Index of the first True per row of ``mask [B, K]``, K where none (also when K = 0)."""
    B = mask.shape[0]
    if K == 0:
        return torch.zeros(B, dtype=torch.int64)
    return torch.where(mask.any(dim=1), mask.int().argmax(dim=1), torch.full((B,), K))


def _generator(generator: torch.Generator, bugs: Bugs) -> torch.Generator | None:
    if bugs.fixed_seed:
        return torch.Generator().manual_seed(1234)
    if bugs.global_rng:
        return None
    return generator


def _q_rows(draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None, V: int) -> torch.Tensor:
    """q(.|X_<=i) for i < K: the given draft laws, or one-hot at the drafts."""
    if draft_probs is not None:
        return draft_probs.double()
    return torch.nn.functional.one_hot(draft_token_ids.long(), V).double()


def token_chain(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
    how: str = "icdf",
    bugs: Bugs = Bugs(),
) -> torch.Tensor:
    """Token-level speculative sampling, batched (reference: ``rules/token.py``)."""
    B, K, V = check_chain_inputs(draft_token_ids, draft_probs, target_probs)
    gen = _generator(generator, bugs)
    x = draft_token_ids.long()
    p = target_probs.double()
    q = _q_rows(x, draft_probs, V)
    rows = torch.arange(B)
    p_acc = p
    if bugs.one_sided_temperature:
        p_acc = p**2 / (p**2).sum(dim=2, keepdim=True)
    if bugs.target_off_by_one:
        p_acc = torch.cat([p[:, 1:], p[:, -1:]], dim=1)
    px = p_acc[:, :K].gather(2, x[:, :, None]).squeeze(2)
    qx = q.gather(2, x[:, :, None]).squeeze(2)
    u = _draw((B, K), gen, bugs)
    accept = u * qx < px  # u < min(1, p/q), without dividing
    rejected = ~accept
    first = _first_true(rejected, K)
    n_acc = accept.sum(dim=1) if bugs.count_after_reject else first
    at = n_acc.clamp(max=K)
    pr = p[rows, at]
    qr = q[rows, at.clamp(max=K - 1)] if K > 0 else torch.zeros_like(pr)
    if bugs.stale_draft_probs:
        qr = qr.roll(1, dims=0)
    w = pr if bugs.residual_from_p else (pr - qr).clamp(min=0)
    if bugs.deep_residual_from_p:
        deep = (at + 1 >= bugs.deep_residual_from_p)[:, None]
        w = torch.where(deep, pr, w)
    w = torch.where((at < K)[:, None], w, pr)
    w = torch.where(w.sum(dim=1, keepdim=True) > 0, w, pr)
    if bugs.shared_uniforms and how == "icdf":
        cdf = torch.cumsum(w, dim=1)
        uu = _draw((B,), gen, bugs) * cdf[:, -1]
        y = torch.searchsorted(cdf, uu[:, None], right=True).squeeze(1).clamp(max=V - 1)
    else:
        y = sample_rows(w, gen, how) if gen is not None else sample_rows(w, torch.default_generator, how)
    out = torch.full((B, K + 1), -1, dtype=torch.int64)
    keep = torch.arange(K)[None, :] < n_acc[:, None]
    out[:, :K] = torch.where(keep, x, torch.full_like(x, -1))
    if bugs.sentinel_index:
        at = torch.where(n_acc == K, torch.full_like(n_acc, -1), n_acc)
        out[:, :K] = torch.where(torch.arange(K)[None, :] < at[:, None], x, torch.full_like(x, -1))
    out[rows, at] = y
    if bugs.int16_ids:
        wrapped = out.to(torch.int16).to(torch.int64)
        out = torch.where(out >= 0, wrapped.remainder(2**16) % V, out)
    if bugs.bf16_ids:
        rounded = out.to(torch.bfloat16).to(torch.int64).clamp(max=V - 1)
        out = torch.where(out >= 0, rounded, out)
    return out


def strict_chain(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    """The strict variant: draw Y_i ~ p_i; accept while Y_i equals the draft (``rules/strict.py``)."""
    B, K, V = check_chain_inputs(draft_token_ids, draft_probs, target_probs)
    x = draft_token_ids.long()
    p = target_probs.double()
    y = sample_rows(p.reshape(B * (K + 1), V), generator).reshape(B, K + 1)
    match = y[:, :K] == x
    miss = ~match
    first = _first_true(miss, K)
    out = torch.full((B, K + 1), -1, dtype=torch.int64)
    out[:, :K] = torch.where(torch.arange(K)[None, :] < first[:, None], x, torch.full_like(x, -1))
    rows = torch.arange(B)
    out[rows, first] = y[rows, first]
    return out


def block_chain(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
    tokenwise_residual: bool = False,
    zero_h_on_zero_denominator: bool = False,
) -> torch.Tensor:
    """Block verification, batched (``rules/block.py``, in its notation)."""
    B, K, V = check_chain_inputs(draft_token_ids, draft_probs, target_probs)
    x = draft_token_ids.long()
    P = target_probs.double()
    Q = _q_rows(x, draft_probs, V)
    ratio = P[:, :K].gather(2, x[:, :, None]).squeeze(2) / Q.gather(2, x[:, :, None]).squeeze(2)
    pw = [torch.ones(B, dtype=torch.float64)]
    for i in range(1, K + 1):
        pw.append(torch.clamp(pw[i - 1] * ratio[:, i - 1], max=1.0))
    pws = torch.stack(pw, dim=1)  # [B, K+1]
    h = torch.empty(B, K + 1, dtype=torch.float64)
    for i in range(1, K):
        Z = (pws[:, i, None] * P[:, i] - Q[:, i]).clamp(min=0).sum(dim=1)
        den = Z + 1 - pws[:, i]
        fallback = (
            torch.zeros(B, dtype=torch.float64)
            if zero_h_on_zero_denominator
            else torch.ones(B, dtype=torch.float64)
        )
        h[:, i] = torch.where(den > 0, Z / torch.where(den > 0, den, torch.ones_like(den)), fallback).clamp(
            max=1
        )
    if K >= 1:
        h[:, K] = pws[:, K]
        if zero_h_on_zero_denominator:  # the mutant: the i < K formula at K too, with Z_{K+1} = 0
            den = 1 - pws[:, K]
            h[:, K] = torch.where(den > 0, torch.zeros_like(den), torch.zeros_like(den))
    eta = torch.rand(B, K, generator=generator, dtype=torch.float64)
    hit = eta < h[:, 1:]  # hit[:, i-1] <=> eta_i < h_i
    idx = torch.arange(1, K + 1).expand(B, K)
    tau = (
        torch.where(hit, idx, torch.zeros_like(idx)).max(dim=1).values
        if K
        else torch.zeros(B, dtype=torch.int64)
    )
    rows = torch.arange(B)
    Pt = P[rows, tau]
    Qt = Q[rows, tau.clamp(max=K - 1)] if K else torch.zeros_like(Pt)
    scale = torch.ones(B, 1, dtype=torch.float64) if tokenwise_residual else pws[rows, tau][:, None]
    w = (scale * Pt - Qt).clamp(min=0)
    w = torch.where((tau < K)[:, None], w, Pt)
    w = torch.where(w.sum(dim=1, keepdim=True) > 0, w, Pt)
    y = sample_rows(w, generator)
    out = torch.full((B, K + 1), -1, dtype=torch.int64)
    out[:, :K] = torch.where(torch.arange(K)[None, :] < tau[:, None], x, torch.full_like(x, -1))
    out[rows, tau] = y
    return out
