"""The contracts' input validation lives in :mod:`specproof.reference.validate` (one module for
every engine); this name is kept for code that imported it from the optimized engine."""

from specproof.reference.validate import (  # noqa: F401
    FLOAT_DTYPES,
    check_chain,
    check_chain_call,
    check_laws,
    check_tokens,
    check_tree,
    check_tree_parents,
    check_uniforms,
    tolerance,
)
