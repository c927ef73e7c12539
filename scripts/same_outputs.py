"""Behaviour kept across a refactor: the same commands, the same JSON, reports and exit codes
once timings are removed.

    python scripts/same_outputs.py capture DIR [NAME ...]   # run the commands, write DIR/NAME.*
    python scripts/same_outputs.py compare A B               # exit 0 when A and B agree

The commands: the exactness matrix, the main job (every built-in verifier against its
declaration, fixed plans), the engine groups (mutant and alternative loops at the audit's plan, TV
0.2; every reference loop at a fixed 100 samples per case), the endpoint audit through HTTP on the
project's stand-in servers (a correct one, two with planted bugs, each against a speculation-off
twin), and llama-server (two configurations of the pinned build, at a fixed sample count; skipped
when the build is absent). Capture once on the commit before a refactor and once after;
``compare`` prints, per command, the first differing path of its JSON, whether its report and
its exit status agree.

Timings are the only thing allowed to differ: keys that hold seconds, the plan printout's line
that estimates them from a probe call, the report lines that quote them, and the stand-ins'
ports; and numbers in the last bits (a relative difference below :data:`RELATIVE`: the same sums
taken in another order). :data:`RENAMED` lists the JSON keys a refactor renamed on purpose (old name ->
new name):
they are compared under their new name.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

#: the stand-in servers a command needs: placeholder -> (bug, speculative)
STANDINS: dict[str, tuple[str | None, bool]] = {
    "correct": (None, True),
    "twin": (None, False),
    "greedy_verify": ("greedy_verify", True),
    "zero_logprobs": ("zero_logprobs", True),
}

ENDPOINT = ["specproof", "audit", "endpoint", "--target-endpoint", "{twin}", "--samples", "300",
            "--tokens", "4", "--progress", "off", "--json", "{out}", "--report", "{report}"]  # fmt: skip

COMMANDS: dict[str, list[str]] = {
    "matrix": ["specproof", "matrix", "--progress", "off", "--json", "{out}"],
    "mainjob": ["specproof", "audit", "--progress", "off", "--json", "{out}", "--report", "{report}"],
    "engine-mut": [
        "specproof", "audit", "engine", "--engine-group", "mutant", "--engine-group", "alternative",
        "--tv", "0.2", "--budget-seconds", "1800", "--progress", "off", "--json", "{out}",
        "--report", "{report}",
    ],
    "engine-ref": [
        "specproof", "audit", "engine", "--engine-group", "reference", "--samples", "100",
        "--progress", "off", "--json", "{out}", "--report", "{report}",
    ],
    "endpoint-correct": [*ENDPOINT[:3], "{correct}", *ENDPOINT[3:]],
    "endpoint-greedy-verify": [*ENDPOINT[:3], "{greedy_verify}", *ENDPOINT[3:]],
    "endpoint-zero-logprobs": [*ENDPOINT[:3], "{zero_logprobs}", *ENDPOINT[3:], "--temperature", "1"],
    "endpoint-llama-server": [
        "specproof", "llamacpp", "table", "--only", "llama-server.draft",
        "--only", "llama-server.ngram-simple", "--samples", "200", "--progress", "off",
        "--json", "{out}", "--markdown", "{report}",
    ],
}  # fmt: skip

#: keys whose values are wall-clock measurements, or that name a port the stand-ins got
TIMING_KEYS = {"seconds", "per_sample_seconds", "case_timings", "estimated_seconds"}
#: lines of printed text that quote a timing
TIMING_LINE = re.compile(r"^\s*probe: .* ms per sample.*$", re.M)
#: what a report or a URL quotes that a second run cannot repeat
VOLATILE = [
    (re.compile(r"http://127\.0\.0\.1:\d+"), "http://127.0.0.1:PORT"),
    (re.compile(r"\b\d\d:\d\d UTC\b"), "HH:MM UTC"),
    (re.compile(r"\d+(\.\d+)? (ms|s|min)\b"), "TIME"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "DATE"),
    (re.compile(r"[\d.]+ (samples|completions|tokens)/s"), "RATE"),
]
#: JSON keys renamed on purpose by a refactor: old -> new
RENAMED = {"target_endpoint": "twin"}


def normalize(value: Any) -> Any:
    """The JSON with its timings removed, renamed keys under their new names, ports masked."""
    if isinstance(value, dict):
        return {RENAMED.get(k, k): normalize(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, str):
        return mask(TIMING_LINE.sub("", value))
    return value


#: the headers of report columns that hold timings
TIMING_COLUMN = re.compile(r"^(s|seconds|ms/sample|ms per sample|time|s/run)$")


def mask(text: str) -> str:
    for pattern, repl in VOLATILE:
        text = pattern.sub(repl, text)
    return _mask_timing_columns(text)


def _mask_timing_columns(text: str) -> str:
    """Markdown tables with their timing columns (by header) blanked."""
    out, timing = [], set()
    for line in text.splitlines():
        if not line.startswith("|"):
            timing = set()
            out.append(line)
            continue
        cells = line.strip().strip("|").split("|")
        if not timing and not set(line) <= set("|-: "):
            timing = {i for i, c in enumerate(cells) if TIMING_COLUMN.match(c.strip())} or {-1}
        out.append("|".join("T" if i in timing else c for i, c in enumerate(cells)))
    return "\n".join(out)


#: floats that differ by less than this (relatively) are equal: sums taken in another order
RELATIVE = 1e-9


def first_difference(a: Any, b: Any, path: str = "$") -> str | None:
    if isinstance(a, float) and isinstance(b, float):
        close = a == b or abs(a - b) <= RELATIVE * max(abs(a), abs(b))
        return None if close else f"{path}: {a!r} vs {b!r}"
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


@contextlib.contextmanager
def standins(names: set[str]) -> Iterator[dict[str, str]]:
    """The stand-in servers ``names`` need, started for the block: placeholder -> URL."""
    from specproof.properties.endpoint import standin

    with contextlib.ExitStack() as stack:
        urls = {}
        for n in sorted(names):
            bug, speculative = STANDINS[n]
            urls[n] = stack.enter_context(standin.serve(bug, speculative))
        yield urls


def llama_built() -> bool:
    try:
        from specproof.properties.servers import llamacpp

        return bool(llamacpp.info()["cached"])
    except Exception:
        return False


def capture(folder: pathlib.Path, only: list[str]) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    codes: dict[str, int] = {}
    codes_file = folder / "exit-codes.json"
    if codes_file.exists():
        codes = json.loads(codes_file.read_text())
    for name, argv in COMMANDS.items():
        if only and name not in only:
            continue
        if name == "endpoint-llama-server" and not llama_built():
            print(f"{name}: skipped (llama.cpp is not built: specproof llamacpp build)", flush=True)
            continue
        needs = {n for n in STANDINS if any("{" + n + "}" in a for a in argv)}
        with standins(needs) as urls:
            subs = dict(urls, out=str(folder / f"{name}.json"), report=str(folder / f"{name}.md"))
            cmd = [a.format(**subs) for a in argv]
            print("$", " ".join(cmd), flush=True)
            with open(folder / f"{name}.txt", "w") as log:
                codes[name] = subprocess.call(cmd, stdout=log)
        print(f"  exit {codes[name]}", flush=True)
        codes_file.write_text(json.dumps(codes, indent=1, sort_keys=True))
    return 0


def compare(a: pathlib.Path, b: pathlib.Path) -> int:
    bad = 0
    codes_a = json.loads((a / "exit-codes.json").read_text())
    codes_b = json.loads((b / "exit-codes.json").read_text())
    for name in COMMANDS:
        if name not in codes_a or name not in codes_b:
            print(f"{name}: not captured in {'A' if name not in codes_a else 'B'}")
            continue
        x = normalize(json.loads((a / f"{name}.json").read_text()))
        y = normalize(json.loads((b / f"{name}.json").read_text()))
        diff = first_difference(x, y)
        ra, rb = (p / f"{name}.md" for p in (a, b))
        same_report = (not ra.exists() and not rb.exists()) or (
            ra.exists() and rb.exists() and mask(ra.read_text()) == mask(rb.read_text())
        )
        same_code = codes_a[name] == codes_b[name]
        print(
            f"{name}: JSON {'identical' if diff is None else 'DIFFERS at ' + diff}; report "
            f"{'identical' if same_report else 'DIFFERS'}; exit {codes_a[name]} vs {codes_b[name]}"
        )
        bad += diff is not None or not same_report or not same_code
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "capture":
        unknown = [n for n in argv[2:] if n not in COMMANDS]
        if unknown:
            print(f"unknown command {unknown[0]!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
            return 4
        return capture(pathlib.Path(argv[1]), argv[2:])
    if len(argv) == 3 and argv[0] == "compare":
        return compare(pathlib.Path(argv[1]), pathlib.Path(argv[2]))
    print(__doc__, file=sys.stderr)
    return 4


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
