"""The exact oracle: the law of one speculative step by enumeration, in rational arithmetic.

* :mod:`.exact` — ``check(rule, process, instance)``: proposal + verification, completed to the
  horizon, against the target's law; TV exactly 0 or a witness. ``multi_step_check`` for the
  decoding loop over several steps.
* :mod:`.matrix` — every (process, rule) pair on seeded instances: the exactness matrix.
* :mod:`.strategies` — hypothesis strategies that draw and shrink trees, laws and instances.
* :mod:`.findings` — third-party behaviours reproduced as reference rules, checked exactly.
* :mod:`.rule_report` — a new rule's matrix row, witnesses and proof-note skeleton.
"""

from specproof.properties.oracle.exact import Instance, ModelInstance, OracleResult, check, multi_step_check
from specproof.properties.oracle.rule_report import RuleReport, load_rule, rule_report

__all__ = [
    "Instance",
    "ModelInstance",
    "OracleResult",
    "RuleReport",
    "check",
    "load_rule",
    "multi_step_check",
    "rule_report",
]
