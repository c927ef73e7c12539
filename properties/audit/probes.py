"""Id-range probes: deterministic calls whose laws sit on the largest token ids.

A verifier that keeps token ids in 16 bits, or passes them through float16, bfloat16 or
float32, is right on every small vocabulary and wrong only on large ids. A statistical case at
V = 152,064 needs many expensive steps to see that; a probe needs one call. Each probe row puts
the whole target mass on one id ``X`` (``p = delta_X`` at every node), so whatever the rule and
its randomness, a lossless verifier can emit nothing but ``X``:

* the *accept* row drafts ``X`` (draft law ``delta_X``): ``X`` is accepted at every position and
  the bonus token is ``X`` again;
* the *reject* row drafts another id ``Y`` (draft law ``delta_Y``, target mass 0): every draft is
  rejected and the corrected token, drawn from the residual ``delta_X``, is ``X``.

The ids: ``V - 1``, ``2**15``, ``2**16 - 1``, ``2**16``, ``2**16 + 1`` at V = 262,144 (the size of
the largest vocabularies in use), and ``2**24 + 1`` at V = 2**24 + 2, the smallest id that float32
cannot hold (one row each way; the call moves about 400 MB). A verifier may refuse that second
size (``torch.multinomial`` takes at most 2**24 categories): it is beyond every real vocabulary,
so a refusal there is recorded, not a violation. ``2**31 - 1`` is not probed: no dense law over
2**31 ids fits in memory, and ids of real vocabularies stay far below it.

A wrong id is named: when the emitted id is ``X`` narrowed (16-bit wrap, a float round trip) the
violation is ``id_narrowing`` (:func:`.contracts.narrowing_hint`); any other id is a token the law
gives probability 0, a hard failure. Checked by tests/test_audit_instrument.py (the 16-bit and
bfloat16 mutants are caught by the probes within seconds whatever the budget).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specproof.properties.conformance.contracts import (
    ContractViolation,
    check_chain_output,
    check_tree_output,
    narrowing_hint,
)
from specproof.reference.processes import PROCESSES

BIG_V = 262_144
F32_V = 2**24 + 2
PROBE_IDS = (BIG_V - 1, 2**15, 2**16 - 1, 2**16, 2**16 + 1)
F32_IDS = (2**24 + 1,)
#: the draft a reject row proposes instead of X (an id with no target mass)
OTHER = 3


@dataclass
class Probe:
    """One verifier call: its arguments, and the id every row must emit."""

    name: str
    kind: str  # "chain" or "tree"
    process: str
    vocab: int
    args: tuple  # the contract's arguments, generator excluded
    want: list[int]  # per row: the only id the row may emit
    rows: list[str]  # per row: what it is ("accept 65537", ...)

    def describe(self) -> str:
        return f"{self.name}: {self.process}, V={self.vocab}, rows {', '.join(self.rows)}"


def _chain_probe(process: str, vocab: int, ids: tuple[int, ...], K: int = 2) -> Probe:
    rows = [(x, x) for x in ids] + [(x, OTHER) for x in ids]  # (target id, drafted id)
    B, V = len(rows), vocab
    drafts = torch.tensor([[d] * K for _, d in rows], dtype=torch.int64)
    target = torch.zeros(B, K + 1, V, dtype=torch.float32)
    for b, (x, _) in enumerate(rows):
        target[b, :, x] = 1.0
    draft = None
    if PROCESSES[process].gives_draft_probs:
        draft = torch.zeros(B, K, V, dtype=torch.float32)
        for b, (_, d) in enumerate(rows):
            draft[b, :, d] = 1.0
    names = [f"{'accept' if x == d else 'reject'} {x}" for x, d in rows]
    tag = process.split("_")[0]
    return Probe(
        f"probe/{tag}/V{V}", "chain", process, V, (drafts, draft, target), [x for x, _ in rows], names
    )


def _tree_probe(process: str, vocab: int, ids: tuple[int, ...]) -> Probe:
    """Two siblings under the root: the accept row drafts (X, Y), the reject row (Y, Z)."""
    other2 = OTHER + 1
    rows = [(x, (x, OTHER)) for x in ids] + [(x, (OTHER, other2)) for x in ids]
    B, V, N = len(rows), vocab, 3
    parents = torch.tensor([[-1, 0, 0]] * B, dtype=torch.int64)
    tokens = torch.tensor([[x, a, c] for x, (a, c) in rows], dtype=torch.int64)
    target = torch.zeros(B, N, V, dtype=torch.float32)
    for b, (x, _) in enumerate(rows):
        target[b, :, x] = 1.0
    draft = None
    if PROCESSES[process].gives_draft_probs:
        draft = torch.zeros(B, N, V, dtype=torch.float32)
        for b, (_, (a, c)) in enumerate(rows):
            draft[b, 0, a] = 0.5
            draft[b, 0, c] = 0.5
            draft[b, 1:, :] = target[b, 1:, :]  # leaves: never drafted from; any valid law
    names = [f"{'accept' if a == x else 'reject'} {x}" for x, (a, _) in rows]
    tag = process.split("_")[0]
    return Probe(
        f"probe/{tag}/V{V}", "tree", process, V, (parents, tokens, draft, target), [x for x, _ in rows], names
    )


def probes(kind: str, processes: tuple[str, ...], wide: bool = True) -> list[Probe]:
    """The probes for a verifier of this kind under these processes: V = 262,144, and with
    ``wide`` also V = 2**24 + 2 (too slow for an interpreted kernel: one program walks 2**24 ids)."""
    out = []
    for proc in processes:
        make = _chain_probe if kind == "chain" else _tree_probe
        out.append(make(proc, BIG_V, PROBE_IDS))
        if not wide:
            continue
        if kind == "chain":
            out.append(_chain_probe(proc, F32_V, F32_IDS, K=1))
        else:
            out.append(_tree_probe(proc, F32_V, F32_IDS))
    return out


def check_probe(probe: Probe, out: object) -> dict[str, object] | None:
    """Validate a probe's output: a contract violation raises; a row that emits another id is an
    ``id_narrowing`` violation when the id is ``X`` narrowed, otherwise a hard failure (returned
    as a dict, like the audit's). ``None`` when every row emitted only its id."""
    if probe.kind == "chain":
        drafts, _, _ = probe.args
        emitted, lengths = check_chain_output(out, drafts, probe.vocab)
    else:
        parents, tokens, _, _ = probe.args
        emitted, lengths = check_tree_output(out, parents, tokens, probe.vocab)
    for b, x in enumerate(probe.want):
        row = emitted[b, : int(lengths[b])].tolist()
        for y in row:
            if y == x:
                continue
            hint = narrowing_hint(int(y), x)
            detail = (
                f"{probe.name}, row {b} ({probe.rows[b]}): the target puts all its mass on id {x}, "
                f"but the row emitted {row}"
            )
            if hint:
                raise ContractViolation("id_narrowing", detail + hint, b)
            return {"detail": detail + f"; id {y} has probability 0", "emitted": row, "want": x, "row": b}
    return None
