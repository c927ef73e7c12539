"""Behaviour kept across a refactor: the same commands, the same JSON once timings are removed.

    python scripts/same_outputs.py capture DIR      # run the commands below, write DIR/*.json
    python scripts/same_outputs.py compare A B      # exit 0 when every JSON of A equals B's

The commands are the exactness matrix, the main job (every built-in verifier against its
declaration, fixed plans), and the engine groups (mutant and alternative loops at the audit's
plan, TV 0.2; every reference loop at a fixed 100 samples per case). Capture once on the commit
before a refactor and once after; ``compare`` prints the first differing path of each file.

Timings are the only thing allowed to differ: keys that hold seconds, and the plan printout's
line that estimates them from a probe call.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
from typing import Any

COMMANDS: dict[str, list[str]] = {
    "matrix": ["specproof", "matrix", "--progress", "off", "--json", "{out}"],
    "mainjob": ["specproof", "audit", "--progress", "off", "--json", "{out}", "--report", "{dir}/mainjob.md"],
    "engine-mut": [
        "specproof", "audit", "engine", "--engine-group", "mutant", "--engine-group", "alternative",
        "--tv", "0.2", "--budget-seconds", "1800", "--progress", "off", "--json", "{out}",
    ],
    "engine-ref": [
        "specproof", "audit", "engine", "--engine-group", "reference", "--samples", "100",
        "--progress", "off", "--json", "{out}",
    ],
}  # fmt: skip

#: keys whose values are wall-clock measurements
TIMING_KEYS = {"seconds", "per_sample_seconds", "case_timings", "estimated_seconds"}
#: lines of printed text that quote a timing
TIMING_LINE = re.compile(r"^\s*probe: .* ms per sample.*$", re.M)


def normalize(value: Any) -> Any:
    """The JSON with its timings removed."""
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, str):
        return TIMING_LINE.sub("", value)
    return value


def first_difference(a: Any, b: Any, path: str = "$") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'B' if k not in a else 'A'}"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def capture(folder: pathlib.Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    for name, argv in COMMANDS.items():
        out = folder / f"{name}.json"
        cmd = [a.format(out=out, dir=folder) for a in argv]
        print("$", " ".join(cmd), flush=True)
        with open(folder / f"{name}.txt", "w") as log:
            rc = subprocess.call(cmd, stdout=log)
        print(f"  exit {rc}", flush=True)
    return 0


def compare(a: pathlib.Path, b: pathlib.Path) -> int:
    bad = 0
    for name in COMMANDS:
        x = normalize(json.loads((a / f"{name}.json").read_text()))
        y = normalize(json.loads((b / f"{name}.json").read_text()))
        diff = first_difference(x, y)
        print(f"{name}: {'identical' if diff is None else 'DIFFERS at ' + diff}")
        bad += diff is not None
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "capture":
        return capture(pathlib.Path(argv[1]))
    if len(argv) == 3 and argv[0] == "compare":
        return compare(pathlib.Path(argv[1]), pathlib.Path(argv[2]))
    print(__doc__, file=sys.stderr)
    return 4


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
