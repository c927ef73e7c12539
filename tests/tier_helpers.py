"""What the engine tiers (vLLM's CPU build, OpenVINO GenAI, mistral.rs) share: each runs apart,
in one process, since its servers or in-process workers take cores (an idle mistral.rs runner
spins one), so it is skipped under xdist's workers (README's ``-n auto`` run) and run by
``.ci/run``'s own step (``python -m pytest tests/test_X.py -p no:xdist``); and the workers a
module started are stopped when it ends.

``.ci/run`` runs each tier's tests with ``SPECPROOF_TIER_REQUIRED=1`` after its install: there a
tier whose environment is missing or broken is an error, not a skip (a failed install once read
as a skipped tier); only a platform that cannot run the tier (mistral.rs's wheel on a CPU without
GFNI) still skips it, and says so."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

#: under one of xdist's workers: the tiers are skipped there
APART = "PYTEST_XDIST_WORKER" in os.environ


def required() -> bool:
    """Whether the tiers are required to run (``SPECPROOF_TIER_REQUIRED=1``: ``.ci/run``'s steps)."""
    return os.environ.get("SPECPROOF_TIER_REQUIRED") == "1"


def tier_marks(test_file: str, ok: bool, why: str, platform: bool = False) -> list[Any]:
    """The module's ``pytestmark``: skipped under xdist, saying the command that runs it, and
    where the tier cannot run here (``why``). ``platform``: the reason is this machine (its CPU),
    not a missing or broken environment. Where the tier is :func:`required`, a reason that is not
    the platform's fails the module's collection with ``why`` instead of skipping it."""
    name = os.path.basename(test_file)
    if not ok and not platform and required() and not APART:
        pytest.fail(
            f"tests/{name}: the tier is required here (SPECPROOF_TIER_REQUIRED=1) and cannot run: {why}",
            pytrace=False,
        )
    reason = f"this platform cannot run the tier: {why}" if platform else why
    return [
        pytest.mark.skipif(not ok, reason=reason),
        pytest.mark.skipif(APART, reason=f"the tier runs apart: python -m pytest tests/{name} -p no:xdist"),
    ]


def closing_workers(adapter: str) -> Any:
    """A module-scoped autouse fixture that stops, when the module ends, every worker the
    in-process adapter ``adapter`` (a module under specproof.properties.engine.adapters) started."""

    @pytest.fixture(scope="module", autouse=True)
    def _closed_workers() -> Iterator[None]:
        yield
        importlib.import_module(f"specproof.properties.engine.adapters.{adapter}").close_workers()

    return _closed_workers
