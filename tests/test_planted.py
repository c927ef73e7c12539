"""Planted faults: one table shape (:class:`specproof.properties.verdicts.Planted`), typed verdicts,
the docs checked against the code's tables, and every stand-in bug given its verdict through HTTP.

The tables: the mutant verifiers (``conformance/mutants.py``), the mutant and alternative engines
(``engine/loops.py``, ``engine/param_mutants.py``, ``engine/stop_mutants.py``,
``engine/acceptance_mutants.py``, ``engine/report_mutants.py``) and the stand-in server's bugs
(``endpoint/standin.py``). The engine audits of every engine row run in tests/test_engine_audit.py
and the main job (declared verdicts, read from these tables); here every stand-in bug is audited
at a fixed seed and sample size (alpha 1e-3), so each verdict is a fixed outcome, not a draw.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from specproof.properties.conformance.mutants import CHAIN_MUTANTS
from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.standin import InProcess, StandIn
from specproof.properties.endpoint.standin_bugs import BUGS, TRANSPORT_FAULTS
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import T1
from specproof.properties.engine.registry import ENGINES, ensure_registered, planted_engines
from specproof.properties.verdicts import Planted, Verdict
from specproof.reference.errors import UsageError

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
TABLES = {
    "chain mutants": CHAIN_MUTANTS,
    "engines": planted_engines(),
    "stand-in bugs": BUGS,
}


def doc_rows(page: str, header: str, column: int = 1) -> dict[str, str]:
    """name -> verdict (its ``column``) of the Markdown table whose header starts ``header``."""
    lines = (DOCS / page).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    out = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0].strip("`")] = cells[column].strip("`")
    return out


@pytest.mark.parametrize("table", list(TABLES))
def test_every_table_has_the_one_shape_with_typed_verdicts(table):
    for name, entry in TABLES[table].items():
        assert isinstance(entry, Planted) and entry.name == name
        assert isinstance(entry.expect, Verdict) and entry.doc


def test_a_table_refuses_a_verdict_that_is_not_one():
    with pytest.raises(ValueError):
        Planted("x", "lossless", "no such verdict")  # type: ignore[arg-type]


def test_the_engine_registry_declares_the_tables_verdicts():
    ensure_registered()
    for name, entry in TABLES["engines"].items():
        assert ENGINES[name].expect == entry.expect, name
        assert ENGINES[name].samplings == (entry.settings or ENGINES[name].samplings)


def test_the_docs_list_every_planted_engine_with_its_verdict():
    assert doc_rows("engine-audit.md", "engine") == {n: e.expect.value for n, e in TABLES["engines"].items()}


def test_the_docs_list_every_stand_in_bug_with_its_verdict():
    assert doc_rows("endpoint-audit.md", "bug") == {n: e.expect.value for n, e in BUGS.items()}


def test_the_docs_mutation_table_agrees_with_the_declared_verdicts():
    rows = doc_rows("verifier-audit.md", "backend | what it does", column=2)
    for name, entry in CHAIN_MUTANTS.items():
        row = next(v for k, v in rows.items() if k == f"chain mutant.{name}")
        assert row == entry.expect.value, name


# --------------------------------------------------------------------------- the stand-in's bugs


def _audit_bug(bug: str) -> Verdict:
    """The endpoint audit of the stand-in with ``bug`` (in process where the bug is not a
    transport fault), against a correct twin."""
    entry = BUGS[bug]
    listen = bug in TRANSPORT_FAULTS
    retries = 1 if bug in ("dies", "crashes") else 3
    options = {"dies_after": 40, "die": "refuse"} if bug in ("dies", "crashes") else {}
    with (
        StandIn(bug, loop="laws", listen=listen, **options) as si,  # type: ignore[arg-type]
        StandIn(speculative=False, loop="laws", listen=listen) as twin,
    ):
        transports = None if listen else {si.url: InProcess(si), twin.url: InProcess(twin)}
        ep = Endpoint(
            # a dead server is not waited for; a flaky one is retried
            EndpointOptions(
                (si.url,),
                twin=twin.url,
                concurrency=4,
                retries=retries,
                prefix_cache=bug in ("prefix_poison", "stale_after_hit", "ignores_cache"),
                completions=4 if bug in ("shared_choices", "fork_rows") else 1,
            ),
            transports=transports,
        )
        try:
            spec = endpoint_spec(ep, prompts=[(0, 6)], samplings=list(entry.settings or (T1,)), tokens=4)
            # batch_rows moves the joint law by less than the other bugs: rejected near 300 samples
            # at p ~ 1e-5 (level 1.25e-4), so it is given 1,000 (early stopping ends it sooner)
            # stale_after_hit's acceptance drop (about 0.49 to 0.37 per sample) needs about 1,000 a case
            # fork_rows moves the law of 3 completions in 4 by about as little: 1,000 too
            n = 1000 if bug in ("batch_rows", "stale_after_hit", "fork_rows") else 200
            config = EngineAuditConfig(alpha=1e-3, samples=n, seed=1, report_samples=16)
            return audit_engine(spec, config).verdict
        except UsageError:
            return Verdict.ERROR
        finally:
            ep.close()


@pytest.mark.parametrize("bug", list(BUGS))
def test_each_stand_in_bug_gets_its_verdict(bug):
    assert _audit_bug(bug) == BUGS[bug].expect


def test_in_process_stand_ins_refuse_transport_faults():
    for bug in TRANSPORT_FAULTS:
        with pytest.raises(UsageError, match="transport"):
            StandIn(bug, listen=False)


def test_in_process_and_over_a_socket_give_the_same_audit():
    """The in-process transport answers what the socket does: the same JSON, timings aside."""
    out = []
    for listen in (True, False):
        with (
            StandIn(loop="laws", listen=listen) as si,
            StandIn(speculative=False, loop="laws", listen=listen) as tw,
        ):
            ways = None if listen else {si.url: InProcess(si), tw.url: InProcess(tw)}
            ep = Endpoint(EndpointOptions((si.url,), twin=tw.url, concurrency=4), transports=ways)
            try:
                spec = endpoint_spec(ep, prompts=[(0, 6)], samplings=[T1], tokens=4, name="standin")
                r = audit_engine(spec, EngineAuditConfig(alpha=1e-3, samples=100, seed=2, report_samples=8))
            finally:
                ep.close()
        js = r.to_json()
        for key in ("seconds", "per_sample_seconds", "plan", "description"):
            js.pop(key)
        for case in js["cases"]:
            case.pop("seconds")
        out.append(re.sub(r"\d+\.\d+ s|\d+\.\d+ ms", "T", str(js)))
    assert out[0] == out[1]
