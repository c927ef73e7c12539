"""Triton kernels of the optimized engine, one module per rule.

Conventions. Each pointer in a jit function's signature carries a comment giving the shape and
dtype of what the launching module passes, in its terms (``float``: the dtype the laws or
activations come in; a ``*_row`` argument is a ``[V]`` slice such as
``p_ptr + (b * N + node) * V``); each scalar's comment gives its meaning where the name does
not. A mode a kernel is specialized on is a module-level ``tl.constexpr`` name (the weights
``sampling.W_P``, ``W_RESIDUAL``, ...; a walk's states), never a bare integer: Triton lets a
jit function read a global only if it is a ``tl.constexpr``.
"""
