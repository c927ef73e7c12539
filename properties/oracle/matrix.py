"""The exactness matrix: proposal process x rule, each cell checked exactly.

For every process the same seeded instances (toy target/draft pairs, tree shapes, prefixes)
are drawn once; every rule is run on them through the exact oracle with Fraction arithmetic.
A cell's verdict (a :class:`~specproof.properties.verdicts.Verdict`; JSON holds its value) is

* ``exact`` — TV == 0 exactly on every instance checked;
* ``lossy`` — TV > 0 on some instance; ``tv`` is the largest TV seen and ``witness`` describes
  that instance and its most deviating cells;
* ``not_applicable`` — a chain-only rule under a process that drafts trees.

Each cell also says whether the rule *declares* itself exact for that process and whether the
measurement agrees. A declared-exact cell found lossy is a bug in the rule; a declared-lossy cell
found exact means the instances found no witness (draw more).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np

from specproof.properties.oracle.exact import Instance, check, max_drafts
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError
from specproof.reference.models import STYLES
from specproof.reference.processes import PROCESSES
from specproof.reference.rules import RULES

EXACT, LOSSY, NOT_APPLICABLE = Verdict.EXACT, Verdict.LOSSY, Verdict.NOT_APPLICABLE


@dataclass
class Cell:
    process: str
    rule: str
    verdict: Verdict
    tv: float | None
    declared_exact: bool
    agrees: bool
    instances: int
    tv_exact: str | None = None
    witness: str | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["verdict"] = self.verdict.value
        return out


def _random_shape(rng: np.random.Generator, chain: bool, vocab: int, max_cells: int) -> tuple[int, ...]:
    drafts = max_drafts(vocab, max_cells)
    if chain:
        k = int(rng.integers(1, min(3, drafts) + 1))
        return (-1,) + tuple(range(k))
    n = int(rng.integers(3, min(7, drafts + 1) + 1))
    while True:
        parents, depth = [-1], [0]
        for _ in range(1, n):
            options = [j for j in range(len(parents)) if depth[j] < 3]
            p = int(rng.choice(options))
            parents.append(p)
            depth.append(depth[p] + 1)
        if max(parents.count(j) for j in range(n)) >= 2:
            return tuple(parents)


def random_instance(
    rng: np.random.Generator, process: str, max_vocab: int = 4, max_cells: int = 400
) -> Instance:
    """A seeded oracle instance for ``process`` (same distribution as the hypothesis strategy)."""
    vocab = int(rng.integers(2, max_vocab + 1))
    shape = _random_shape(rng, PROCESSES[process].chain, vocab, max_cells)

    def styles() -> tuple[str, ...]:
        k = int(rng.integers(1, 4))
        return tuple(str(s) for s in rng.choice(STYLES, size=k, replace=False))

    overlap = [Fraction(0), Fraction(1, 2), Fraction(1), Fraction(int(rng.integers(1, 7)), 7)][
        int(rng.integers(4))
    ]
    return Instance(
        vocab=vocab,
        shape=shape,
        target_seed=int(rng.integers(2**16)),
        target_styles=styles(),
        draft_seed=int(rng.integers(2**16)),
        draft_styles=styles(),
        overlap=overlap,
        prefix=tuple(int(x) for x in rng.integers(0, vocab, size=int(rng.integers(1, 3)))),
    )


def exactness_matrix(
    instances: int = 8,
    seed: int = 0,
    rules: Iterable[str] | None = None,
    processes: Iterable[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[Cell]:
    """Check every (process, rule) cell on ``instances`` seeded instances per process."""
    if instances < 1:
        raise UsageError(f"instances: must be >= 1, got {instances}")
    rule_names = list(RULES) if rules is None else list(rules)
    proc_names = list(PROCESSES) if processes is None else list(processes)
    for r in rule_names:
        if r not in RULES:
            raise UsageError(f"rules: unknown rule {r!r}; known: {', '.join(RULES)}")
    for p in proc_names:
        if p not in PROCESSES:
            raise UsageError(f"processes: unknown process {p!r}; known: {', '.join(PROCESSES)}")
    rng = np.random.default_rng(seed)
    cells: list[Cell] = []
    total, done = len(rule_names) * len(proc_names), 0
    for p in proc_names:
        drawn = [random_instance(rng, p) for _ in range(instances)]
        for r in rule_names:
            rule = RULES[r]
            declared = p in rule.exact_for
            t0 = time.perf_counter()
            if not rule.applies_to(PROCESSES[p].chain):
                cell = Cell(
                    process=p,
                    rule=r,
                    verdict=NOT_APPLICABLE,
                    tv=None,
                    declared_exact=declared,
                    agrees=not declared,
                    instances=0,
                )
            else:
                worst = None
                for inst in drawn:
                    res = check(rule, p, inst)
                    if worst is None or res.tv > worst.tv:
                        worst = res
                assert worst is not None
                verdict = worst.verdict
                cell = Cell(
                    process=p,
                    rule=r,
                    verdict=verdict,
                    tv=float(worst.tv),
                    declared_exact=declared,
                    agrees=(verdict == EXACT) == declared,
                    instances=len(drawn),
                    tv_exact=str(worst.tv),
                    witness=None if verdict == EXACT else worst.summary(),
                )
            cell.seconds = round(time.perf_counter() - t0, 3)
            cells.append(cell)
            done += 1
            if progress is not None:
                progress(done, total, f"{p} x {r}: {cell.verdict}")
    return cells


def markdown(cells: list[Cell]) -> str:
    """The matrix as a Markdown table, rules as rows and processes as columns."""
    procs = list(dict.fromkeys(c.process for c in cells))
    rules = list(dict.fromkeys(c.rule for c in cells))
    by = {(c.process, c.rule): c for c in cells}
    lines = ["| rule | " + " | ".join(procs) + " |", "|---|" + "---|" * len(procs)]
    for r in rules:
        row = []
        for p in procs:
            c = by.get((p, r))
            if c is None:
                row.append("")
            elif c.verdict == LOSSY:
                row.append(f"lossy (TV {c.tv:.3g})" + ("" if c.agrees else " **!**"))
            elif c.verdict == EXACT:
                row.append("exact" + ("" if c.agrees else " **?**"))
            else:
                row.append("n/a")
        lines.append(f"| {r} | " + " | ".join(row) + " |")
    return "\n".join(lines)
