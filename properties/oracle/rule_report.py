"""A new rule through the exact oracle: its matrix row, shrunk witnesses and a proof-note skeleton.

``rule_report(rule)`` runs a user's :class:`~specproof.reference.rules.Rule` under every proposal
process on the seeded instances of the exactness matrix (:func:`.matrix.random_instance`, drawn
in the same order, so a project rule gets exactly its row of ``specproof matrix``), each checked
by :func:`.exact.check` in Fraction arithmetic. Per process it gives a verdict, the largest TV,
whether that agrees with what the rule declares (``Rule.exact_for``) and, where the rule is
lossy, a witness shrunk by hypothesis (:mod:`.strategies`) or, failing that, the smallest seeded
instance on which it is lossy.

Cell verdicts (:class:`specproof.properties.verdicts.Verdict`):

* exact -- TV == 0 exactly on every seeded instance;
* lossy -- TV > 0 on some instance (the largest is reported, with a witness);
* not applicable -- a chain-only rule under a process that drafts trees;
* contract_violation -- the rule raised on valid input, or returned something that is not an
  Outcome on a root path of the tree with a token in the vocabulary (the message says which).

A cell *agrees* when it is exact and declared, or lossy / not applicable and not declared. The
command ``specproof rule FILE.py:NAME`` exits 0 when every cell agrees, 1 when some cell does
not, 2 on a contract violation and 4 on a usage error. The guide is docs/adding-a-rule.md;
checked by tests/test_rule_report.py.
"""

from __future__ import annotations

import inspect
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from specproof.properties.oracle.exact import Instance, OracleResult, check
from specproof.properties.oracle.matrix import Cell, random_instance
from specproof.properties.oracle.rule_loader import DECLARABLE as DECLARABLE
from specproof.properties.oracle.rule_loader import RuleContractError as RuleContractError
from specproof.properties.oracle.rule_loader import RuleSpecError, _q, _validate, _with_contract
from specproof.properties.oracle.rule_loader import load_rule as load_rule  # the generated tests' import
from specproof.properties.oracle.rule_loader import loader_line as loader_line
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import InternalError, NotFoundError
from specproof.reference.processes import PROCESSES
from specproof.reference.rules import RULES, Rule

#: The cell verdicts.
V_EXACT, V_LOSSY = Verdict.EXACT, Verdict.LOSSY
V_NOT_APPLICABLE, V_CONTRACT = Verdict.NOT_APPLICABLE, Verdict.CONTRACT_VIOLATION


def seeded_instances(instances: int, seed: int) -> dict[str, list[Instance]]:
    """The exactness matrix's instances: ``instances`` per process, drawn from one generator
    seeded ``seed`` in the order of :data:`PROCESSES` (as ``exactness_matrix`` draws them)."""
    rng = np.random.default_rng(seed)
    return {p: [random_instance(rng, p) for _ in range(instances)] for p in PROCESSES}


def _size(inst: Any) -> tuple[int, ...]:
    return (len(inst.shape), inst.vocab, inst.horizon, len(inst.prefix))


