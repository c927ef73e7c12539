"""specproof: a correctness harness for speculative decoding.

Sub-packages: :mod:`specproof.reference` (the specification), :mod:`specproof.optimized` (the
batched engine), :mod:`specproof.properties` (oracles, strategies, the command line).
"""

__version__ = "0.1.0"
