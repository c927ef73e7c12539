"""`specproof audit` and `specproof backends`: exit codes, JSON, reports, the pytest plugin."""

from __future__ import annotations

import json

import pytest

from specproof.properties.cli import main

QUICK = ["--tv", "0.1", "--large-vocab-tv", "0.5", "--progress", "off"]


@pytest.mark.slow
def test_audit_of_a_correct_verifier_passes_with_json_and_html_report(tmp_path, capsys):
    js, rep = tmp_path / "a.json", tmp_path / "a.html"
    code = main(["audit", "chain", "torch.token", "--json", str(js), "--report", str(rep), *QUICK])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("plan for torch.token: 24 cases")  # the plan comes first
    data = json.loads(js.read_text())
    assert data["verdict"] == "pass"
    assert len(data["cases"]) == 24 and not data["not_run_cases"] and not data["short_cases"]
    assert all({"pvalue", "power_at_tv", "detectable_tv", "tv", "samples"} <= set(c) for c in data["cases"])
    assert all(c["power_at_tv"] >= 0.99 for c in data["cases"])
    html = rep.read_text()
    assert "<svg" in html and "Verdict: PASS" in html


@pytest.mark.slow
def test_audit_of_a_lossy_verifier_exits_1_with_a_witness(tmp_path, capsys):
    js, rep = tmp_path / "a.json", tmp_path / "a.md"
    # --stop-early: the first rejected case ends the audit (its witness is all this test reads)
    args = ["audit", "chain", "mutant.residual_from_p", "--samples", "3000", "--shrink", "0", "--stop-early"]
    code = main([*args, "--json", str(js), "--report", str(rep), "--progress", "off"])
    assert code == 1
    data = json.loads(js.read_text())
    assert data["verdict"] == "lossy"
    w = data["witness"]
    assert w["pvalue"] <= 1e-6 and w["rejected"]
    assert w["worst_cells"] and "observed" in w["worst_cells"][0]
    assert w["laws"]["support"] and w["regenerate"]["case"]["name"] == w["case"]["name"]
    text = rep.read_text()
    assert text.splitlines()[2].startswith("**Verdict: LOSSY")
    assert "Observed vs expected" in text and "Emitted tokens per step" in text
    assert "witness" in capsys.readouterr().out


def test_audit_usage_errors_exit_4(tmp_path, capsys):
    assert main(["audit", "chain", "torch.token", "--alpha", "2"]) == 4
    assert main(["audit", "chain"]) == 4
    assert main(["audit", "tree", "torch.token"]) == 4  # a chain backend
    assert (
        main(["audit", "tree", "specproof.properties.conformance.backends.torch_chain:strict_chain"]) == 4
    )  # no --process
    assert main(["audit", "chain", "no.such.module:fn"]) == 4
    assert main(["audit", "chain", "torch.token", "--tv", "0"]) == 4
    assert main(["audit", "chain", "torch.token", "--process", "wor_siblings"]) == 4
    assert main(["audit", "chain", "torch.token", "--json", str(tmp_path / "missing" / "a.json")]) == 4
    assert main(["audit", "chain", "torch.token", "--bogus-option"]) == 4
    err = capsys.readouterr().err
    assert "alpha" in err and "--process" in err and "tv" in err and "does not exist" in err
    assert "Traceback" not in err


def test_help_states_the_exit_codes(capsys):
    assert main(["audit", "--help"]) == 0
    out = capsys.readouterr().out
    for line in ("0  pass", "1  lossy", "2  contract_violation", "3  underpowered", "4  usage"):
        assert line in out


def test_audit_of_a_module_function_target(capsys):
    target = "specproof.properties.conformance.backends.torch_chain:strict_chain"
    assert main(["audit", "chain", target, "--process", "onehot_chain", *QUICK]) == 0


def test_backends_lists_reference_alternatives_and_mutants(capsys):
    assert main(["backends", "--json"]) == 0
    names = {(b["kind"], b["name"]) for b in json.loads(capsys.readouterr().out)}
    assert ("chain", "reference.token") in names and ("tree", "reference.mss") in names
    assert ("chain", "torch.token_gumbel") in names and ("chain", "mutant.residual_from_p") in names


@pytest.mark.slow
def test_default_audit_of_a_group_checks_declared_verdicts(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["audit", "--group", "alternative", "--json", "all.json", *QUICK])
    out = capsys.readouterr().out
    assert code == 0, out
    data = json.loads((tmp_path / "all.json").read_text())
    assert data["verdict"] == "agrees"
    report = (tmp_path / "audit-report.md").read_text()
    assert report.splitlines()[2].startswith("**Verdict: AGREES: 5/5")


@pytest.mark.slow
def test_pytest_plugin_one_item_per_case(pytester):
    quick = ["--specproof-tv", "0.1", "--specproof-large-vocab-tv", "0.5", "-p", "no:cacheprovider"]
    ok = pytester.runpytest_subprocess("--specproof-chain", "torch.token", *quick)
    ok.assert_outcomes(passed=25)  # the id-range probes and 24 cases
    short = pytester.runpytest_subprocess(
        "--specproof-chain", "torch.token", "--specproof-budget-seconds", "0.001", *quick
    )
    assert "passed" not in short.parseoutcomes() or short.parseoutcomes()["passed"] <= 1  # probes only
    short.stdout.fnmatch_lines(["*UNDERPOWERED*"])
    # the V = 152,064 cases deselected: 3,000 steps of them cost minutes and add no item kind
    bad = pytester.runpytest_subprocess(
        "--specproof-chain",
        "mutant.residual_from_p",
        "--specproof-samples",
        "3000",
        "-k",
        "not V152064",
        "-p",
        "no:cacheprovider",
    )
    assert bad.parseoutcomes().get("failed", 0) >= 5
    bad.stdout.fnmatch_lines(["*LOSSY*"])


@pytest.mark.slow
def test_pytest_plugin_fixture(pytester):
    pytester.makepyfile(
        """
        def test_mine(specproof_audit):
            from specproof.properties.conformance.backends.torch_chain import block_chain
            r = specproof_audit(block_chain, kind="chain", tv=0.1, large_vocab_tv=0.5)
            assert r.verdict == "pass", r.summary()
        """
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_slow_verifier_short_of_its_plan_is_underpowered_and_says_what_it_reached():
    from specproof.properties.audit.stages import AuditConfig, audit
    from specproof.properties.conformance.backends import REGISTRY

    result = audit(REGISTRY[("chain", "reference.token")], AuditConfig(budget_seconds=5, probes=False))
    assert result.verdict == "underpowered"
    assert result.short and result.exit_code == 3
    for c in result.short:
        assert c.n < c.planned or c.power < 0.99
    summary = result.summary()
    assert "ran short" in summary and "vouches for TV" in summary


def test_a_reader_that_stops_early_is_not_an_internal_error():
    """``specproof backends | head -1``: the pipe closes under the listing; the command ends quietly
    with 0, not with a traceback asking for a bug report."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "specproof.properties.cli", "backends"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away with most of the listing unread
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert first.startswith(b"chain"), first
    assert "internal error" not in err and "Traceback" not in err, err
