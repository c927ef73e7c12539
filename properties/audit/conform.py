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
carries the date and every version audited.

:func:`run` returns a :class:`ConformanceReport`: its ``rows`` (:class:`ConformanceRow`, each with
its own ``verdict``), its ``verdict`` (``pass`` when every row got the verdict its package
expects, ``lossy`` when some differ: a finding to read), ``markdown()`` (the table; ``summary()``
is the same) and ``to_json()`` (what ``--json`` writes). Exit status: 0 when every verdict is the
one expected, 1 when some differ, 4 on usage errors.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import importlib.metadata
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from specproof.properties.audit.stages import AuditConfig, audit
from specproof.properties.conformance.backends import REGISTRY, Backend, ensure_registered, thirdparty
from specproof.properties.conformance.backends.thirdparty import ADAPTERS, availability
from specproof.properties.conformance.buffers import BuilderResult, builtin_builders, conform
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import NotFoundError


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


@dataclass(kw_only=True)
class ConformanceRow:
    """One row of the table: a verifier under one process (``kind`` chain or tree), a proposer
    in the decoding loop (``proposer``) or a tree builder (``tree_builder``). The fields under
    each kind's comment are set for that kind only (None otherwise)."""

    backend: str
    kind: str
    what: str
    process: str
    expected: str
    verdict: Verdict
    agrees: bool
    seconds: float
    witness: str | None
    summary: str
    # verifiers (the statistical audit)
    cases: int | None = None  # also tree builders: the trees of the battery
    cases_at_power: int | None = None
    detects_tv: float | None = None
    samples: int | None = None
    deviation: str | None = None  # a lossy verdict's deviation, in words
    # proposers (the exact 2-step check)
    rules: list[str] | None = None
    max_tv: float | None = None
    deterministic: bool | None = None
    # tree builders
    cases_checked: int | None = None
    unsupported: int | None = None

    def to_json(self) -> dict[str, Any]:
        head = {
            "backend": self.backend,
            "kind": self.kind,
            "what": self.what,
            "process": self.process,
            "expected": self.expected,
            "verdict": self.verdict.value,
            "agrees": self.agrees,
        }
        if self.kind == "proposer":
            more: dict[str, Any] = {
                "rules": self.rules,
                "max_tv": self.max_tv,
                "deterministic": self.deterministic,
            }
        elif self.kind == "tree_builder":
            more = {"cases": self.cases, "cases_checked": self.cases_checked, "unsupported": self.unsupported}
        else:
            more = {
                "cases": self.cases,
                "cases_at_power": self.cases_at_power,
                "detects_tv": self.detects_tv,
                "samples": self.samples,
            }
        tail: dict[str, Any] = {"seconds": self.seconds, "witness": self.witness, "summary": self.summary}
        if self.deviation is not None:
            tail["deviation"] = self.deviation
        return head | more | tail


@dataclass(kw_only=True)
class ConformanceReport:
    """What :func:`run` found (module doc)."""

    date: str
    versions: dict[str, str]
    budget_seconds: float
    seed: int
    rows: list[ConformanceRow] = field(default_factory=list)
    not_installed: list[dict[str, str]] = field(default_factory=list)  # adapter, package, reason

    @property
    def agrees(self) -> bool:
        return all(r.agrees for r in self.rows)

    @property
    def verdict(self) -> Verdict:
        """``pass`` when every row got the verdict its package expects, ``lossy`` otherwise."""
        return Verdict.PASS if self.agrees else Verdict.LOSSY

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def markdown(self) -> str:
        return markdown(self)

    def summary(self) -> str:
        return self.markdown()

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "date": self.date,
            "versions": self.versions,
            "budget_seconds": self.budget_seconds,
            "seed": self.seed,
            "rows": [r.to_json() for r in self.rows],
            "not_installed": self.not_installed,
        }


def _verifier_row(backend: Backend, process: str, result: Any) -> ConformanceRow:
    cases = result.cases
    cfg = result.config
    expected = backend.expected(process)
    witness = deviation = None
    if result.verdict == Verdict.LOSSY:
        w = result.shrunk or result.witness
        if w is not None:
            witness = w.case.describe()
            if w.hard_failure:
                deviation = "emits a token of target probability 0"
            elif w.tv is not None:
                deviation = (
                    f"p = {w.pvalue:.2g}, TV on cells {w.tv.estimate:.2f} "
                    f"[{w.tv.low:.2f}, {w.tv.high:.2f}] ({w.tv.confidence:.0%})"
                )
    elif result.verdict == Verdict.CONTRACT_VIOLATION and result.violation:
        witness = f"[{result.violation['kind']}] {result.violation['detail']}"
    return ConformanceRow(
        backend=backend.name,
        kind=backend.kind,
        what=backend.doc,
        process=process,
        expected=expected,
        verdict=result.verdict,
        # underpowered: no deviation found but short of the plan; not a contradiction of "pass"
        agrees=result.verdict == expected or (result.verdict == Verdict.UNDERPOWERED and expected == "pass"),
        cases=len(cases),
        cases_at_power=sum(r.power >= cfg.power for r in cases),
        detects_tv=max((r.detectable_tv for r in cases), default=1.0),
        samples=sum(r.n for r in cases),
        seconds=round(result.seconds, 1),
        witness=witness,
        summary=result.summary(),
        deviation=deviation,
    )


