"""The black-box contracts a third-party verifier adapts to, and their output validation.

Two shapes (docs/verifier-audit.md, "Contracts"):

* :class:`ChainVerifier` ``(draft_token_ids [B,K], draft_probs [B,K,V] or None,
  target_probs [B,K+1,V], generator) -> output_token_ids [B,K+1]``: each row holds the accepted
  drafts, then one corrected or bonus token, then ``-1`` padding.
* :class:`TreeVerifier` ``(parents [B,N], tokens [B,N], draft_probs [B,N,V] or None,
  target_probs [B,N,V], generator) -> (accepted_nodes [B,N], next_token [B])``:
  ``accepted_nodes`` is the accepted root path, node 0 first, ``-1`` padded.

``draft_probs=None`` means deterministic (one-hot) drafts. ``generator`` is a
``torch.Generator``: the verifier's only source of randomness.

Anything a verifier returns that breaks its contract raises :class:`ContractViolation`, whose
``kind`` is one of :data:`VIOLATIONS`. The audit reports these as contract violations (exit
status 2), never as a statistical finding: a wrong shape is not evidence about a law.
"""

from __future__ import annotations

import threading
import traceback as _tb
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

from specproof.reference.errors import SpecproofError, UsageError

VIOLATIONS: dict[str, str] = {
    "raised": "the verifier raised an exception on valid input",
    "timeout": "a call did not return within the per-call timeout (a hang)",
    "type": "the output is not a tensor (or not the pair of tensors a tree verifier returns)",
    "shape": "the output has the wrong shape",
    "dtype": "the output is not an integer tensor",
    "padding": "-1 padding is not contiguous, a row emits nothing, or a negative id other than -1",
    "token_range": "an emitted token id is outside [0, V)",
    "not_draft": "an accepted position holds a token other than the draft there",
    "id_narrowing": "an emitted id came back narrowed (a 16-bit wrap, a float16/bfloat16/float32 round trip)",
    "not_root_path": "accepted nodes are not a root path (node 0 first, each a child of the last)",
    "nondeterministic": "two calls with equally seeded generators gave different outputs",
    "ignores_generator": "the output does not depend on the generator (a fixed or global seed)",
    "count": "a count the verifier reports disagrees with the tokens it emitted (raised by adapters)",
}


class ContractViolation(SpecproofError):
    """A verifier broke its contract. ``kind`` is a key of :data:`VIOLATIONS`; ``row`` the
    offending batch row; ``traceback`` the verifier's own traceback for ``raised``."""

    def __init__(self, kind: str, detail: str, row: int | None = None, traceback: str | None = None) -> None:
        if kind not in VIOLATIONS:
            raise UsageError(f"kind: unknown contract violation {kind!r}")
        self.kind = kind
        self.detail = detail
        self.row = row
        self.traceback = traceback
        where = "" if row is None else f" (row {row})"
        super().__init__(f"{kind}{where}: {detail}")


class ChainVerifier(Protocol):
    def __call__(
        self,
        draft_token_ids: torch.Tensor,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        generator: torch.Generator,
    ) -> torch.Tensor: ...


class TreeVerifier(Protocol):
    def __call__(
        self,
        parents: torch.Tensor,
        tokens: torch.Tensor,
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


def _as_int_tensor(x: Any, what: str) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor):
        raise ContractViolation("type", f"{what} is a {type(x).__name__}, expected a torch.Tensor")
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise ContractViolation("dtype", f"{what} has dtype {x.dtype}, expected an integer dtype")
    return x.detach().to("cpu", torch.int64)


def narrowing_hint(got: int, want: int) -> str:
    """Why an emitted id may differ from the one expected: a narrowed integer or a float round
    trip (16-bit wrap, float16/bfloat16/float32 rounding). Empty when none explains it."""
    if got == want:
        return ""
    checks = [
        ("kept in 16 bits (wraps at 2**16)", want % 2**16, want >= 2**16),
        ("kept in a signed 16-bit integer", ((want + 2**15) % 2**16) - 2**15, want >= 2**15),
        ("kept in 32 bits", ((want + 2**31) % 2**32) - 2**31, want >= 2**31),
    ]
    floats = []
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16"), (torch.float32, "float32")):
        r = torch.tensor(float(want), dtype=torch.float64).to(dtype).double()
        value = int(r) if torch.isfinite(r) else -1
        if value != want and value == got:
            floats.append(name)
    for what, value, applies in checks:
        if applies and value == got:
            return f" ({want} {what} gives {got}: the ids look narrowed)"
    if floats:
        return f" ({want} passed through {' or '.join(floats)} gives {got}: the ids look narrowed)"
    return ""


