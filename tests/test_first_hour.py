"""A user's first hour: what hurt, each with a test that fails on the old behaviour.

Every verdict here comes from a fixed plan and seed (fixed ``samples`` or a TV coarse enough for
seconds of work); the statistical ones name their alpha. The slow ones (a CPU hog, a real Ctrl-C)
are marked slow.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import specproof
from specproof.properties.cli import main

QUICK = ["--tv", "0.2", "--large-vocab-tv", "0.5", "--no-wide-probe", "--progress", "off"]
BUGGY = """\
import functools
from specproof.properties.conformance.backends import torch_chain as tc

verify_chain = functools.partial(tc.token_chain, bugs=tc.Bugs(residual_from_p=True))
"""


def _verifier_files(folder: Path) -> Path:
    """A verifier split over two files: verify.py imports its sibling helpers.py."""
    (folder / "helpers.py").write_text(BUGGY)
    path = folder / "verify.py"
    path.write_text("from helpers import verify_chain  # a sibling module\n")
    return path


# --------------------------------------------------------------------------- CI and the plugin


def test_the_plugin_sets_no_time_guard_unless_asked(pytester):
    """The CI verdict is an instrument reading: the plan alone decides it, a busy runner only
    makes it slower (the old default, 60 s per case, failed the V = 152,064 cases under load)."""
    pytester.makeconftest(
        "def pytest_collection_finish(session):\n"
        "    from specproof.properties.pytest_plugin import verifier_plan\n"
        "    print('BUDGET', verifier_plan(session.config).budget_seconds)\n"
    )
    out = pytester.runpytest("--specproof-chain", "torch.token", "--collect-only", "-q", "-s")
    out.stdout.fnmatch_lines(["BUDGET inf"])
    out = pytester.runpytest(
        "--specproof-chain", "torch.token", "--specproof-budget-seconds", "30", "--collect-only", "-q", "-s"
    )
    out.stdout.fnmatch_lines(["BUDGET 30.0"])


@pytest.mark.slow
def test_a_correct_verifier_passes_beside_a_cpu_hog(pytester):
    hog = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
    try:
        out = pytester.runpytest_subprocess(
            "--specproof-chain", "torch.token", "-k", "K1 or K2/V8 or fan3/V8", "-p", "no:cacheprovider"
        )
    finally:
        hog.kill()
    outcomes = out.parseoutcomes()
    assert outcomes.get("passed", 0) >= 4 and not outcomes.get("failed"), out.stdout.str()


def test_an_unimportable_target_is_a_usage_error_under_xdist(pytester):
    out = pytester.runpytest_subprocess("--specproof-chain", "no_such_module:verify", "-n", "2")
    assert out.ret == 4, out.stdout.str() + out.stderr.str()
    assert "no_such_module" in out.stderr.str() + out.stdout.str()


# --------------------------------------------------------------------------- replay


def _lossy_json(tmp_path: Path) -> Path:
    path = _verifier_files(tmp_path)
    out = tmp_path / "audit.json"
    code = main(["audit", "chain", f"{path}:verify_chain", "--json", str(out), "--stop-early", *QUICK])
    assert code == 1
    return out


def _run_replay(tmp_path: Path, audit_json: Path, target: str) -> int:
    test = tmp_path / f"test_replay_{abs(hash(target)) % 10**6}.py"
    assert main(["replay", str(audit_json), "--target", target, "-o", str(test)]) == 0
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    ).returncode


@pytest.mark.slow
def test_replay_fails_on_the_bug_raising_and_padding_and_passes_on_the_fix(tmp_path):
    audit_json = _lossy_json(tmp_path)
    (tmp_path / "fixes.py").write_text(
        textwrap.dedent(
            """\
            import torch
            from specproof.properties.conformance.backends.torch_chain import token_chain as fixed

            def raises(d, dp, tp, g):
                raise RuntimeError("not implemented yet")

            def padding(d, dp, tp, g):
                return torch.full((d.shape[0], d.shape[1] + 1), -1, dtype=torch.long)
            """
        )
    )
    assert _run_replay(tmp_path, audit_json, f"{tmp_path / 'helpers.py'}:verify_chain") != 0
    assert _run_replay(tmp_path, audit_json, f"{tmp_path / 'fixes.py'}:raises") != 0
    assert _run_replay(tmp_path, audit_json, f"{tmp_path / 'fixes.py'}:padding") != 0
    assert _run_replay(tmp_path, audit_json, f"{tmp_path / 'fixes.py'}:fixed") == 0


def test_an_audit_from_python_names_its_verifier_for_replay():
    from specproof.properties.conformance.backends.torch_chain import block_chain

    r = specproof.audit_chain(block_chain, samples=200, probes=False, progress="off")
    assert r.to_json()["target"] == "specproof.properties.conformance.backends.torch_chain:block_chain"


# --------------------------------------------------------------------------- outputs, interrupts, imports


def test_an_unwritable_output_path_is_refused_before_the_audit(capsys):
    t0 = time.perf_counter()
    assert main(["audit", "chain", "torch.token", "--json", "/proc/x.json"]) == 4
    err = capsys.readouterr().err
    assert "--json" in err and "internal error" not in err
    assert time.perf_counter() - t0 < 30  # refused, not found after the audit
    assert main(["audit", "chain", "torch.token", "--report", "out.pdf"]) == 4
    assert "--report" in capsys.readouterr().err


def test_written_results_are_readable_like_any_new_file(tmp_path):
    import os
    import stat

    from specproof.properties.outputs import write_json

    mask = os.umask(0o022)
    try:
        write_json(str(tmp_path / "r.json"), {"verdict": "pass"})
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644
    assert not list(tmp_path.glob(".specproof-*"))


def _terminal_sigint() -> None:
    """The child's SIGINT as a terminal gives it: the default action. A test runner's worker may
    hold SIGINT ignored, and an ignored signal is inherited across exec (Python then installs no
    KeyboardInterrupt handler), which would test the runner, not specproof."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_exits_4_with_the_json_written(tmp_path):
    for delay in (1.0, 10.0):  # while importing, then during the audit
        out = tmp_path / f"int{delay:g}.json"
        p = subprocess.Popen(
            ["specproof", "audit", "chain", "torch.token", "--progress", "off", "--json", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_terminal_sigint,
        )
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        here = signal.getsignal(signal.SIGINT)
        assert p.returncode == 4, (delay, p.returncode, f"SIGINT here: {here}", err.decode()[-800:])
        if out.exists():
            assert json.loads(out.read_text())["verdict"] == "interrupted"


def test_a_verifier_split_over_two_files_loads(tmp_path, monkeypatch):
    path = _verifier_files(tmp_path)
    monkeypatch.chdir(tmp_path.parent)
    monkeypatch.setattr(sys, "path", list(sys.path))
    code = main(["audit", "chain", f"{path}:verify_chain", "--samples", "2000", "--stop-early", *QUICK])
    assert code == 1  # it loaded, and its bug was found


# --------------------------------------------------------------------------- what a report shows first


def test_the_witness_is_the_strongest_rejection_and_says_how_acceptance_compares(tmp_path):
    path = _verifier_files(tmp_path)
    r = specproof.audit_chain(f"{path}:verify_chain", tv=0.2, large_vocab_tv=0.5, progress="off", shrink=0)
    rejected = [c for c in r.cases if c.rejected]
    assert len(rejected) > 1
    assert r.witness is min(rejected, key=lambda c: c.pvalue)
    assert r.witness.reference == "torch.token" and r.witness.reference_lengths
    assert "emitted per step (observed vs torch.token" in r.summary()


def test_the_main_job_report_leads_with_the_verdict_and_folds_what_a_finding_skipped(tmp_path, capsys):
    report = tmp_path / "report.md"
    assert main(["audit", "--group", "mutant", "--report", str(report), "--progress", "off"]) == 0
    text = report.read_text()
    first = text.split("## Power")[0]
    assert first.splitlines()[2].startswith("**Verdict: AGREES")
    assert "Not run because a finding came first" in first
    assert "after finding" not in first  # one line, not one row per case
    assert "plan TV" in capsys.readouterr().out


# --------------------------------------------------------------------------- small things


def test_backends_filter_and_stop_early(capsys):
    assert main(["backends", "--kind", "engine", "--grep", "no_kv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and "mutant.no_kv_rollback" in lines[0]


def test_an_engine_class_given_for_an_instance_is_named(tmp_path):
    from specproof.properties.engine.loops import DirectEngine

    with pytest.raises(specproof.SpecproofError, match="is a class"):
        specproof.audit_engine(DirectEngine, progress="off")


def test_own_engines_from_python_specs_factories_and_their_own_prompts():
    from specproof.properties.engine.loops import direct_engine

    r = specproof.audit_engine("reference.direct", samples=100, progress="off")
    assert r.verdict == "pass"

    def factory(sampling: specproof.Sampling):
        return direct_engine(sampling)

    factory.prompts = [(3,)]  # type: ignore[attr-defined]
    r = specproof.audit_engine(factory, samples=1000, progress="off")  # its law at T = 0.7 is peaked
    assert [c.case.prompt for c in r.cases] == [(3,), (3,)] and r.verdict == "pass"
    engine_spec = specproof.EngineSpec(
        "mine", "user", "a spec from Python", direct_engine, 8, ((0, 6),), (specproof.Sampling(1.0),)
    )
    assert specproof.audit_engine(engine_spec, samples=100, progress="off").verdict == "pass"


def test_progress_takes_auto_on_off_or_a_callable():
    seen = []
    specproof.audit_engine("reference.direct", samples=10, progress=lambda w, f: seen.append(f))
    assert seen
    with pytest.raises(specproof.UsageError, match="progress"):
        specproof.audit_engine("reference.direct", samples=10, progress="loud")


def test_a_checkout_named_specproof_in_the_current_folder_still_imports(tmp_path):
    """Python beside a checkout called ``specproof`` imports the checkout for the package: it
    answers as the package (the repository root's ``__init__.py``), not as an empty namespace."""
    root = Path(__file__).resolve().parents[1]
    (tmp_path / "specproof").symlink_to(root, target_is_directory=True)
    code = (
        "import specproof, specproof.properties.engine.contract as c\n"
        "print(specproof.EngineSpec is c.EngineSpec, specproof.Verdict.PASS.exit_code)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "0"]


def test_help_and_usage_errors_import_neither_torch_nor_the_audits():
    """``specproof --help`` and a usage error answer from the option tables alone (the audits,
    torch and scipy are imported only when a command runs)."""
    code = (
        "import sys\n"
        "from specproof.properties.cli import main\n"
        "codes = [main(['--help']), main(['audit', '--help']), "
        "main(['audit', 'engine', 'reference.direct', '--tokens', 'zero'])]\n"
        "heavy = ('torch', 'scipy', 'specproof.properties.engine.audit')\n"
        "print(codes, sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[0, 0, 4] []", out.stdout[-500:]
    assert "--tokens" in out.stderr


def test_the_plugin_reaches_no_endpoint_at_collection(pytester):
    """Collecting an endpoint's items reads the options only: an address nothing listens on is
    collected (one item per setting and prompt), and reached only by the items that audit it."""
    out = pytester.runpytest(
        "--specproof-endpoint",
        "http://127.0.0.1:9",
        "--specproof-engine-prompt",
        "0 6",
        "--collect-only",
        "-q",
    )
    assert out.ret == 0, out.stdout.str()
    out.stdout.fnmatch_lines(["*specproof-engine::endpoint*T=1*[[]0 6[]]*", "*T=0.7*[[]0 6[]]*"])
