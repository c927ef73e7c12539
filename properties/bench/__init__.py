"""Speed measurements of the optimized engine, kept out of it (they import the audit's inputs
and the third-party adapters, which the engine must not):

* :mod:`.kernels` — ``specproof bench``: the kernels against batched PyTorch, the reference and
  their memory floor (CPU, audit and GPU sections).
* :mod:`.decode` — the optimized decoding loop against the reference loop.
* :mod:`.peers` — the kernels side by side with FlashInfer, vLLM and SGLang where they load.
* :mod:`.compile_check` — every kernel compiled for a GPU target without a GPU.

Speed is measured here, never asserted in unit tests.
"""
