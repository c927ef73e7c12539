"""docs/deploying.md's commands, as written: the flags its llama-server lines give are the ones the
project's own tests serve with (``llamacpp.server_command``), and, with the pinned build, its
shell block runs (on free loopback ports, in a temporary folder) to the verdict the page states;
without ``--spec-type`` the same block stops in seconds with ``no_speculation`` and the hint."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specproof.properties.servers import llamacpp
from specproof.properties.verdicts import Verdict

PAGE = Path(__file__).resolve().parent.parent / "docs" / "deploying.md"


def block() -> str:
    """The page's first bash block."""
    m = re.search(r"^```bash\n(.*?)^```", PAGE.read_text(), re.S | re.M)
    assert m, "docs/deploying.md has no bash block"
    return m.group(1)


def expanded() -> str:
    """The block with ``$COMMON`` written out and continuation lines joined."""
    text = block().replace("\\\n", " ")
    common = re.search(r'^COMMON="([^"]*)"', text, re.M)
    assert common, "the block sets COMMON"
    return re.sub(r"\s+", " ", text.replace("$COMMON", common.group(1)))


def test_the_page_serves_with_the_flags_the_tests_serve_with() -> None:
    """Every flag and value of the tested server command, the draft's included, is on the page's
    speculative server line; the twin's line has them too, without the draft."""
    lines = [ln for ln in expanded().split("& ") if "llama-server" in ln]
    assert len(lines) == 2, lines
    spec, twin = lines if "-md" in lines[0] else lines[::-1]
    cmd = llamacpp.server_command(Path("BIN"), Path("M"), 1, draft=Path("D"))
    skip = {"-m", "--port", "-md"}  # the paths and the port: the page's own variables
    i = 1
    while i < len(cmd):
        flag = cmd[i]
        value = cmd[i + 1] if i + 1 < len(cmd) and not cmd[i + 1].startswith("-") else None
        i += 2 if value is not None else 1
        if flag in skip:
            continue
        want = f"{flag} {value}" if value is not None else flag
        assert want in spec, f"the speculative server line lacks {want!r}"
    for flag in ("--spec-type draft-simple", "-md "):
        assert flag in spec and flag not in twin
    for pair in ("-fa off", "-ctk f32", "-ctv f32", "--metrics", "-np 1"):
        assert pair in twin


#: where a machine has no curl, the page's health wait (``curl -sf URL``) is answered by this
CURL = """import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[-1], timeout=2)
except Exception:
    sys.exit(22)
"""


def _run(tmp_path: Path, script: str, timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    path = [os.path.dirname(sys.executable), os.environ.get("PATH", "")]
    if shutil.which("curl") is None:
        tools = tmp_path / "tools"
        tools.mkdir()
        (tools / "curl").write_text(f"#!{sys.executable}\n{CURL}")
        (tools / "curl").chmod(0o755)
        path.insert(0, str(tools))
    env = dict(
        os.environ,
        DIR=str(tmp_path),
        PORT=str(llamacpp.free_port()),
        TWIN_PORT=str(llamacpp.free_port()),
        PATH=os.pathsep.join(path),
    )
    # the servers started in the background are stopped however the block ends
    full = "set -u\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n" + script
    t0 = time.monotonic()
    done = subprocess.run(["bash", "-c", full], env=env, capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - t0


@pytest.mark.llamacpp
def test_the_pages_commands_run_to_the_verdict_it_states(llamacpp_bin: Path, tmp_path: Path) -> None:
    """The block as written: `misreported` (exit 6), the law tests seeing nothing, the reported
    probabilities wrong; the JSON and the HTML report written where the page says."""
    done, _ = _run(tmp_path, block(), timeout=900)
    assert done.returncode == Verdict.MISREPORTED.exit_code, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "audit.json").read_text())
    assert result["verdict"] == "misreported"
    assert "no deviation detected" in done.stdout, done.stdout[-3000:]
    assert "reported probabilities: WRONG" in done.stdout, done.stdout[-3000:]
    assert (tmp_path / "audit.html").read_text().lstrip().lower().startswith("<!doctype html")


@pytest.mark.llamacpp
def test_without_a_speculation_type_the_block_stops_at_once_with_the_cause(
    llamacpp_bin: Path, tmp_path: Path
) -> None:
    """The page's warning, shown: the same block without `--spec-type` (a draft model alone never
    drafts) reads `no_speculation` within 30 s of the audit's start, naming the flag."""
    script = block().replace(" --spec-type draft-simple", "")
    assert "--spec-type" not in script
    done, _ = _run(tmp_path, script, timeout=600)
    assert done.returncode == Verdict.NO_SPECULATION.exit_code, done.stdout[-3000:] + done.stderr[-3000:]
    assert "--spec-type draft-simple" in done.stdout
    result = json.loads((tmp_path / "audit.json").read_text())
    assert result["verdict"] == "no_speculation" and result["samples"] == 0
    assert result["seconds"] < 30, result["seconds"]
