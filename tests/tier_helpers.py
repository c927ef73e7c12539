"""What the engine tiers (vLLM's CPU build, OpenVINO GenAI, mistral.rs) share: each runs apart,
in one process, since its servers or in-process workers take cores (an idle mistral.rs runner
spins one), so it is skipped under xdist's workers (README's ``-n auto`` run) and run by
``.ci/run``'s own step (``python -m pytest tests/test_X.py -p no:xdist``); and the workers a
module started are stopped when it ends."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

#: under one of xdist's workers: the tiers are skipped there
APART = "PYTEST_XDIST_WORKER" in os.environ


def tier_marks(test_file: str, ok: bool, why: str) -> list[Any]:
    """The module's ``pytestmark``: skipped where the tier's environment is missing (``why``) and
    under xdist, saying the command that runs it."""
    name = os.path.basename(test_file)
    return [
        pytest.mark.skipif(not ok, reason=why),
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
