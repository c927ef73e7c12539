"""Contracts and the things that meet them: verifiers, tree builders, adapters, mutants.

* :mod:`.contracts` — the chain and tree verifier contracts and their output validation.
* :mod:`.backends` — registered verifiers (the reference rules, batched PyTorch ones, the Triton
  engine) and, under :mod:`.backends.thirdparty`, the adapters of third-party packages.
* :mod:`.mutants` — the mutant corpus: one known-buggy verifier per bug class.
* :mod:`.buffers` — the tree-builder contract (mask, positions, leaf paths), checked exactly.

``specproof conform`` (every installed adapter against its claim) audits them: it lives with
the audit, :mod:`specproof.properties.audit.conform`.
"""

from specproof.properties.conformance.contracts import (
    VIOLATIONS,
    ChainVerifier,
    ContractViolation,
    TreeVerifier,
    check_chain_output,
    check_tree_output,
)

__all__ = [
    "VIOLATIONS",
    "ChainVerifier",
    "ContractViolation",
    "TreeVerifier",
    "check_chain_output",
    "check_tree_output",
]
