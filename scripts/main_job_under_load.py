"""The main job as an instrument: one run on an idle machine, then N runs beside a CPU hog.

Reproduces docs/verifier-audit.md's "The main job" figures and its mutation table:

    python scripts/main_job_under_load.py --runs 10 --out /tmp/main-job

Each run is ``specproof audit --json RUN/audit.json`` in its own folder. The script prints one line
per run (exit status, wall time, load average, the summary line), checks that every JSON report
equals the first once its timing keys are removed (the verdict is read from the plan and the seed,
never from the clock), and writes the mutation table of the first run as Markdown
(``OUT/mutation-table.md``). Arguments after ``--`` go to ``specproof audit`` (e.g. ``-- --group
mutant`` for a shorter check). Exit status 0 when every run got every declared verdict and all
reports agree, 1 otherwise.

With a kind after ``--`` the same is done for one audit of that kind (no mutation table; every run
must exit as the idle one did), e.g. the engine audit beside two hogs:

    python scripts/main_job_under_load.py --runs 2 --hogs 2 --out OUT -- engine reference.direct --tv 0.05
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TIMING = ("seconds", "timing", "estimated")
#: the audits of one target (the rest of the arguments after ``--`` name it)
KINDS = ("chain", "tree", "engine", "endpoint", "traffic")


def strip_timings(x: Any) -> Any:
    """The report without its timing keys (wall times, per-case seconds, estimates)."""
    if isinstance(x, dict):
        out = {k: strip_timings(v) for k, v in x.items() if not any(t in k for t in TIMING)}
        if isinstance(out.get("plan"), str):  # the plan's text quotes the probe's clock reading
            out["plan"] = "\n".join(line for line in out["plan"].splitlines() if "probe:" not in line)
        return out
    if isinstance(x, list):
        return [strip_timings(v) for v in x]
    return x


def run_once(folder: Path, audit_args: list[str]) -> tuple[int, float, str]:
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    proc = subprocess.run(
        ["specproof", "audit", "--json", "audit.json", "--progress", "off", *audit_args],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    (folder / "stdout.txt").write_text(proc.stdout + proc.stderr)
    lines = [line for line in proc.stdout.splitlines() if "backends got their declared verdict" in line]
    if audit_args[:1] and audit_args[0] in KINDS:  # one audit: its verdict line
        lines = [line for line in proc.stdout.splitlines() if ": " in line and not line.startswith(" ")]
    summary = lines[-1] if lines else ""
    return proc.returncode, wall, summary.strip()


def mutation_table(report: dict[str, Any]) -> str:
    from specproof.properties.conformance.backends import REGISTRY
    from specproof.properties.conformance.mutants import alternatives, corpus

    docs = {(b.kind, b.name): b.doc for b in [*REGISTRY.values(), *corpus(), *alternatives()]}
    rows = ["| backend | what it does | expected | verdict | how it was caught |", "|---|---|---|---|---|"]
    for b in report["backends"]:
        name = b["backend"]
        if not (name.startswith(("mutant.", "torch.")) or name == "reference.typical" or "[" in name):
            continue
        if b["verdict"] == "lossy":
            w = b["witness"]
            caught = "hard failure" if w.get("hard_failure") else f"p = {w['pvalue']:.2g}"
            how = f"{w['case']['name']}, {caught}"
        elif b["verdict"] == "contract_violation":
            v = b["violation"]
            how = f"`{v['kind']}` in {v['case']} ({v['during']})"
        else:
            steps = sum(c["samples"] for c in b["cases"])
            tvs = sorted({c["planned_tv"] for c in b["cases"] if c["status"] == "ran"})
            planned = " / ".join(f"{t:g}" for t in tvs)
            how = f"{steps:,} steps, no deviation; every case ran its plan (TV {planned})"
        doc = docs.get((b["kind"], name), "")
        rows.append(f"| {b['kind']} {name} | {doc} | {b['expected']} | {b['verdict']} | {how} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    audit_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, audit_args = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs beside the CPU hog (default 10)")
    parser.add_argument("--out", type=Path, required=True, help="a folder for the runs' reports")
    parser.add_argument("--hogs", type=int, default=1, help="CPU hogs beside the loaded runs (default 1)")
    args = parser.parse_args(argv)
    if args.runs < 0:
        parser.error(f"--runs must be >= 0, got {args.runs}")
    args.out.mkdir(parents=True, exist_ok=True)

    names = ["idle"] + [f"load{i + 1}" for i in range(args.runs)]
    one = bool(audit_args[:1] and audit_args[0] in KINDS)
    ok, codes = True, []
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        for name in names:
            if name != "idle" and not hogs:
                hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.hogs)]
            rc, wall, summary = run_once(args.out / name, audit_args)
            load = os.getloadavg()[0]
            print(f"{name:8s} exit {rc}  {wall:6.1f} s  load {load:.2f}  {summary}", flush=True)
            codes.append(rc)
            ok &= rc == codes[0] if one else rc == 0
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()

    first = json.loads((args.out / "idle" / "audit.json").read_text())
    base = strip_timings(first)
    for name in names[1:]:
        same = strip_timings(json.loads((args.out / name / "audit.json").read_text())) == base
        print(f"{name:8s} report {'identical to idle (timings aside)' if same else 'DIFFERS from idle'}")
        ok &= same
    if not one:
        (args.out / "mutation-table.md").write_text(mutation_table(first))
        print(f"mutation table: {args.out / 'mutation-table.md'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
