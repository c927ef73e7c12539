"""Hypothesis runs derandomized (a fixed seed per test), so the suite cannot flake."""

import os
import sys

import pytest
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


@pytest.fixture(scope="session")
def llamacpp_bin():
    """The folder of the pinned llama.cpp binaries. Built once by ``specproof llamacpp build``
    (README's test command runs it first, so CI always has it); a plain ``pytest`` on a machine
    without the build skips the tests that need it, saying so, rather than compile for 11 to 15
    minutes unasked (``SPECPROOF_BUILD_LLAMACPP=1`` lets the tests build it)."""
    from specproof.properties.servers import llamacpp

    if not llamacpp.is_built() and not os.environ.get("SPECPROOF_BUILD_LLAMACPP"):
        pytest.skip(
            "llama.cpp is not built here: `specproof llamacpp build` builds the pinned version once "
            "(11 to 15 min cold on 2 cores), or set SPECPROOF_BUILD_LLAMACPP=1 to let the tests build it"
        )
    return llamacpp.ensure_built(progress=lambda m: print(m, file=sys.stderr))
