"""The exactness matrix, extended to request parameters: every parameter x proposer x exact rule,
two decoding steps enumerated exactly on the 4-token transformer target.

For each sampling request of :data:`PARAMETERS` (penalties, bans, a grammar, end of sequence, stop
strings, the cut-offs) and each proposer with each rule declared exact for its process, the target's law at
every node is the request's processed law with that node's own context, and the drafts come from
the draft model's law processed the same way (:class:`~specproof.reference.sampling.ProcessedLM`).
:func:`~.exact.multi_step_check` enumerates the law of the tokens two steps emit and compares it
with the processed target's own law of as many tokens: ``exact`` when they agree (TV below
1e-12 in float64), ``lossy`` otherwise (proofs_notes/sampling_params.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specproof.properties.oracle.exact import multi_step_check
from specproof.properties.verdicts import Verdict
from specproof.reference.decode import EXACT_PREFIX, e2e_models
from specproof.reference.proposers import PROPOSERS
from specproof.reference.proposers.selfdraft import as_drafter
from specproof.reference.rules import RULES
from specproof.reference.sampling import Grammar, ProcessedLM, Sampling
from specproof.reference.transformer import TransformerLM

#: the 4-token target's token texts, for a grammar written as a regex over them
TEXTS = ("a", "b", "c", "d")
EOS = 3  # the end-of-sequence id of the requests that use one ("d")
STEPS = 2
TOL = 1e-12

PARAMETERS: dict[str, Sampling] = {
    "temperature 0.7": Sampling(0.7),
    "top_k 2": Sampling(1.0, top_k=2),
    "top_p 0.7": Sampling(1.0, top_p=0.7),
    "min_p 0.3": Sampling(1.0, min_p=0.3),
    "repetition_penalty 1.8": Sampling(1.0, repetition_penalty=1.8),
    "presence 0.8, frequency 0.5": Sampling(1.0, presence_penalty=0.8, frequency_penalty=0.5),
    "logit_bias": Sampling(1.0, logit_bias=((1, 1.5), (2, -math.inf))),
    "bad_words": Sampling(1.0, bad_words=((0, 1), (2, 2))),
    "no_repeat_ngram 2": Sampling(1.0, no_repeat_ngram_size=2),
    "eos absorbing": Sampling(1.0, eos=EOS),
    "min_new_tokens 2": Sampling(1.0, eos=EOS, min_new_tokens=2),
    "grammar (ab|c)+": Sampling(1.0, eos=EOS, grammar=Grammar.from_regex("(ab|c)+", TEXTS)),
    "stop 'ba' or 'c'": Sampling(1.0, stop=("ba", "c"), texts=TEXTS),
}


def for_rule(s: Sampling, rule: str) -> Sampling:
    """The request at temperature 0 for a rule that preserves greedy decoding."""
    if RULES[rule].preserves != "greedy":
        return s
    from dataclasses import replace

    return replace(s, temperature=0.0)


@dataclass
class ParamCell:
    parameter: str
    proposer: str
    process: str
    rule: str
    tv: float
    seconds: float

    @property
    def verdict(self) -> Verdict:
        return Verdict.EXACT if self.tv < TOL else Verdict.LOSSY

    def to_json(self) -> dict[str, Any]:
        return {
            "parameter": self.parameter,
            "proposer": self.proposer,
            "process": self.process,
            "rule": self.rule,
            "tv": self.tv,
            "verdict": self.verdict.value,
        }


def check_cell(parameter: str, proposer: str, rule: str, sampling: Sampling | None = None) -> ParamCell:
    """One cell: ``proposer``'s first process verified by ``rule`` under the request, on the
    4-token target after :data:`~specproof.reference.decode.EXACT_PREFIX`, two steps."""
    t0 = time.perf_counter()
    p = PROPOSERS[proposer]
    small, _ = e2e_models()
    s = for_rule(sampling or PARAMETERS[parameter], rule)
    prompt_len = len(EXACT_PREFIX)
    target = ProcessedLM(TransformerLM(p.verifying_target(small)), s, prompt_len)
    drafter = as_drafter(p.make_drafter(small, trained=False))

    def processed_drafter(ctx: tuple[int, ...]) -> ProcessedLM:
        return ProcessedLM(drafter(ctx), s, prompt_len)

    proc = p.processes[0]
    tv, _ = multi_step_check(rule, proc, target, processed_drafter, p.exact_shape, EXACT_PREFIX, STEPS)
    return ParamCell(parameter, proposer, proc.name, rule, float(tv), time.perf_counter() - t0)


def params_matrix(
    parameters: Sequence[str] | None = None,
    proposers: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[ParamCell]:
    """Every (parameter, proposer, exact rule) cell, or those named."""
    cells = []
    for name in parameters or list(PARAMETERS):
        for proposer in proposers or list(PROPOSERS):
            for rule in PROPOSERS[proposer].exact_rules():
                cell = check_cell(name, proposer, rule)
                if progress:
                    progress(f"{name} x {proposer} x {rule}: {cell.verdict.value} (TV {cell.tv:.2g})")
                cells.append(cell)
    return cells


def markdown(cells: Sequence[ParamCell]) -> str:
    """Parameters down, proposer x rule across: ``exact`` or the TV of a lossy cell."""
    columns = list(dict.fromkeys((c.proposer, c.rule) for c in cells))
    rows = list(dict.fromkeys(c.parameter for c in cells))
    by = {(c.parameter, c.proposer, c.rule): c for c in cells}
    head = "| parameter | " + " | ".join(f"{p} x {r}" for p, r in columns) + " |"
    lines = [head, "|---|" + "---|" * len(columns)]
    for name in rows:
        marks = []
        for p, r in columns:
            c = by.get((name, p, r))
            marks.append(
                "" if c is None else ("exact" if c.verdict == Verdict.EXACT else f"**TV {c.tv:.2g}**")
            )
        lines.append(f"| `{name}` | " + " | ".join(marks) + " |")
    return "\n".join(lines)
