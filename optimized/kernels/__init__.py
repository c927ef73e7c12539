"""Triton kernels of the optimized engine, one module per rule."""
