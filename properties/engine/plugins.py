"""The table of the engine audit's plug-ins: its workload axes and its side checks, in the order
the audit runs them, names the cases, and reports them (:mod:`.plugin` says what each is).

A new axis or check is a module of its own and one line here (docs/adding-an-axis-or-check.md);
tests/test_plugins.py requires of each a docs section, a planted bug of the stand-in server that
it flags, a sign-off item and a calibration (or why it has none).
"""

from __future__ import annotations

from specproof.properties.engine.acceptance import AcceptanceCheck
from specproof.properties.engine.cache import CacheAxis, CacheCheck
from specproof.properties.engine.completions import CompletionsAxis, CompletionsCheck
from specproof.properties.engine.load import LoadAxis, LoadCheck
from specproof.properties.engine.metrics import MetricsPlugin
from specproof.properties.engine.plugin import Axis, Check
from specproof.properties.engine.reporting import ReportsCheck, SpeculationCheck
from specproof.properties.engine.streaming import StreamingCheck

#: the workload axes, in the order a case's name reads them
AXES: tuple[Axis, ...] = (LoadAxis(), CacheAxis(), CompletionsAxis())


def checks() -> list[Check]:
    """A fresh set of the side checks for one audit (they hold its state), in the order they
    run: a contract violation two of them find is stated from the first."""
    return [
        SpeculationCheck(),
        AcceptanceCheck(),
        MetricsPlugin(),
        ReportsCheck(),
        StreamingCheck(),
        LoadCheck(),
        CompletionsCheck(),
        CacheCheck(),
    ]
