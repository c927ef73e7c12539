"""Hypothesis runs derandomized (a fixed seed per test), so the suite cannot flake."""

import os

import torch
from hypothesis import HealthCheck, settings

pytest_plugins = ["pytester"]

settings.register_profile(
    "specproof",
    derandomize=True,
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile("specproof")


if os.environ.get("PYTEST_XDIST_WORKER"):
    # one intra-op thread per xdist worker: the workers already use every core
    torch.set_num_threads(1)
