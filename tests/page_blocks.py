"""Running a docs page's bash blocks as written (tests/test_deploying.py, tests/test_vllm_cpu.py):
each block in a fresh bash with ``DIR`` (a temporary folder), ``PORT`` and ``TWIN_PORT`` (free
loopback ports) set, the servers it starts in the background stopped however it ends, and a
stand-in for ``curl -sf URL`` where the machine has no curl."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from specproof.properties.servers import llamacpp

#: where a machine has no curl, the page's health wait (``curl -sf URL``) is answered by this
CURL = """import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[-1], timeout=2)
except Exception:
    sys.exit(22)
"""


def bash_blocks(page: Path) -> list[str]:
    """Every ```bash block of ``page``, in order."""
    return [m.group(1) for m in re.finditer(r"^```bash\n(.*?)^```", page.read_text(), re.S | re.M)]


def run_block(tmp_path: Path, script: str, timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    """``script`` run as the page's reader runs it: its result and the seconds it took."""
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
