"""A user's rule, loaded and held to its contract: ``path/to/file.py:NAME`` or ``module:NAME``
read as a :class:`~specproof.reference.rules.Rule` (or a function wrapped as one, its declaration
given beside it), validated, and every Outcome it returns checked (``specproof rule``,
:func:`~specproof.properties.oracle.rule_report.rule_report`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from specproof.properties._imports import import_where
from specproof.reference.errors import UsageError
from specproof.reference.processes import PROCESSES
from specproof.reference.rules import ALL_PROCESSES, Rule
from specproof.reference.step import Outcome, Step

#: Process names a rule may declare: the matrix's six, and the deterministic dynamic tree
#: (EAGLE-2), which the matrix checks through onehot_siblings (proofs_notes/processes.md).
DECLARABLE = frozenset(PROCESSES) | ALL_PROCESSES


def _q(s: str) -> str:
    """A Python string literal in double quotes (the project's style)."""
    return json.dumps(s)


class RuleSpecError(UsageError):
    """A rule that cannot be loaded or run as given (a usage error: exit status 4)."""


class RuleContractError(UsageError):
    """The rule returned something that is not a valid Outcome for the step it was given."""


def _check_outcome(out: object, step: Step, name: str) -> None:
    if not isinstance(out, Outcome):
        raise RuleContractError(f"rule {name!r} returned {type(out).__name__} {out!r}, not an Outcome")
    path = out.accepted
    if not isinstance(path, tuple) or not path or path[0] != 0:
        raise RuleContractError(f"rule {name!r}: accepted={path!r} must be a tuple starting at the root 0")
    for a, b in zip(path, path[1:]):
        if not isinstance(b, int) or not 0 < b < step.tree.n or step.tree.parents[b] != a:
            raise RuleContractError(
                f"rule {name!r}: accepted={path!r} is not a root path: node {b!r} is not a child of "
                f"node {a} (parents {step.tree.parents})"
            )
    tok = out.next_token
    if isinstance(tok, bool) or not isinstance(tok, int) or not 0 <= tok < step.vocab:
        raise RuleContractError(f"rule {name!r}: next_token={tok!r} is not a token id in [0, {step.vocab})")


def _with_contract(rule: Rule) -> Rule:
    """The same rule, its every Outcome checked (a bad one raises RuleContractError)."""
    fn = rule.fn

    def checked(ch: Any, step: Step, **params: Any) -> Outcome:
        out = fn(ch, step, **params)
        _check_outcome(out, step, rule.name)
        return out

    return dataclasses.replace(rule, fn=checked)


def _validate(rule: Rule) -> None:
    if not isinstance(rule, Rule):
        raise RuleSpecError(
            f"rule: expected a specproof.reference.rules.Rule, got {type(rule).__name__}; wrap a function "
            "as Rule(name, fn, exact_for=frozenset({...}))"
        )
    unknown = sorted(set(rule.exact_for) - DECLARABLE)
    if unknown:
        raise RuleSpecError(
            f"exact_for: unknown process {', '.join(unknown)}; known: {', '.join(sorted(DECLARABLE))}"
        )
    if rule.preserves not in ("target", "greedy"):
        raise RuleSpecError(f"preserves: must be 'target' or 'greedy', got {rule.preserves!r}")


def load_rule(
    spec: str,
    exact_for: Sequence[str] | None = None,
    chain_only: bool | None = None,
    preserves: str | None = None,
) -> Rule:
    """The rule named by ``spec``: ``path/to/file.py:NAME`` or ``module:NAME``.

    NAME is a :class:`Rule` (which declares its own processes: the keyword arguments must then be
    None) or a function ``(ch, step) -> Outcome``, wrapped as ``Rule(NAME, fn, exact_for)``, for
    which ``exact_for`` is required (empty: declared exact for nothing). Raises RuleSpecError.
    """
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise RuleSpecError(f"RULE: {spec!r} is not path/to/file.py:NAME or module:NAME")
    obj = getattr(
        import_where(where, lambda problem: RuleSpecError(f"RULE: {problem}"), "specproof_rule_"), attr, None
    )
    if obj is None:
        raise RuleSpecError(f"RULE: {where!r} has no {attr!r}")
    if isinstance(obj, Rule):
        given = [
            n
            for n, v in (("--exact-for", exact_for), ("--chain-only", chain_only), ("--preserves", preserves))
            if v is not None
        ]
        if given:
            raise RuleSpecError(
                f"{', '.join(given)}: {attr} is a Rule, which declares its own processes, chain_only and "
                "preserves; these options are for a function"
            )
        _validate(obj)
        return obj
    if not callable(obj):
        raise RuleSpecError(f"RULE: {attr!r} is a {type(obj).__name__}, neither a Rule nor a function")
    if exact_for is None:
        raise RuleSpecError(
            f"--exact-for: {attr} is a function, which declares nothing: name the processes it is exact "
            "for (--exact-for iid_chain onehot_chain), or pass --exact-for alone for none"
        )
    rule = Rule(
        attr,
        obj,
        frozenset(exact_for),
        preserves=preserves or "target",
        chain_only=bool(chain_only),
    )
    _validate(rule)
    return rule


def loader_line(spec: str, rule: Rule, function: bool) -> str:
    """The line ``RULE = load_rule(...)`` that loads ``rule`` as ``spec`` named it (a function
    carries its declaration in the keyword arguments)."""
    if not function:
        return f"RULE = load_rule({_q(spec)})"
    extra = ", chain_only=True" if rule.chain_only else ""
    extra += f", preserves={_q(rule.preserves)}" if rule.preserves != "target" else ""
    decl = ", ".join(_q(p) for p in sorted(rule.exact_for))
    return f"RULE = load_rule({_q(spec)}, exact_for=[{decl}]{extra})"
