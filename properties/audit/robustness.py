"""The robustness battery: what a black-box verifier does with malformed input.

The law audit feeds valid inputs only. An engine also meets broken ones (a NaN from an overflow,
a draft id from another vocabulary, a corrupted tree), and a verifier that silently returns
tokens from a NaN row is a bug waiting to ship. Each malformed input of :func:`malformed` is fed
to the verifier in a child process (``fork``), one at a time, and classified as

* ``raised`` — the verifier refused it with an exception (good; the message is kept, and whether
  it names the argument);
* ``returned`` — it returned an output; the report says what (e.g. the ids emitted from a NaN row).
  For the two edge inputs that are valid (a one-node tree, a chain of no drafts) a valid output is
  fine too;
* ``hung`` — no answer within the timeout (the child is killed);
* ``crashed`` — the child process died (a segfault, an abort in a kernel).

This is its own section and verdict (``robust`` or ``fragile``), never mixed into the law verdict
of the audit (:mod:`.audit`). Checked by tests/test_robustness.py.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

from specproof.properties.audit.battery import Case, build_models, chain, sample_inputs
from specproof.properties.conformance.backends import Backend

TREE = (-1, 0, 0, 1)


@dataclass
class Malformed:
    name: str
    what: str
    args: tuple  # the contract's arguments, generator excluded
    edge: bool = False  # a valid edge case: a valid output is as good as an exception
    argument: str = ""  # the argument a good message names


@dataclass
class Outcome:
    name: str
    what: str
    status: str  # raised, returned, hung, crashed
    detail: str
    edge: bool = False
    names_argument: bool = False

    @property
    def good(self) -> bool:
        if self.status == "raised":
            return True
        return self.edge and self.status == "returned" and self.detail.startswith("valid")

    def to_json(self) -> dict[str, Any]:
        return {
            "input": self.name,
            "what": self.what,
            "status": self.status,
            "detail": self.detail,
            "edge": self.edge,
            "good": self.good,
            "names_argument": self.names_argument,
        }


@dataclass
class RobustnessResult:
    backend: str
    kind: str
    outcomes: list[Outcome] = field(default_factory=list)
    note: str = ""

    @property
    def verdict(self) -> str:
        return "robust" if all(o.good for o in self.outcomes) else "fragile"

    def summary(self) -> str:
        lines = [f"robustness of {self.backend} ({self.kind}): {self.verdict.upper()}"]
        for o in self.outcomes:
            mark = "ok " if o.good else "BAD"
            lines.append(f"  {mark} {o.name:22s} {o.status:8s} {o.detail[:110]}")
        if self.note:
            lines.append(f"  {self.note}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "backend": self.backend,
            "kind": self.kind,
            "outcomes": [o.to_json() for o in self.outcomes],
            "note": self.note,
        }

    def blocks(self) -> list[tuple[str, Any]]:
        rows = [
            [o.name, o.what, o.status, "yes" if o.good else "**no**", o.detail[:160]] for o in self.outcomes
        ]
        return [
            ("h2", f"Robustness of {self.backend} ({self.kind}): {self.verdict}"),
            ("table", (["input", "what", "outcome", "good", "detail"], rows)),
        ]


def _base(kind: str, process: str, rows: int = 2) -> tuple[tuple, int]:
    """A valid batch to corrupt: V = 8, a chain of 2 drafts or a 4-node tree."""
    parents = chain(2) if kind == "chain" else TREE
    case = Case(f"robust/{process}", process, parents, 8, styles=("random",), seed=5)
    inputs = sample_inputs(build_models(case), rows, torch.Generator().manual_seed(0))
    if kind == "chain":
        return inputs.chain_args(), 8
    return (inputs.parents, inputs.tokens, inputs.draft_probs, inputs.target_probs), 8


def malformed(kind: str, process: str) -> list[Malformed]:
    """The malformed inputs for a verifier of this kind under this process."""
    base, V = _base(kind, process)
    out: list[Malformed] = []
    tp_i, dp_i, tok_i = (2, 1, 0) if kind == "chain" else (3, 2, 1)

    def edit(name: str, what: str, index: int, change: Any, argument: str, edge: bool = False) -> None:
        args = [a.clone() if isinstance(a, torch.Tensor) else a for a in base]
        change(args[index])
        out.append(Malformed(name, what, tuple(args), edge, argument))

    def nan(t: torch.Tensor) -> None:
        t[0, 0, :] = float("nan")

    def inf(t: torch.Tensor) -> None:
        t[0, 0, 0] = float("inf")

    def negative(t: torch.Tensor) -> None:
        t[0, 0, 0] -= 0.25
        t[0, 0, 1] += 0.25

    def half(t: torch.Tensor) -> None:
        t[0, 0] *= 0.5

    def big_id(t: torch.Tensor) -> None:
        t[0, -1] = V

    def negative_id(t: torch.Tensor) -> None:
        t[0, -1] = -5

    edit("nan_target_row", "a target row of NaN", tp_i, nan, "target_probs")
    edit("inf_target", "an infinite target entry", tp_i, inf, "target_probs")
    edit("negative_target", "a negative target entry (row still sums to 1)", tp_i, negative, "target_probs")
    edit("unnormalized_target", "a target row summing to 0.5", tp_i, half, "target_probs")
    edit(
        "draft_id_too_large",
        f"a draft id equal to V = {V}",
        tok_i,
        big_id,
        "draft_token_ids" if kind == "chain" else "tokens",
    )
    edit(
        "draft_id_negative",
        "a draft id of -5",
        tok_i,
        negative_id,
        "draft_token_ids" if kind == "chain" else "tokens",
    )
    if base[dp_i] is not None:
        edit("nan_draft_row", "a draft row of NaN", dp_i, nan, "draft_probs")
        out.append(_zero_draft(kind, base))
    out += _chain_edges(base) if kind == "chain" else _tree_edges(base)
    return out


def _zero_draft(kind: str, base: tuple) -> Malformed:
    """A drafted token whose draft probability is 0 (the draft row renormalized without it)."""
    args = [a.clone() if isinstance(a, torch.Tensor) else a for a in base]
    if kind == "chain":
        x = int(args[0][0, 0])
        args[1][0, 0, x] = 0.0
        args[1][0, 0] /= args[1][0, 0].sum()
    else:
        x = int(args[1][0, 1])
        args[2][0, 0, x] = 0.0
        args[2][0, 0] /= args[2][0, 0].sum()
    return Malformed(
        "zero_draft_probability",
        "a drafted token whose draft probability is 0",
        tuple(args),
        False,
        "draft_probs",
    )


def _chain_edges(base: tuple) -> list[Malformed]:
    """A chain's edge case: no drafts at all (valid: one token is emitted)."""
    d, dp, tp = base
    empty = (
        d[:, :0].contiguous(),
        None if dp is None else dp[:, :0].contiguous(),
        tp[:, :1].contiguous(),
    )
    return [Malformed("no_drafts", "a chain of K = 0 drafts (valid: emit one token)", empty, True)]


