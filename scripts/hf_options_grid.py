"""Print the option x candidate generator table of docs/engine-audit.md ("Generation options
under speculation") from the JSON of an ``--engine-group hf-options`` run:

    python scripts/hf_options_grid.py docs/measurements/engine-audit-hf-options.json
"""

from __future__ import annotations

import json
import sys

from specproof.properties.engine.adapters.hf_options import markdown_grid


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 4
    with open(argv[0]) as f:
        print(markdown_grid(json.load(f)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