def _proposer_row(spec: dict[str, Any]) -> ConformanceRow:
    """A third-party proposer in the decoding loop: it must give the same drafts for the same
    context, and every rule declared exact for its process must be lossless over two steps on
    the 4-token transformer (the exact check of ``specproof e2e``)."""
    from specproof.properties.oracle.exact import multi_step_check
    from specproof.reference.decode import EXACT_PREFIX, e2e_models
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
    return ConformanceRow(
        backend=spec["name"],
        kind="proposer",
        what=spec["doc"],
        process=process.name,
        expected="pass",
        verdict=Verdict.PASS if ok else Verdict.LOSSY,
        agrees=ok,
        rules=sorted(tvs),
        max_tv=tvs[worst],
        deterministic=deterministic,
        seconds=round(time.perf_counter() - start, 1),
        witness=None
        if ok
        else (f"TV {tvs[worst]:.3g} with {worst}" if deterministic else "not deterministic"),
        summary=f"{spec['name']}: {len(tvs)} rules, largest TV {tvs[worst]:.3g} over 2 exact steps",
    )


def _builder_row(name: str, doc: str, res: BuilderResult) -> ConformanceRow:
    bad = [o for o in res.outcomes if o.status not in ("pass", "unsupported")]
    return ConformanceRow(
        backend=name,
        kind="tree_builder",
        what=doc,
        process="-",
        expected="pass",
        verdict=res.verdict,
        agrees=res.verdict in (Verdict.PASS, Verdict.NOT_APPLICABLE),
        cases=len(res.outcomes),
        cases_checked=res.checked,
        unsupported=sum(o.status == "unsupported" for o in res.outcomes),
        seconds=round(res.seconds, 2),
        witness=f"{bad[0].name}: [{bad[0].status}] {bad[0].detail}" if bad else None,
        summary=res.summary(),
    )


def run(
    names: list[str] | None = None,
    budget_seconds: float = 60.0,
    seed: int = 0,
    shrink_seconds: float = 10.0,
    progress: Callable[[str], None] | None = None,
) -> ConformanceReport:
    """Every installed adapter (or only ``names``), plus the built-in tree builders."""
    say = progress or (lambda msg: None)
    rows: list[ConformanceRow] = []
    missing: list[dict[str, str]] = []
    wanted = set(names) if names else None
    for adapter in ADAPTERS:
        ok, why = availability(adapter)
        if not ok:
            missing.append({"adapter": adapter.module, "package": adapter.package, "reason": why})
            continue
        module = importlib.import_module(f"{thirdparty.__name__}.{adapter.module}")
        for spec in module.backends():
            ensure_registered()
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
        known = {r.backend for r in rows} | {m["adapter"] for m in missing}
        unknown = sorted(wanted - known)
        if unknown:
            raise NotFoundError(f"BACKEND: {', '.join(unknown)} is not an installed adapter or tree builder")
    return ConformanceReport(
        date=datetime.date.today().isoformat(),
        versions=versions(),
        budget_seconds=budget_seconds,
        seed=seed,
        rows=rows,
        not_installed=missing,
    )


def markdown(report: ConformanceReport) -> str:
    v = report.versions
    lines = [
        f"Conformance of third-party backends, {report.date} "
        f"(`specproof conform`, seed {report.seed}, "
        f"{report.budget_seconds:g} s per verifier and process).",
        "",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        "",
        "| backend | process | expected | verdict | power reached | samples | time | witness |",
        "|---|---|---|---|---|---:|---:|---|",
    ]
    for r in report.rows:
        if r.kind == "proposer":
            power = f"exact 2-step law, {len(r.rules or [])} rules: largest TV {r.max_tv:.1g}"
            samples = "-"
        elif r.kind == "tree_builder":
            power = f"exact on {r.cases_checked} trees" + (
                f" ({r.unsupported} not expressible)" if r.unsupported else ""
            )
            samples = "-"
        else:
            samples = f"{r.samples:,}"
            if r.deviation:
                power = f"deviation found: {r.deviation}"
            else:
                power = (
                    f"{r.cases_at_power}/{r.cases} cases at 0.99 vs TV 0.01; all detect TV {r.detects_tv:.2g}"
                )
        verdict = r.verdict.value + ("" if r.agrees else " (unexpected)")
        lines.append(
            f"| {r.backend} | {r.process} | {r.expected} | {verdict} | {power} | {samples} | "
            f"{r.seconds:g} s | {r.witness or ''} |"
        )
    for m in report.not_installed:
        lines.append(f"| {m['adapter']}.* | - | - | not run | {m['reason']} | - | - | |")
    return "\n".join(lines)
