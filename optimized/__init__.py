"""specproof.optimized: the batched PyTorch + Triton engine (to come).

It will mirror :mod:`specproof.reference` name for name and consume the same uniform tapes
(see :mod:`specproof.reference.choices` for the tape semantics), so that kernel and reference
can be compared sample for sample. Nothing is implemented here yet.
"""
