"""specproof.optimized: the batched engine (PyTorch + Triton), named like the reference.

Each rule has a kernel that consumes explicit uniforms laid out densely by the reference's
tape sites (:mod:`specproof.reference.choices`): ``u_accept[b, c]`` is the uniform of site
``("accept", c)`` of row b (column 0 unused), ``u_final[b]`` that of ``("final", 0)``. Fed the
same uniforms, kernel and reference return the same tokens (``tests/test_optimized_coupled.py``),
and a generator-based wrapper implements the chain contract of
:mod:`specproof.properties.conformance.contracts`.

Triton kernels run on CUDA tensors when a GPU is present; on CPU tensors they run under Triton's
interpreter, chosen when CUDA is absent and ``TRITON_INTERPRET`` is unset. That choice, and
compiling without FP fusion, apply to specproof's kernels only, in scope
(:func:`specproof._triton.own_kernels`): importing this package leaves Triton's environment as it
was.

Rules: ``token`` and ``block`` (chains), ``mss``, ``rrs``, ``target_only``, ``strict``,
``greedy`` and ``typical`` (trees; a chain is a tree). Each module's ``*_verifier`` draws the uniforms from a
``torch.Generator`` and is registered as backend ``optimized.<rule>``.
"""

from __future__ import annotations

import importlib
import pkgutil

from specproof._triton import own_kernels

# Every kernel module is imported (and its @triton.jit functions decorated) inside the scope of
# specproof's own Triton settings: the interpreter when CUDA is absent. Nothing of it outlives
# the import (specproof._triton); each public entry re-enters the scope to run.
with own_kernels():
    from . import kernels as _kernels

    for _mod in pkgutil.iter_modules(_kernels.__path__):
        importlib.import_module(f"{__name__}.kernels.{_mod.name}")
    from .block import block, block_verifier
    from .greedy import greedy, greedy_verifier
    from .mss import mss, mss_verifier
    from .rrs import rrs, rrs_verifier
    from .strict import strict, strict_verifier
    from .target_only import target_only, target_only_verifier
    from .token import token, token_verifier
    from .typical import typical, typical_chain_verifier, typical_verifier

__all__ = [
    "block",
    "block_verifier",
    "greedy",
    "greedy_verifier",
    "mss",
    "mss_verifier",
    "rrs",
    "rrs_verifier",
    "strict",
    "strict_verifier",
    "target_only",
    "target_only_verifier",
    "token",
    "token_verifier",
    "typical",
    "typical_chain_verifier",
    "typical_verifier",
]