def _tree_edges(base: tuple) -> list[Malformed]:
    """A tree's malformed parents (a cycle, a parent after its child, a node its own parent) and
    its edge case, the root alone (valid: one token is emitted)."""
    parents, tokens, dp, tp = base

    def tree_with(par: list[int]) -> tuple:
        p = torch.tensor([par] * parents.shape[0], dtype=torch.int64)
        return (p, tokens.clone(), None if dp is None else dp.clone(), tp.clone())

    bad = (
        ("cyclic_parents", "parents [-1, 2, 1, 1]: nodes 1 and 2 form a cycle", [-1, 2, 1, 1]),
        ("forward_parent", "parents [-1, 0, 3, 0]: node 2's parent comes after it", [-1, 0, 3, 0]),
        ("self_parent", "parents [-1, 1, 0, 1]: node 1 is its own parent", [-1, 1, 0, 1]),
    )
    out = [Malformed(name, what, tree_with(par), False, "parents") for name, what, par in bad]
    one = (
        parents[:, :1].contiguous(),
        tokens[:, :1].contiguous(),
        None if dp is None else dp[:, :1].contiguous(),
        tp[:, :1].contiguous(),
    )
    out.append(Malformed("one_node_tree", "a tree of the root alone (valid: emit one token)", one, True))
    return out


def _describe(out: Any, m: Malformed) -> str:
    """What a returned output is: valid per the contract, or not, and its tokens."""
    from specproof.properties.conformance.contracts import (
        ContractViolation,
        check_chain_output,
        check_tree_output,
    )

    V = 8
    try:
        if isinstance(out, (tuple, list)) and len(out) == 2:
            acc, nxt = out
            text = (
                f"accepted_nodes {torch.as_tensor(acc).tolist()}, next_token {torch.as_tensor(nxt).tolist()}"
            )
            check_tree_output(out, m.args[0], m.args[1], V)
        else:
            text = f"output_token_ids {torch.as_tensor(out).tolist()}"
            check_chain_output(out, m.args[0], V)
    except ContractViolation as e:
        return f"invalid output [{e.kind}]: {text}"
    except Exception as e:  # an output we cannot even read
        return f"unreadable output ({type(e).__name__}: {e})"
    return f"valid output: {text}"


