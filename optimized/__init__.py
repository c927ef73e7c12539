"""specproof.optimized: the batched engine (PyTorch + Triton), named like the reference.

Each rule has a kernel that consumes explicit uniforms laid out densely by the reference's
tape sites (:mod:`specproof.reference.choices`): ``u_accept[b, c]`` is the uniform of site
``("accept", c)`` of row b (column 0 unused), ``u_final[b]`` that of ``("final", 0)``. Fed the
same uniforms, kernel and reference return the same tokens (``tests/test_optimized_coupled.py``),
and a generator-based wrapper implements the chain contract of
:mod:`specproof.properties.contracts`.

Triton kernels run on CUDA tensors when a GPU is present; on CPU tensors they run under Triton's
interpreter, which this package switches on (``TRITON_INTERPRET=1``) when CUDA is absent and
the variable is unset. It must be set before Triton is first imported.

Rules: ``token`` and ``block`` (chains), ``mss``, ``rrs``, ``target_only``, ``greedy`` and
``typical`` (trees; a chain is a tree). Each module's ``*_verifier`` draws the uniforms from a
``torch.Generator`` and is registered as backend ``optimized.<rule>``.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# No fused multiply-add: the kernels round every product and sum as the reference does.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "0")

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    from ._interpreter import install as _install_interpreter_shortcut

    _install_interpreter_shortcut()

from .block import block, block_verifier  # noqa: E402
from .greedy import greedy, greedy_verifier  # noqa: E402
from .mss import mss, mss_verifier  # noqa: E402
from .rrs import rrs, rrs_verifier  # noqa: E402
from .target_only import target_only, target_only_verifier  # noqa: E402
from .token import token, token_verifier  # noqa: E402
from .typical import typical, typical_chain_verifier, typical_verifier  # noqa: E402

__all__ = [
    "block",
    "block_verifier",
    "greedy",
    "greedy_verifier",
    "mss",
    "mss_verifier",
    "rrs",
    "rrs_verifier",
    "target_only",
    "target_only_verifier",
    "token",
    "token_verifier",
    "typical",
    "typical_chain_verifier",
    "typical_verifier",
]
