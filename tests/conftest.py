"""Hypothesis runs derandomized (a fixed seed per test), so the suite cannot flake."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "specproof",
    derandomize=True,
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile("specproof")