def _child(backend_fn: Any, inputs: list[Malformed], start: int, conn: Any) -> None:
    torch.set_num_threads(1)
    for i in range(start, len(inputs)):
        m = inputs[i]
        try:
            out = backend_fn(*m.args, torch.Generator().manual_seed(i))
            conn.send((i, "returned", _describe(out, m), False))
        except Exception as e:
            first = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            named = bool(m.argument) and m.argument in str(e)
            conn.send((i, "raised", first, named))
        except BaseException:  # SystemExit and the like: report, then stop
            conn.send((i, "raised", traceback.format_exc().splitlines()[-1], False))
    conn.close()


def _lost(m: Malformed, status: str, detail: str) -> Outcome:
    """The outcome of an input whose child never answered: it ``crashed`` or ``hung``."""
    return Outcome(m.name, m.what, status, detail, m.edge)


def robustness(
    backend: Backend, target: str | None = None, timeout: float = 30.0, process: str | None = None
) -> RobustnessResult:
    """Feed every malformed input to ``backend`` in a forked child; classify each."""
    process = process or backend.processes[0]
    inputs = malformed(backend.kind, process)
    result = RobustnessResult(backend.name, backend.kind)
    if "fork" not in mp.get_all_start_methods():
        result.note = "no fork on this platform: inputs run in this process (a crash would end the run)"
        return _inline(backend, inputs, result)
    ctx = mp.get_context("fork")
    i = 0
    while i < len(inputs):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(backend.fn, inputs, i, child), daemon=True)
        proc.start()
        child.close()
        while i < len(inputs):
            if parent.poll(timeout):
                try:
                    j, status, detail, named = parent.recv()
                except EOFError:
                    proc.join(5)
                    code = proc.exitcode
                    why = (
                        f"signal {signal.Signals(-code).name}"
                        if code is not None and code < 0
                        else f"exit {code}"
                    )
                    result.outcomes.append(_lost(inputs[i], "crashed", f"the process died ({why})"))
                    i += 1
                    break
                m = inputs[j]
                result.outcomes.append(Outcome(m.name, m.what, status, detail, m.edge, named))
                i = j + 1
            else:
                proc.kill()
                proc.join(5)
                result.outcomes.append(_lost(inputs[i], "hung", f"no answer within {timeout:g} s"))
                i += 1
                break
        else:
            proc.join(5)
        parent.close()
        if proc.is_alive():
            proc.kill()
    return result


def _inline(backend: Backend, inputs: list[Malformed], result: RobustnessResult) -> RobustnessResult:
    for i, m in enumerate(inputs):
        try:
            out = backend.fn(*m.args, torch.Generator().manual_seed(i))
            result.outcomes.append(Outcome(m.name, m.what, "returned", _describe(out, m), m.edge))
        except Exception as e:
            result.outcomes.append(
                Outcome(
                    m.name,
                    m.what,
                    "raised",
                    f"{type(e).__name__}: {e}".splitlines()[0],
                    m.edge,
                    m.argument in str(e),
                )
            )
    return result


def table(results: list[RobustnessResult]) -> str:
    """One Markdown row per backend, one column per malformed input (chain and tree apart)."""
    lines = []
    for kind in ("chain", "tree"):
        rows = [r for r in results if r.kind == kind]
        if not rows:
            continue
        names = list(dict.fromkeys(o.name for r in rows for o in r.outcomes))
        lines.append("| backend | verdict | " + " | ".join(n.replace("_", " ") for n in names) + " |")
        lines.append("|---|---|" + "---|" * len(names))
        for r in rows:
            by = {o.name: o for o in r.outcomes}
            cells = []
            for n in names:
                o = by.get(n)
                if o is None:
                    cells.append("-")
                else:
                    word = o.status if o.status != "returned" else ("valid" if o.good else "returned")
                    cells.append(word if o.good else f"**{word}**")
            lines.append(f"| {r.backend} | {r.verdict} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


__all__ = ["Malformed", "Outcome", "RobustnessResult", "malformed", "robustness", "table"]
