"""How often llama.cpp's speculative examples lose their printed text under CPU load.

Usage: python scripts/llamacpp_output_loss.py BUILD_DIR [RUNS] [PROGRAM]

Runs PROGRAM (``llama-speculative``, the default, or ``llama-speculative-simple``) of the llama.cpp
build in BUILD_DIR RUNS times (default 60) on the tiny models, three at once, beside two busy
processes (``yes``), each run once (no retry), and prints how many lost their text. The examples
print through a logging thread that the unpatched build never drains at exit; the project's build
drains it (``PATCHES`` in properties/servers/llamacpp.py). Measured on 2 cores on 2026-12-06: the
patched build 0 of 60 for each program, the unpatched one 23 of 30 (llama-speculative) and 26 of
30 (llama-speculative-simple), side by side.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from specproof.properties.servers import gguf_models as gm
from specproof.properties.servers import llamacpp

ARGS = "-n 24 --seed 3 --spec-draft-n-max 4 --temp 1 --top-k 0 --top-p 1 --min-p 0 --samplers temperature"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 4
    build, runs = Path(argv[0]), int(argv[1]) if len(argv) > 1 else 60
    program = argv[2] if len(argv) > 2 else "llama-speculative"
    if not (build / program).exists():
        print(f"{build / program}: no such program", file=sys.stderr)
        return 4
    models = gm.write_models(Path(tempfile.mkdtemp()), seed=0)
    args = ARGS.split() + (["-np", "2"] if program == "llama-speculative" else [])

    def lost(_: int) -> int:
        try:
            llamacpp.run_speculative(
                build, models["target"], models["draft"], "abc", args, program, attempts=1
            )
            return 0
        except llamacpp.LlamaRunError:
            return 1

    hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(2)]
    try:
        with ThreadPoolExecutor(3) as pool:
            n = sum(pool.map(lost, range(runs)))
    finally:
        for h in hogs:
            h.kill()
    print(f"{program} ({build}): {n} of {runs} runs lost their text")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