def shrink_witness(rule: Rule, process: str, max_examples: int = 200) -> OracleResult | None:
    """A small instance on which ``rule`` is lossy under ``process``: hypothesis searches
    (derandomized, vocabularies up to 3, trees up to 5 nodes) and shrinks; None if none found."""
    from hypothesis import HealthCheck, find, settings  # imported on use: the CLI starts faster
    from hypothesis.errors import NoSuchExample

    from specproof.properties.oracle import strategies as sps

    def lossy(inst: Instance) -> bool:
        try:
            return bool(check(rule, process, inst).tv > 0)
        except Exception:
            return False  # a contract violation is reported by the seeded run, not shrunk

    try:
        inst = find(
            sps.instances(process, max_vocab=3, max_nodes=5),
            lossy,
            settings=settings(
                max_examples=max_examples,
                derandomize=True,
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
    except NoSuchExample:
        return None
    return check(rule, process, inst)


def _frac(x: Any) -> str:
    return str(x)


def _approx(x: Any) -> str:
    return f"{float(x):.3g}"


@dataclass
class ProcessReport:
    """One cell of the rule's matrix row."""

    process: str
    verdict: Verdict
    declared_exact: bool
    agrees: bool
    instances: int
    tv: Any = None  # the largest TV over the seeded instances: a Fraction in exact arithmetic
    worst: OracleResult | None = field(default=None, repr=False)
    witness: OracleResult | None = field(default=None, repr=False)
    witness_source: str | None = None
    error: str | None = None
    seconds: float = 0.0
    #: Whether every probability the oracle computed was rational (the rule kept to Fractions),
    #: so that the TV is exact; False when the rule brought floats in.
    exact_arithmetic: bool = True

    def cell_text(self) -> str:
        """This cell as the README's matrix prints it."""
        if self.verdict == V_LOSSY:
            return f"lossy (TV {float(self.tv):.3g})" + ("" if self.agrees else " **!**")
        if self.verdict == V_EXACT:
            return "exact" + ("" if self.agrees else " **?**")
        if self.verdict == V_CONTRACT:
            return "contract violation"
        return "n/a"

    def matrix_cell(self, rule: str) -> Cell:
        """This cell as :class:`.matrix.Cell` (what ``exactness_matrix`` returns)."""
        return Cell(
            self.process,
            rule,
            self.verdict,
            None if self.tv is None else float(self.tv),
            self.declared_exact,
            self.agrees,
            self.instances,
            tv_exact=None if self.tv is None else str(self.tv),
            witness=None if self.worst is None or self.verdict != V_LOSSY else self.worst.summary(),
            seconds=self.seconds,
        )

    def to_json(self) -> dict[str, Any]:
        def res(r: OracleResult | None) -> dict[str, Any] | None:
            if r is None:
                return None
            return {
                "instance": repr(r.instance),
                "tv": float(r.tv),
                "tv_exact": str(r.tv),
                "horizon": r.horizon,
                "cells": [
                    {"tokens": list(s), "rule": str(got), "target": str(want)} for s, got, want in r.witness()
                ],
            }

        return {
            "process": self.process,
            "verdict": self.verdict.value,
            "declared_exact": self.declared_exact,
            "agrees": self.agrees,
            "instances": self.instances,
            "tv": None if self.tv is None else float(self.tv),
            "tv_exact": None if self.tv is None else str(self.tv),
            "exact_arithmetic": self.exact_arithmetic if self.tv is not None else None,
            "largest": res(self.worst) if self.verdict == V_LOSSY else None,
            "witness": res(self.witness),
            "witness_source": self.witness_source,
            "error": self.error,
            "seconds": self.seconds,
        }


def _where(fn: Callable[..., Any]) -> str:
    """``path/to/file.py::qualname`` (relative to the working directory when under it)."""
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        path = None
    name = getattr(fn, "__qualname__", repr(fn))
    if path is None:
        return f"{getattr(fn, '__module__', '?')}.{name}"
    rel = os.path.relpath(path)
    return f"{path if rel.startswith('..') else rel}::{name}"


def _slug(name: str) -> str:
    return re.sub(r"_+", "_", re.sub(r"[^0-9a-zA-Z]+", "_", name)).strip("_").lower() or "rule"


@dataclass
class RuleReport:
    """A rule's row of the exactness matrix, with witnesses; see the module docstring."""

    rule: Rule
    cells: list[ProcessReport]
    instances: int
    seed: int
    seconds: float
    source: str | None = None  # how the rule was named on the command line (FILE.py:NAME)
    loader: str | None = None  # the Python line that loads it again, for the test skeleton

    @property
    def agrees(self) -> bool:
        return all(c.agrees for c in self.cells)

    @property
    def exit_code(self) -> int:
        """0 every cell agrees, 1 some cell disagrees, 2 a contract violation."""
        if any(c.verdict == V_CONTRACT for c in self.cells):
            return V_CONTRACT.exit_code
        return 0 if self.agrees else 1

    def cell(self, process: str) -> ProcessReport:
        for c in self.cells:
            if c.process == process:
                return c
        raise NotFoundError(f"process {process!r} was not checked")

    def matrix_cells(self) -> list[Cell]:
        return [c.matrix_cell(self.rule.name) for c in self.cells]

    def _declared(self) -> str:
        d = sorted(self.rule.exact_for)
        return ", ".join(d) if d else "nothing"

    def markdown(self) -> str:
        """The rule's row in the README's matrix format, with its header."""
        procs = [c.process for c in self.cells]
        return "\n".join(
            [
                "| rule | " + " | ".join(procs) + " |",
                "|---|" + "---|" * len(procs),
                f"| {self.rule.name} | " + " | ".join(c.cell_text() for c in self.cells) + " |",
            ]
        )

    def _verdict_line(self, c: ProcessReport) -> str:
        n = c.instances
        if c.verdict == V_CONTRACT:
            return f"{c.process}: CONTRACT VIOLATION: {c.error}"
        if c.verdict == V_LOSSY:
            tv = f"largest TV {_frac(c.tv)} (~{_approx(c.tv)}) over {n} instances"
            if c.declared_exact:
                return f"{c.process}: LOSSY but declared exact: the declaration is refuted; {tv}"
            return f"{c.process}: lossy, not declared exact: agrees; {tv}"
        if c.verdict == V_NOT_APPLICABLE:
            return f"{c.process}: not applicable (chain-only rule)" + (
                "" if c.agrees else ", but declared exact: disagrees"
            )
        if c.declared_exact:
            return f"{c.process}: exact (TV = 0 exactly on {n} instances), as declared"
        return (
            f"{c.process}: exact on {n} instances, but not declared exact: no witness found "
            "(draw more instances, or declare it and prove it)"
        )

    def summary(self) -> str:
        """What a person reads: the row, a line per process, the witnesses, the verdict."""
        r = self.rule
        head = f"rule {r.name}" + (f" ({self.source})" if self.source else "")
        floats = [c.process for c in self.cells if c.tv is not None and not c.exact_arithmetic]
        arithmetic = (
            f"float64 arithmetic in {', '.join(floats)} (the rule left Fractions: TVs not exact)"
            if floats
            else "exact Fraction arithmetic"
        )
        lines = [
            head,
            f"declared exact for: {self._declared()}; preserves: {r.preserves}"
            + ("; chain-only" if r.chain_only else ""),
            f"{self.instances} seeded instances per process (seed {self.seed}), {arithmetic}, "
            f"{self.seconds:.1f} s",
            "",
            self.markdown(),
            "",
        ]
        lines += [self._verdict_line(c) for c in self.cells]
        unchecked = sorted(set(r.exact_for) - {c.process for c in self.cells})
        if unchecked:
            lines.append(
                f"declared but not checked here: {', '.join(unchecked)}"
                + (
                    " (a deterministic tree: checked through onehot_siblings, proofs_notes/processes.md)"
                    if set(unchecked) <= {"dynamic_tree"}
                    else ""
                )
            )
        for c in self.cells:
            if c.witness is None:
                continue
            if c.agrees:  # lossy as declared: one line
                w = c.witness
                lines.append(
                    f"witness for {c.process} ({c.witness_source}): "
                    f"TV {_frac(w.tv)} on {w.instance.describe()}"
                )
            else:
                lines += ["", f"witness for {c.process} ({c.witness_source}):", c.witness.summary()]
        bad = [c.process for c in self.cells if not c.agrees]
        lines.append("")
        if self.exit_code == V_CONTRACT.exit_code:
            lines.append(f"verdict: contract violation in {', '.join(bad)} (exit 2)")
        elif bad:
            lines.append(
                f"verdict: {len(bad)} of {len(self.cells)} cells disagree with the declaration (exit 1)"
            )
        else:
            lines.append(f"verdict: all {len(self.cells)} cells agree with the declaration (exit 0)")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule.name,
            "source": self.source,
            "declared_exact_for": sorted(self.rule.exact_for),
            "preserves": self.rule.preserves,
            "chain_only": self.rule.chain_only,
            "params": {k: str(v) for k, v in self.rule.params.items()},
            "instances": self.instances,
            "seed": self.seed,
            "agrees": self.agrees,
            "exit_code": self.exit_code,
            "seconds": self.seconds,
            "cells": [c.to_json() for c in self.cells],
        }

    def _loader(self) -> str:
        r = self.rule
        if self.loader:
            return self.loader
        if self.source:
            return f"RULE = load_rule({_q(self.source)})"
        if RULES.get(r.name) is r:
            return f"RULE = RULES[{_q(r.name)}]"
        return f"RULE = ...  # TODO: import your Rule ({r.fn.__module__}.{r.fn.__qualname__})"

    def note_skeleton(self) -> str:
        """A proofs_notes-style Markdown skeleton: statement, claimed processes, the proof to
        write, the witnesses of the lossy processes and the test that checks it."""
        r = self.rule
        slug = _slug(r.name)
        exact = [c.process for c in self.cells if c.verdict == V_EXACT and c.declared_exact]
        refuted = [c.process for c in self.cells if c.verdict == V_LOSSY and c.declared_exact]
        lossy = [c for c in self.cells if c.verdict == V_LOSSY]
        cmd = (
            f"specproof rule {self.source}"
            if self.source
            else f"rule_report(RULE, {self.instances}, {self.seed})"
        )
        code = f"`{_where(r.fn)}`" + (
            f", parameters {dict((k, str(v)) for k, v in r.params.items())}" if r.params else ""
        )
        law = (
            "its emitted tokens are the target's greedy decoding"
            if r.preserves == "greedy"
            else "the law of the emitted tokens, completed with target samples to the horizon, is the "
            "target's (proofs_notes/lossless_criterion.md)"
        )
        out = [
            f"# {r.name}",
            "",
            f"<!-- Skeleton from `{cmd}` (seed {self.seed}, {self.instances} instances per process). "
            "Replace every TODO; keep the witnesses (exact) and the test names. -->",
            "",
            f"TODO: the paper or source of the rule, in one line. Code: {code}.",
            "",
        ]
        if r.exact_for:
            out.append(f"**Statement.** Under {', '.join(sorted(r.exact_for))} the rule is lossless: {law}.")
        else:
            out.append(
                "**Statement.** The rule is not distribution-preserving: under every process it is "
                "run on, some instance has TV > 0."
            )
        out += [
            "",
            f"**What the oracle found** (`{cmd}`; {self.instances} seeded instances per process, "
            "exact Fraction arithmetic):",
            "",
            self.markdown(),
            "",
        ]
        out += [f"- {self._verdict_line(c)}" for c in self.cells]
        out.append("")
        if refuted:
            out += [
                f"**The declaration is refuted** under {', '.join(refuted)} (witnesses below): fix the rule, "
                "or remove these processes from `exact_for`, before writing a proof.",
                "",
            ]
        if exact:
            out += [
                f"**Proof** (for {', '.join(exact)}). TODO:",
                "",
                "1. One position: write P(first emitted token = y) as acceptance plus rejection followed "
                "by the residual draw, and show it equals the target's p(y) for every y.",
                "2. Given the first draft accepted, the rest of the step is the same rule on the "
                "conditional laws: conclude by induction on the depth and the lossless criterion.",
                "3. The degenerate cases (zero residual mass, q(x) = 0, one-hot drafts) and what the rule "
                "does there.",
                "",
            ]
        for c in lossy:
            out += self._witness_lines(c)
        out += [
            f"**Checked by:** `tests/test_{slug}.py` (to add):",
            "",
            "```python",
            *self._test(slug),
            "```",
        ]
        return "\n".join(out) + "\n"

    def _witness_lines(self, c: Any) -> list[str]:
        """A lossy process's witness in the note: its TV, instance and the table of its cells."""
        w = c.witness or c.worst
        if w is None:
            raise InternalError(f"{c.process}: a lossy cell without a witness")
        out = [
            f"**Witness, {c.process}** ({c.witness_source or 'largest TV of the seeded instances'}): "
            f"TV = {_frac(w.tv)} (~{_approx(w.tv)}) on `{w.instance.describe()}`, "
            f"horizon M = {w.horizon}.",
            "TODO: say why, in one sentence.",
            "",
            f"| next {w.horizon} tokens | rule | target |",
            "|---|---|---|",
        ]
        out += [f"| {seq} | {got} | {want} |" for seq, got, want in w.witness()]
        out.append("")
        return out

    def _test(self, slug: str) -> list[str]:
        exact = [c.process for c in self.cells if c.verdict == V_EXACT and c.declared_exact]
        lossy = [c for c in self.cells if c.verdict == V_LOSSY]
        imports = ["from fractions import Fraction", "", "import pytest"]
        if exact:
            imports.append("from hypothesis import given, settings")
        imports.append("")
        if exact:
            imports.append("from specproof.properties.oracle import strategies as sps")
        imports.append("from specproof.properties.oracle.exact import Instance, check")
        loader = self._loader()
        if loader.startswith("RULE = load_rule"):
            imports.append("from specproof.properties.oracle.rule_report import load_rule")
        elif loader.startswith("RULE = RULES"):
            imports.append("from specproof.reference.rules import RULES")
        lines = imports + ["", loader, ""]
        if exact:
            lines += [
                "",
                f'@pytest.mark.parametrize("process", [{", ".join(_q(p) for p in exact)}])',
                f"def test_{slug}_is_exact(process):",
                "    @settings(max_examples=12)",
                "    @given(sps.instances(process))",
                "    def run(instance):",
                "        res = check(RULE, process, instance)",
                "        assert res.tv == 0, res.summary()",
                "",
                "    run()",
                "",
            ]
        if lossy:
            lines += ["", "WITNESSES = {"]
            for c in lossy:
                w = c.witness or c.worst
                assert w is not None
                tv = repr(w.tv) if isinstance(w.tv, (int, Fraction)) else "None"
                lines.append(f"    {_q(c.process)}: ({w.instance!r}, {tv}),")
            lines += [
                "}",
                "",
                "",
                '@pytest.mark.parametrize("process", sorted(WITNESSES))',
                f"def test_{slug}_is_lossy_on_its_witness(process):",
                "    instance, tv = WITNESSES[process]",
                "    res = check(RULE, process, instance)",
                "    assert res.tv > 0 and (tv is None or res.tv == tv), res.summary()",
            ]
        return lines


def rule_report(
    rule: Rule,
    instances: int = 16,
    seed: int = 0,
    processes: Iterable[str] | None = None,
    shrink: bool = True,
    shrink_examples: int = 200,
    source: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> RuleReport:
    """``rule``'s row of the exactness matrix (see the module docstring).

    ``processes`` restricts the processes checked (the instances stay the matrix's);
    ``shrink`` False skips hypothesis and reports the smallest lossy seeded instance.
    """
    _validate(rule)
    if instances < 1:
        raise RuleSpecError(f"instances: must be >= 1, got {instances}")
    procs = list(PROCESSES) if processes is None else list(processes)
    for p in procs:
        if p not in PROCESSES:
            raise RuleSpecError(f"processes: unknown process {p!r}; known: {', '.join(PROCESSES)}")
    t_all = time.perf_counter()
    drawn = seeded_instances(instances, seed)
    checked = _with_contract(rule)
    cells: list[ProcessReport] = []
    for p in procs:
        t0 = time.perf_counter()
        if progress is not None:
            progress(p)
        declared = p in rule.exact_for
        if not rule.applies_to(PROCESSES[p].chain):
            cell = ProcessReport(p, V_NOT_APPLICABLE, declared, not declared, 0)
        else:
            cell = _run_cell(checked, p, drawn[p], declared, shrink, shrink_examples)
        cell.seconds = round(time.perf_counter() - t0, 3)
        cells.append(cell)
    return RuleReport(rule, cells, instances, seed, round(time.perf_counter() - t_all, 3), source)


def _run_cell(
    rule: Rule, process: str, drawn: list[Instance], declared: bool, shrink: bool, shrink_examples: int
) -> ProcessReport:
    worst: OracleResult | None = None
    smallest: OracleResult | None = None
    rational = True
    for inst in drawn:
        try:
            res = check(rule, process, inst)
        except Exception as e:  # the user's rule raised on valid input
            return ProcessReport(
                process,
                V_CONTRACT,
                declared,
                False,
                len(drawn),
                error=f"{type(e).__name__}: {e} (on {inst.describe()})",
            )
        rational = rational and all(isinstance(v, (int, Fraction)) for v in res.law.values())
        if worst is None or res.tv > worst.tv:
            worst = res
        if res.tv > 0 and (smallest is None or _size(inst) < _size(smallest.instance)):
            smallest = res
    assert worst is not None
    # with integer laws (point masses) tv_distance divides an int by 2: a float, but exact
    tv = Fraction(worst.tv) if rational else worst.tv
    if tv == 0:
        return ProcessReport(
            process, V_EXACT, declared, declared, len(drawn), tv=tv, worst=worst, exact_arithmetic=rational
        )
    assert smallest is not None
    witness, source = smallest, "smallest lossy seeded instance"
    if shrink:
        shrunk = shrink_witness(rule, process, shrink_examples)
        if shrunk is not None and _size(shrunk.instance) <= _size(smallest.instance):
            witness, source = shrunk, "shrunk by hypothesis"
    return ProcessReport(
        process,
        V_LOSSY,
        declared,
        not declared,
        len(drawn),
        tv=tv,
        worst=worst,
        witness=witness,
        witness_source=source,
        exact_arithmetic=rational,
    )


# --- loading a rule named on the command line -------------------------------------------------
