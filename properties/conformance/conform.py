"""``specproof conform``: audit every installed third-party adapter and write the conformance table.

Rows, one per (backend, process) for verifiers and one per tree builder:

* verifiers (:mod:`.backends.thirdparty`): the statistical audit (:mod:`.audit`) under each
  process the adapter claims, with its budget; the verdict (pass / lossy / contract_violation),
  the verdict its package expects, the power reached (cases at power >= 0.99 against TV 0.01,
  and the smallest TV every case detects), the samples, the time, and for a lossy verdict the
  shrunk witness;
* tree builders (:mod:`.buffers`): the reference's and the Triton engine's, and every installed
  adapter's, checked exactly on the tree battery.

Packages that are not installed get a row saying so and how to install them. The report
carries the date and every version audited. Exit status: 0 when every verdict is the one
expected, 1 when some differ (a finding to read), 2 on usage errors.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import importlib.metadata
import platform
import time
from collections.abc import Callable
from typing import Any

import torch

from specproof.properties.audit.stages import AuditConfig, audit
from specproof.properties.conformance.backends import REGISTRY, Backend, thirdparty
from specproof.properties.conformance.backends.thirdparty import ADAPTERS, availability
from specproof.properties.conformance.buffers import BuilderResult, builtin_builders, conform


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for a in ADAPTERS:
        try:
            out[a.package] = importlib.metadata.version(a.package)
        except importlib.metadata.PackageNotFoundError:
            out[a.package] = "not installed"
    try:
        out["specproof"] = importlib.metadata.version("specproof")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a checkout
        out["specproof"] = "checkout"
    return out


def _verifier_row(backend: Backend, process: str, result: Any) -> dict[str, Any]:
    cases = result.cases
    cfg = result.config
    reached = sum(r.power >= cfg.power for r in cases)
    row: dict[str, Any] = {
        "backend": backend.name,
        "kind": backend.kind,
        "what": backend.doc,
        "process": process,
        "expected": backend.expected(process),
        "verdict": result.verdict.value,
        # underpowered: no deviation found but short of the plan; not a contradiction of "pass"
        "agrees": result.verdict == backend.expected(process)
        or (result.verdict == "underpowered" and backend.expected(process) == "pass"),
        "cases": len(cases),
        "cases_at_power": reached,
        "detects_tv": max((r.detectable_tv for r in cases), default=1.0),
        "samples": sum(r.n for r in cases),
        "seconds": round(result.seconds, 1),
        "witness": None,
        "summary": result.summary(),
    }
    if result.verdict == "lossy":
        w = result.shrunk or result.witness
        if w is not None:
            row["witness"] = w.case.describe()
            if w.hard_failure:
                row["deviation"] = "emits a token of target probability 0"
            elif w.tv is not None:
                row["deviation"] = (
                    f"p = {w.pvalue:.2g}, TV on cells {w.tv.estimate:.2f} "
                    f"[{w.tv.low:.2f}, {w.tv.high:.2f}] ({w.tv.confidence:.0%})"
                )
    elif result.verdict == "contract_violation" and result.violation:
        row["witness"] = f"[{result.violation['kind']}] {result.violation['detail']}"
    return row


def _proposer_row(spec: dict[str, Any]) -> dict[str, Any]:
    """A third-party proposer in the decoding loop: it must give the same drafts for the same
    context, and every rule declared exact for its process must be lossless over two steps on
    the 4-token transformer (the exact check of ``specproof e2e``)."""
    from specproof.properties.e2e.check import EXACT_PREFIX
    from specproof.properties.oracle.exact import multi_step_check
    from specproof.reference.decode import e2e_models
    from specproof.reference.processes import PROCESSES
    from specproof.reference.rules import RULES
    from specproof.reference.transformer import TransformerLM

    start = time.perf_counter()
    small, _ = e2e_models()
    process = PROCESSES[str(spec["process"])]
    drafter = spec["drafter"](small.vocab)
    again = spec["drafter"](small.vocab)
    contexts = [EXACT_PREFIX, EXACT_PREFIX + (1, 2, 3, 1, 2), (0, 1, 0, 1, 0)]
    deterministic = all(drafter(c).law(c) == again(c).law(c) for c in contexts)
    tvs = {}
    target = TransformerLM(small)  # memoized laws, shared by every rule's check
    for rule in RULES.values():
        if process.name in rule.exact_for and rule.applies_to(True):
            tv, _ = multi_step_check(rule, process, target, drafter, (-1, 0, 1), EXACT_PREFIX, 2)
            tvs[rule.name] = float(tv)
    worst = max(tvs, key=lambda r: tvs[r])
    ok = deterministic and tvs[worst] < 1e-12
    return {
        "backend": spec["name"],
        "kind": "proposer",
        "what": spec["doc"],
        "process": process.name,
        "expected": "pass",
        "verdict": "pass" if ok else "lossy",
        "agrees": ok,
        "rules": sorted(tvs),
        "max_tv": tvs[worst],
        "deterministic": deterministic,
        "seconds": round(time.perf_counter() - start, 1),
        "witness": None
        if ok
        else (f"TV {tvs[worst]:.3g} with {worst}" if deterministic else "not deterministic"),
        "summary": f"{spec['name']}: {len(tvs)} rules, largest TV {tvs[worst]:.3g} over 2 exact steps",
    }


def _builder_row(name: str, doc: str, res: BuilderResult) -> dict[str, Any]:
    bad = [o for o in res.outcomes if o.status not in ("pass", "unsupported")]
    return {
        "backend": name,
        "kind": "tree_builder",
        "what": doc,
        "process": "-",
        "expected": "pass",
        "verdict": res.verdict,
        "agrees": res.verdict in ("pass", "unsupported"),
        "cases": len(res.outcomes),
        "cases_checked": res.checked,
        "unsupported": sum(o.status == "unsupported" for o in res.outcomes),
        "seconds": round(res.seconds, 2),
        "witness": f"{bad[0].name}: [{bad[0].status}] {bad[0].detail}" if bad else None,
        "summary": res.summary(),
    }


def run(
    names: list[str] | None = None,
    budget_seconds: float = 60.0,
    seed: int = 0,
    shrink_seconds: float = 10.0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every installed adapter (or only ``names``), plus the built-in tree builders."""
    say = progress or (lambda msg: None)
    rows: list[dict[str, Any]] = []
    missing: list[dict[str, str]] = []
    wanted = set(names) if names else None
    for adapter in ADAPTERS:
        ok, why = availability(adapter)
        if not ok:
            missing.append({"adapter": adapter.module, "package": adapter.package, "reason": why})
            continue
        module = importlib.import_module(f"{thirdparty.__name__}.{adapter.module}")
        for spec in module.backends():
            backend = REGISTRY[(str(spec["kind"]), str(spec["name"]))]
            if wanted is not None and backend.name not in wanted:
                continue
            for process in backend.processes:
                say(f"auditing {backend.name} under {process} ({budget_seconds:g} s)")
                one = dataclasses.replace(backend, processes=(process,))
                config = AuditConfig(
                    seed=seed,
                    budget_seconds=budget_seconds,
                    shrink=8 if shrink_seconds > 0 else 0,
                    shrink_seconds=max(shrink_seconds, 1e-9),
                )
                rows.append(_verifier_row(backend, process, audit(one, config)))
        for spec in getattr(module, "proposers", list)():
            if wanted is not None and spec["name"] not in wanted:
                continue
            say(f"decoding with the proposer {spec['name']}")
            rows.append(_proposer_row(spec))
        for spec in getattr(module, "builders", list)():
            if wanted is not None and spec["name"] not in wanted:
                continue
            say(f"checking the tree builder {spec['name']}")
            rows.append(
                _builder_row(
                    str(spec["name"]), str(spec["doc"]), conform(str(spec["name"]), spec["fn"], seed)
                )
            )
    for name, fn in builtin_builders().items():
        if wanted is not None and name not in wanted:
            continue
        say(f"checking the tree builder {name}")
        rows.append(_builder_row(name, "specproof's own (for comparison)", conform(name, fn, seed)))
    if wanted is not None:
        known = {r["backend"] for r in rows} | {m["adapter"] for m in missing}
        unknown = sorted(wanted - known)
        if unknown:
            raise KeyError(f"BACKEND: {', '.join(unknown)} is not an installed adapter or tree builder")
    return {
        "date": datetime.date.today().isoformat(),
        "versions": versions(),
        "budget_seconds": budget_seconds,
        "seed": seed,
        "rows": rows,
        "not_installed": missing,
    }


