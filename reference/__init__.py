"""specproof.reference: the specification, as readable Python.

Every rule and proposal process is a short function that draws randomness only through the
choice interface (:mod:`.choices`), so one program serves as a sampler, a coupled tape for the
optimized engine, and an exact enumerator. Nothing here imports the optimized engine or the
properties.
"""

from .choices import Choices, Sampler, TapeReader, enumerate_law, random_tape
from .errors import SpecproofInputError
from .laws import as_law
from .models import MixLM, ToyLM, greedy_sequence, sequence_law
from .processes import PROCESSES, Process, Proposal
from .rules import RULES, Rule
from .step import Outcome, Step, make_step
from .tree import DraftTree, validate_parents

__all__ = [
    "PROCESSES",
    "RULES",
    "Choices",
    "DraftTree",
    "MixLM",
    "Outcome",
    "Process",
    "Proposal",
    "Rule",
    "Sampler",
    "SpecproofInputError",
    "Step",
    "TapeReader",
    "ToyLM",
    "as_law",
    "enumerate_law",
    "greedy_sequence",
    "make_step",
    "random_tape",
    "sequence_law",
    "validate_parents",
]