def _zero_padded(row: torch.Tensor, start: int) -> bool:
    """Does the row end in zeros from ``start`` on (at least one), where -1 padding belongs?"""
    tail = row[start:]
    return len(tail) > 0 and bool((tail == 0).all())


def _padded_lengths(rows: torch.Tensor, what: str) -> torch.Tensor:
    """Lengths of the non-negative prefix of each row; checks that the rest is all -1."""
    bad = (rows < -1).nonzero()
    if len(bad):
        b, j = bad[0].tolist()
        raise ContractViolation("padding", f"{what}[{b}, {j}] is {int(rows[b, j])}; padding must be -1", b)
    valid = rows >= 0
    lengths = valid.sum(dim=1)
    positions = torch.arange(rows.shape[1]).expand_as(rows)
    holes = valid & (positions >= lengths[:, None])
    if holes.any():
        b = int(holes.any(dim=1).nonzero()[0])
        raise ContractViolation(
            "padding", f"{what}[{b}] = {rows[b].tolist()}: a token after -1 padding (not contiguous)", b
        )
    return lengths


def check_chain_output(
    out: Any, draft_token_ids: torch.Tensor, vocab: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a chain verifier's output; return ``(tokens [B,K+1] int64, lengths [B])``."""
    B, K = draft_token_ids.shape
    t = _as_int_tensor(out, "output_token_ids")
    if tuple(t.shape) != (B, K + 1):
        raise ContractViolation(
            "shape",
            f"output_token_ids has shape {tuple(t.shape)}, expected {(B, K + 1)} (B rows, K + 1 = {K + 1} "
            "positions: accepted drafts, one more token, -1 padding)",
        )
    lengths = _padded_lengths(t, "output_token_ids")
    empty = (lengths == 0).nonzero()
    if len(empty):
        b = int(empty[0])
        raise ContractViolation("padding", f"output_token_ids[{b}] emits no token (all -1)", b)
    over = (t >= vocab).nonzero()
    if len(over):
        b, j = over[0].tolist()
        raise ContractViolation(
            "token_range",
            f"output_token_ids[{b}] = {t[b].tolist()}: position {j} holds {int(t[b, j])}, "
            f"outside [0, {vocab})",
            b,
        )
    drafts = draft_token_ids.to("cpu", torch.int64)
    accepted_region = torch.arange(K).expand(B, K) < (lengths - 1)[:, None]
    differs = accepted_region & (t[:, :K] != drafts)
    if differs.any():
        b, j = differs.nonzero()[0].tolist()
        row = f"output_token_ids[{b}] = {t[b].tolist()}, drafts {drafts[b].tolist()}"
        if _zero_padded(t[b], j + 1):
            raise ContractViolation(
                "padding",
                f"{row}: the row ends in 0s after position {j}; padding must be -1 (0 is a token id, "
                "so the 0s read as emitted tokens)",
                b,
            )
        got, want = int(t[b, j]), int(drafts[b, j])
        hint = narrowing_hint(got, want)
        raise ContractViolation(
            "id_narrowing" if hint else "not_draft",
            f"{row}: position {j} holds {got} but the draft there is {want}"
            f"{hint}; only the last emitted token may differ from the drafts",
            b,
        )
    return t, lengths


def check_tree_output(
    out: Any, parents: torch.Tensor, tokens: torch.Tensor, vocab: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a tree verifier's output; return ``(emitted [B,N] int64 -1 padded, lengths [B])``.

    The emitted tokens are the accepted drafts' tokens (root excluded), then ``next_token``.
    """
    B, N = parents.shape
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise ContractViolation(
            "type", f"a tree verifier returns (accepted_nodes, next_token); got {type(out).__name__}"
        )
    acc = _as_int_tensor(out[0], "accepted_nodes")
    nxt = _as_int_tensor(out[1], "next_token")
    if tuple(acc.shape) != (B, N):
        raise ContractViolation("shape", f"accepted_nodes has shape {tuple(acc.shape)}, expected {(B, N)}")
    if tuple(nxt.shape) != (B,):
        raise ContractViolation("shape", f"next_token has shape {tuple(nxt.shape)}, expected {(B,)}")
    lengths = _padded_lengths(acc, "accepted_nodes")
    if (acc >= N).any():
        b, j = (acc >= N).nonzero()[0].tolist()
        raise ContractViolation(
            "not_root_path",
            f"accepted_nodes[{b}] = {acc[b].tolist()}: position {j} holds {int(acc[b, j])}, "
            f"not a node of an {N}-node tree",
            b,
        )
    not_root = (lengths == 0) | (acc[:, 0] != 0)
    if not_root.any():
        b = int(not_root.nonzero()[0])
        raise ContractViolation(
            "not_root_path", f"accepted_nodes[{b}] = {acc[b].tolist()} does not start at node 0", b
        )
    par = parents.to("cpu", torch.int64)
    child, prev = acc[:, 1:], acc[:, :-1]
    live = child >= 0
    parent_of_child = torch.gather(par, 1, child.clamp(min=0))
    broken = live & (parent_of_child != prev)
    if broken.any():
        b, j = broken.nonzero()[0].tolist()
        if _zero_padded(acc[b], j + 1):
            raise ContractViolation(
                "padding",
                f"accepted_nodes[{b}] = {acc[b].tolist()} (parents {par[b].tolist()}): the row ends in 0s "
                f"after position {j}; padding must be -1 (0 is the root node)",
                b,
            )
        raise ContractViolation(
            "not_root_path",
            f"accepted_nodes[{b}] = {acc[b].tolist()} (parents {par[b].tolist()}): node {int(child[b, j])} "
            f"is not a child of node {int(prev[b, j])}",
            b,
        )
    bad = (nxt < 0) | (nxt >= vocab)
    if bad.any():
        b = int(bad.nonzero()[0])
        raise ContractViolation(
            "token_range",
            f"next_token[{b}] is {int(nxt[b])}, outside [0, {vocab}) "
            f"(accepted_nodes[{b}] = {acc[b].tolist()})",
            b,
        )
    toks = tokens.to("cpu", torch.int64)
    emitted = torch.full((B, N), -1, dtype=torch.int64)
    drafted = torch.gather(toks, 1, acc[:, 1:].clamp(min=0))
    emitted[:, : N - 1] = torch.where(live, drafted, torch.full_like(drafted, -1))
    rows = torch.arange(B)
    emitted[rows, lengths - 1] = nxt
    return emitted, lengths


def draw_seeds(generator: torch.Generator, n: int = 1) -> list[int]:
    """``n`` seeds drawn from a contract's ``generator``, for a verifier whose randomness comes
    from elsewhere (numpy, Python's ``random``, torch's global RNG, a CUDA generator, a
    per-request seed): the audit's seed then fixes its draws too."""
    return [int(s) for s in torch.randint(0, 2**62, (n,), generator=generator)]


def call_verifier(fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
    """Call a verifier; any exception it raises becomes a ``raised`` contract violation carrying
    its traceback. With ``timeout`` (seconds) the call runs in a daemon thread, and a call that
    has not returned by then is a ``timeout`` violation (the thread is abandoned)."""
    if timeout is None:
        return _call(fn, args)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["out"] = _call(fn, args)
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=run, name="specproof-verifier-call", daemon=True)
    t.start()
    try:
        t.join(timeout)
    except KeyboardInterrupt:
        t.join(min(timeout, 10.0))  # let the call leave native code before the interrupt goes on
        raise
    if t.is_alive():
        name = getattr(fn, "__name__", type(fn).__name__)
        raise ContractViolation(
            "timeout",
            f"{name} did not return within {timeout:g} s (a hang? if it is only slow, raise --call-timeout)",
        )
    if "error" in box:
        raise box["error"]
    return box["out"]


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    try:
        return fn(*args)
    except ContractViolation:
        raise
    except Exception as e:  # a black box may raise anything; all of it is a finding
        trace = "".join(_tb.format_exception(type(e), e, e.__traceback__))
        raise ContractViolation("raised", f"{type(e).__name__}: {e}", traceback=trace) from e
