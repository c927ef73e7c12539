"""Every kernel compiles for a GPU (sm_90) without one: the interpreter cannot see compiler-only
errors (a loop-carried value changing type, say), so CI compiles each kernel to a cubin with
Triton's bundled toolchain in a fresh process with TRITON_INTERPRET=0."""

from __future__ import annotations

import os
import subprocess
import sys


def test_every_kernel_compiles_for_sm90():
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    r = subprocess.run(
        [sys.executable, "-m", "specproof.properties.bench.compile_check", "--only", "fp32"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok ") >= 10, r.stdout
