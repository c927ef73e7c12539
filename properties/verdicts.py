"""One vocabulary of verdicts, shared by the audit, the matrix, ``e2e``, ``conform`` and the
engine audit, with the exit status each one gives on the command line.

==================  ====  =====================================================================
verdict             exit  meaning
==================  ====  =====================================================================
exact               0     proven: the total variation is exactly 0, by enumeration (the exact
                          oracle, the matrix, the exact checks of ``e2e``)
pass                0     every case ran its plan: no deviation, at the stated power
lossy               1     a deviation from the preserved law was found (with a witness)
contract_violation  2     the black box broke its contract (shape, padding, ids, determinism,
                          a hang, an exception on valid input)
underpowered        3     no deviation found, but some case ran short of its plan (budget, not
                          run): the report lists them and the TV the run can vouch for
error               4     a usage error (bad option, missing file) or an internal error
interrupted         4     stopped by the user (Ctrl-C); what ran is written out
not_applicable      0     nothing to check: e.g. a chain-only rule under a process that drafts
                          trees (a matrix cell), a tree builder that can express no tree
no_speculation      5     an engine's own counters show it drafted or accepted nothing: its law
                          may hold, but speculation was not tested (never ``pass``)
misreported         6     the law holds, but the probabilities the engine reports for emitted
                          tokens (a server's logprobs) are not the law's, or are missing
acceptance_low      7     the law holds, but the engine accepts fewer drafts than its declared
                          rule predicts along the tokens it emitted (speed lost, not the law)
==================  ====  =====================================================================

``Verdict`` is a ``str`` enum: ``Verdict.PASS == "pass"``, and it serializes to JSON as its value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any

from specproof.reference.errors import InternalError


class Verdict(str, Enum):
    """What a check concluded (the table above); compares equal to its value, a plain string."""

    EXACT = "exact"
    PASS = "pass"
    LOSSY = "lossy"
    CONTRACT_VIOLATION = "contract_violation"
    UNDERPOWERED = "underpowered"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    NOT_APPLICABLE = "not_applicable"
    NO_SPECULATION = "no_speculation"
    MISREPORTED = "misreported"
    ACCEPTANCE_LOW = "acceptance_low"

    def __str__(self) -> str:  # f-strings and print show the value, as for a plain string
        return self.value

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self]

    @property
    def severity(self) -> int:
        """Its rank among an engine audit's verdicts (:data:`SEVERITY`; 0 for the others)."""
        return SEVERITY.index(self) if self in SEVERITY else 0


#: an engine audit's verdicts from the mildest to the most severe: its verdict is the most severe
#: of what its law tests and side checks found (a deviation of the law before all else)
SEVERITY: tuple[Verdict, ...] = (
    Verdict.PASS,
    Verdict.UNDERPOWERED,
    Verdict.MISREPORTED,
    Verdict.ACCEPTANCE_LOW,
    Verdict.NO_SPECULATION,
    Verdict.CONTRACT_VIOLATION,
    Verdict.LOSSY,
)


def most_severe(verdicts: Iterable[Verdict]) -> Verdict:
    """The most severe of ``verdicts`` (:data:`SEVERITY`); ``pass`` where there are none."""
    return max(verdicts, key=lambda v: v.severity, default=Verdict.PASS)


EXIT_CODES: dict[Verdict, int] = {
    Verdict.EXACT: 0,
    Verdict.PASS: 0,
    Verdict.LOSSY: 1,
    Verdict.CONTRACT_VIOLATION: 2,
    Verdict.UNDERPOWERED: 3,
    Verdict.ERROR: 4,
    Verdict.INTERRUPTED: 4,
    Verdict.NOT_APPLICABLE: 0,
    Verdict.NO_SPECULATION: 5,
    Verdict.MISREPORTED: 6,
    Verdict.ACCEPTANCE_LOW: 7,
}
USAGE_ERROR = 4  # the exit status of a usage or internal error, for every subcommand

EXIT_TABLE = """\
exit status:
  0  pass: every case ran its plan, no deviation at the stated power
  1  lossy: a deviation from the preserved law, with a witness
  2  contract_violation: wrong shape/padding/ids, nondeterminism, a hang, an exception
  3  underpowered: no deviation found, but some case ran short of its plan
  4  usage or internal error, or interrupted
  5  no_speculation: the engine's counters show nothing drafted or accepted (engines only)
  6  misreported: the law holds, but the reported probabilities are not the law's (engines only)
  7  acceptance_low: the law holds, fewer drafts accepted than the declared rule predicts (engines only)"""


class CheckStatus(StrEnum):
    """What a side check of the engine audit found: one vocabulary for every check, each word
    a plain string in JSON (``CheckStatus.WRONG == "wrong"``). Which words a check uses:

    * every check: ``not_run`` (the audit did not reach it), ``not_offered`` (the engine has no
      such thing: no reported probabilities, no metrics page, no stream), ``not_checked`` (offered,
      nothing to compare it with), ``stopped`` (the engine stopped answering during it);
    * speculation (the engine's counters): ``ran``, ``none`` (nothing drafted or accepted),
      ``unobservable`` (no counters);
    * reported probabilities: ``consistent``, ``wrong``, ``absent``;
    * streaming: ``equal``, ``differs`` (tokens or text: a contract violation), ``reports_differ``
      (only the reported probabilities or counters);
    * server metrics: ``agree``, ``differ``;
    * acceptance against the declared rule: ``as_predicted``, ``low``; across an axis: ``same``,
      ``low``."""

    NOT_RUN = "not_run"
    NOT_OFFERED = "not_offered"
    NOT_CHECKED = "not_checked"
    STOPPED = "stopped"
    RAN = "ran"
    NONE = "none"
    UNOBSERVABLE = "unobservable"
    CONSISTENT = "consistent"
    WRONG = "wrong"
    ABSENT = "absent"
    EQUAL = "equal"
    DIFFERS = "differs"
    REPORTS_DIFFER = "reports_differ"
    AGREE = "agree"
    DIFFER = "differ"
    AS_PREDICTED = "as_predicted"
    LOW = "low"
    SAME = "same"


@dataclass(frozen=True)
class Planted:
    """A fault planted on purpose, and the verdict an audit must give it: one shape for every
    table of them (the mutant verifiers, the mutant and alternative engines, the request-parameter
    defects, the stand-in server's bugs), so the tests parametrize over the tables and the docs
    are checked against them (tests/test_planted.py). ``expect`` is typed: a
    :class:`Verdict` (:attr:`Verdict.ERROR` for a fault the audit refuses before sampling, a usage
    error); ``doc`` says what it models (the public bug class); ``build`` makes it where the table
    builds its entries (an engine factory), ``settings`` are the sampling settings it is audited
    under (none: the table's own)."""

    name: str
    expect: Verdict
    doc: str
    build: Callable[..., Any] | None = None
    settings: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.expect, Verdict):
            object.__setattr__(self, "expect", Verdict(self.expect))


def planted(*entries: Planted) -> dict[str, Planted]:
    """A table of planted faults by name (a name given twice is a mistake of the table)."""
    out: dict[str, Planted] = {}
    for e in entries:
        if e.name in out:
            raise InternalError(f"planted fault {e.name!r} listed twice")
        out[e.name] = e
    return out