def markdown(report: dict[str, Any]) -> str:
    v = report["versions"]
    lines = [
        f"Conformance of third-party backends, {report['date']} "
        f"(`specproof conform`, seed {report['seed']}, "
        f"{report['budget_seconds']:g} s per verifier and process).",
        "",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        "",
        "| backend | process | expected | verdict | power reached | samples | time | witness |",
        "|---|---|---|---|---|---:|---:|---|",
    ]
    for r in report["rows"]:
        if r["kind"] == "proposer":
            power = f"exact 2-step law, {len(r['rules'])} rules: largest TV {r['max_tv']:.1g}"
            samples = "-"
        elif r["kind"] == "tree_builder":
            power = f"exact on {r['cases_checked']} trees" + (
                f" ({r['unsupported']} not expressible)" if r["unsupported"] else ""
            )
            samples = "-"
        else:
            samples = f"{r['samples']:,}"
            if r.get("deviation"):
                power = f"deviation found: {r['deviation']}"
            else:
                power = (
                    f"{r['cases_at_power']}/{r['cases']} cases at 0.99 vs TV 0.01; "
                    f"all detect TV {r['detects_tv']:.2g}"
                )
        verdict = r["verdict"] + ("" if r["agrees"] else " (unexpected)")
        lines.append(
            f"| {r['backend']} | {r['process']} | {r['expected']} | {verdict} | {power} | {samples} | "
            f"{r['seconds']:g} s | {r['witness'] or ''} |"
        )
    for m in report["not_installed"]:
        lines.append(f"| {m['adapter']}.* | - | - | not run | {m['reason']} | - | - | |")
    return "\n".join(lines)
