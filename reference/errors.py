"""The exceptions of specproof, and those raised on malformed input.

Every exception the project raises derives from :class:`SpecproofError`, so a caller can catch
"anything specproof raised" in one clause. Errors about an argument are also ``ValueError``
subclasses (through :class:`SpecproofInputError`), so existing ``except ValueError`` keeps working.

Every public entry of specproof validates its arguments before computing anything. A
malformed argument raises a subclass of :class:`SpecproofInputError` (itself a
``ValueError``) whose message starts with the argument's name, e.g.
``target_probs[2]: sums to 0.5, not 1 (tolerance 1e-06)``. The ``argument`` attribute holds
that name, so tests and adapters can match on it without parsing the message.

The classes, one per problem:

==============================  ==========================================================
``ShapeError``                  wrong length, rank or missing entries
``DTypeError``                  an entry that is not a real number (or a bool, a complex)
``NonFiniteError``              NaN or infinity in a law
``NegativeMassError``           a negative probability
``NotNormalizedError``          a law whose mass differs from 1 beyond the tolerance
``TokenOutOfRangeError``        a token id outside ``[0, V)``
``ZeroDraftProbabilityError``   a drafted token to which its draft law gives probability 0
``NotATreeError``               parents that do not describe a draft tree (subclasses below)
``NotAChainError``              a chain-only rule given a tree with branching
``BadParameterError``           a rule parameter out of its documented range
==============================  ==========================================================
"""

from __future__ import annotations


class SpecproofError(Exception):
    """The root of every exception specproof raises."""


class SpecproofInputError(SpecproofError, ValueError):
    """A malformed argument. ``argument`` names it; the message says what is wrong."""

    def __init__(self, argument: str, problem: str) -> None:
        self.argument = argument
        self.problem = problem
        super().__init__(f"{argument}: {problem}")


class ShapeError(SpecproofInputError):
    """Wrong length, rank, or a missing entry."""


class DTypeError(SpecproofInputError):
    """An entry that is not a real number."""


class NonFiniteError(SpecproofInputError):
    """NaN or infinity where a probability was expected."""


class NegativeMassError(SpecproofInputError):
    """A negative probability."""


class NotNormalizedError(SpecproofInputError):
    """Total mass differs from 1 by more than the stated tolerance."""


class TokenOutOfRangeError(SpecproofInputError):
    """A token id outside ``[0, V)``."""


class ZeroDraftProbabilityError(SpecproofInputError):
    """A drafted token has probability 0 under the law it was claimed to be drawn from."""


class BadParameterError(SpecproofInputError):
    """A rule parameter outside its documented range."""


class AmbiguousLawError(BadParameterError):
    """A parameter whose law is not pinned down at this context in float32: a top-p cut within
    the margin of a cumulative mass, where an engine may keep one token more or fewer."""


class NotAChainError(SpecproofInputError):
    """A chain-only rule was given a tree in which some node has two or more children."""


class NotATreeError(SpecproofInputError):
    """``parents`` does not describe a draft tree (``parents[0] == -1``, ``parents[i] < i``)."""


class EmptyTreeError(NotATreeError):
    """No nodes at all: a tree has at least its root (the last committed token)."""


class RootError(NotATreeError):
    """``parents[0]`` is not -1."""


class MultipleRootsError(NotATreeError):
    """A node other than node 0 has parent -1."""


class ParentOutOfRangeError(NotATreeError):
    """A parent index below -1 or at least the number of nodes."""


class CycleError(NotATreeError):
    """Following parents from some node returns to it."""


class ForwardParentError(NotATreeError):
    """A node whose parent comes after it (``parents[i] > i``) without forming a cycle."""


class UsageError(SpecproofError, ValueError):
    """A bad value that is not one array argument: an option out of range, a name that resolves
    to nothing, a combination the command cannot run. The message names what is wrong."""


class ArgumentTypeError(SpecproofError, TypeError):
    """An argument of the wrong kind (e.g. a verifier that is not callable)."""


class NotFoundError(SpecproofError, KeyError):
    """A name (backend, process, engine) that is not registered."""

    def __str__(self) -> str:  # KeyError quotes its message; this one reads as a sentence
        return str(self.args[0]) if self.args else ""


class InternalError(SpecproofError, RuntimeError):
    """A state specproof's own code must never reach (a broken invariant of the reference or the
    optimized loop, a stand-in that was called): a bug in specproof, never in the input."""
