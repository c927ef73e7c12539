"""Where the kernels run, and moving CPU inputs there (inside specproof's Triton settings).

Kernels run on CUDA when Triton compiles them (a GPU is present and ``TRITON_INTERPRET`` is
off); otherwise the interpreter runs them on CPU tensors. Callers (the audit, tests, users) may
hand CPU tensors either way: :func:`on_kernel_device` moves them to the GPU for the call and
brings tensor results back, so the same code and tests run on both kinds of machine, and runs
the call inside :func:`specproof._triton.own_kernels` (no FP fusion, the interpreter shortcut).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from specproof._triton import interpret_wanted, own_kernels

F = TypeVar("F", bound=Callable[..., Any])


def interpreted() -> bool:
    """Do specproof's kernels run under the interpreter here (decided once, at import)?"""
    return INTERPRETED


INTERPRETED = interpret_wanted()


def kernel_device() -> torch.device | None:
    """``cuda`` when kernels are compiled for a GPU; ``None`` under the interpreter."""
    if not interpreted() and torch.cuda.is_available():
        return torch.device("cuda")
    return None


def default_block() -> int:
    """Elements per inner block: small under the interpreter, a full row tile on a GPU."""
    return 128 if interpreted() else 1024


def to_cpu(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, tuple):
        return tuple(to_cpu(v) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: to_cpu(getattr(x, f.name)) for f in dataclasses.fields(x)})
    return x


def on_kernel_device(fn: F) -> F:
    """Run ``fn`` with its CPU tensor arguments moved to the kernel device, results moved back."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with own_kernels(interpret=INTERPRETED):
            dev = kernel_device()
            values = list(args) + list(kwargs.values())
            if dev is None or not any(isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in values):
                return fn(*args, **kwargs)

            def move(a: Any) -> Any:
                return a.to(dev) if isinstance(a, torch.Tensor) else a

            out = fn(*[move(a) for a in args], **{k: move(v) for k, v in kwargs.items()})
            return to_cpu(out)

    return wrapper  # type: ignore[return-value]
