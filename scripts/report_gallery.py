"""Write one report of each kind of audit at each verdict it can reach, in Markdown, HTML and
JSON, and where Chromium is installed (Debian's ``chromium``) a screenshot of each HTML page:
what a person reading the reports sees (docs/reports.md shows them).

    python scripts/report_gallery.py OUT_DIR [--only NAME ...] [--no-screenshots]

The audits are the render test's (tests/test_report_model.py): small and seeded, on the
project's own engines, its stand-in server and traffic the stand-in served.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from specproof.properties import report_model
from specproof.properties.cli import main
from specproof.properties.endpoint.families.llamacpp import LlamaCpp
from specproof.properties.endpoint.standin import StandIn
from specproof.properties.engine.contract import Sampling

RECIPES: dict[str, list[str]] = {
    "verifier-pass": ["chain", "torch.token", "--tv", "0.1", "--large-vocab-tv", "0.5"],
    "verifier-lossy": [
        "chain",
        "mutant.residual_from_p",
        "--samples",
        "3000",
        "--shrink",
        "0",
        "--stop-early",
    ],
    "verifier-underpowered": ["chain", "torch.token", "--samples", "30"],
    "engine-pass": ["engine", "reference.direct", "--tv", "0.2", "--test", "tokens"],
    "engine-lossy": ["engine", "mutant.greedy_draft_soft_law", "--samples", "400", "--test", "tokens"],
    "engine-underpowered": ["engine", "reference.direct", "--test", "tokens", "--budget-seconds", "1"],
    "engine-misreported": [
        "engine",
        "mutant.draft_reports",
        "--prompt",
        "0 6",
        "--temperature",
        "1",
        "--tv",
        "0.2",
        "--test",
        "tokens",
    ],
}
ENDPOINT = {
    "endpoint-pass": (None, ["--tv", "0.2"]),
    "endpoint-lossy": ("greedy_verify", ["--samples", "400"]),
    "endpoint-underpowered": (None, ["--budget-seconds", "1"]),
    "endpoint-misreported": ("zero_logprobs", ["--tv", "0.2"]),
}
TRAFFIC = {
    "traffic-pass": (None, 420, "0.1"),
    "traffic-lossy": ("greedy_verify", 420, "0.1"),
    "traffic-underpowered": (None, 40, "0.05"),
}
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def _audit(out: Path, name: str, argv: list[str]) -> None:
    report = out / f"{name}.json"
    main(["audit", *argv, "--progress", "off", "--report", str(report)])
    blocks = report_model.from_json(json.loads(report.read_text()))
    (out / f"{name}.md").write_text(report_model.to_markdown(blocks))
    (out / f"{name}.html").write_text(report_model.to_html(blocks))


def endpoint_args(url: str, options: list[str]) -> list[str]:
    """The endpoint audit's arguments for the stand-in at ``url``: one prompt, T = 1, M = 4."""
    return ["endpoint", url, "--prompt", "0 6", "--temperature", "1", "--tokens", "4", *options]


def traffic_file(folder: Path, bug: str | None, n: int) -> str:
    """``n`` requests served by the stand-in (with ``bug`` planted), as a deployer logs them."""
    profile, rows = LlamaCpp(), []
    prompts, settings = ((0, 6), (5, 2, 5, 2)), (Sampling(1.0), Sampling(0.7))
    with StandIn(bug, loop="laws", listen=False) as si:
        for k in range(n):
            prompt, s = prompts[k % 2], settings[(k // 2) % 2]
            path, body = profile.generation(prompt, 12, k, s, report=False)
            status, answer = si.respond("POST", path, json.dumps(body).encode())
            assert status == 200, answer
            rows.append(
                {
                    "prompt": list(prompt),
                    "tokens": answer["tokens"],
                    "sampling": {"temperature": s.temperature},
                }
            )
    path = folder / f"traffic-{bug}-{n}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def screenshot(page: Path, png: Path, chromium: str) -> None:
    """The page as headless Chromium draws it, 1200 px wide, its whole height."""
    with tempfile.TemporaryDirectory(prefix="specproof-chromium-") as profile:
        cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1200,3000"]
        cmd += [f"--screenshot={png}", page.resolve().as_uri()]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def dump_dom(page: Path, chromium: str) -> str:
    """The page's DOM as headless Chromium holds it once parsed (what the browser draws from)."""
    with tempfile.TemporaryDirectory(prefix="specproof-chromium-") as profile:
        cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()]
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout


def main_gallery(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="folder to write the reports in")
    ap.add_argument("--only", action="append", metavar="NAME", help="only this report (e.g. engine-lossy)")
    ap.add_argument("--no-screenshots", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = set(args.only or [*RECIPES, *ENDPOINT, *TRAFFIC])
    for name, recipe in RECIPES.items():
        if name in wanted:
            _audit(out, name, recipe)
    for name, (bug, options) in ENDPOINT.items():
        if name in wanted:
            with StandIn(bug, loop="laws") as si:
                _audit(
                    out,
                    name,
                    ["endpoint", si.url, "--prompt", "0 6", "--temperature", "1", "--tokens", "4", *options],
                )
    with tempfile.TemporaryDirectory(prefix="specproof-traffic-") as tmp:
        for name, (bug, n, tv) in TRAFFIC.items():
            if name in wanted:
                path = traffic_file(Path(tmp), bug, n)
                with StandIn(speculative=False, loop="laws") as twin:
                    _audit(out, name, ["traffic", path, "--twin", twin.url, "--tv", tv])
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if args.no_screenshots or chromium is None:
        print("no screenshots" + ("" if chromium else " (chromium is not installed)"), file=sys.stderr)
        return 0
    for page in sorted(out.glob("*.html")):
        if page.stem in wanted:
            screenshot(page, page.with_suffix(".png"), chromium)
            print(f"{page.with_suffix('.png')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main_gallery())
