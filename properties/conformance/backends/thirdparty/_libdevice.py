"""``log1p`` for vLLM's kernels under Triton's interpreter, which has no libdevice.

Goldberg's form: with ``u = 1 + x`` rounded, ``log1p(x) = log(u) * x / (u - 1)`` (and ``x``
where ``u == 1``) is accurate to a few ulps, unlike ``log(1 + x)`` for small ``x``. Used only
when the kernels are interpreted; on CUDA they call libdevice's own.
"""

import triton
import triton.language as tl


@triton.jit
def log1p(x):
    u = 1.0 + x
    return tl.where(u == 1.0, x, tl.log(u) * (x / (u - 1.0)))
