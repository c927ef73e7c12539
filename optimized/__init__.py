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

Kernels implemented so far: token-level verification of chains (sampled and deterministic
drafts). The others of issue 4 (block, typical, tree rules, tree buffers, tree attention) are
still to come.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from .token import token, token_verifier  # noqa: E402

__all__ = ["token", "token_verifier"]
