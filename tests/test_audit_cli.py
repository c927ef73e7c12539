"""`specproof audit` and `specproof backends`: exit codes, JSON, reports, the pytest plugin."""

from __future__ import annotations

import json

from specproof.properties.cli import main


def test_audit_of_a_correct_verifier_passes_with_json_and_html_report(tmp_path, capsys):
    js, rep = tmp_path / "a.json", tmp_path / "a.html"
    code = main(
        [
            "audit",
            "chain",
            "torch.token",
            "--budget-seconds",
            "6",
            "--json",
            str(js),
            "--report",
            str(rep),
            "--progress",
            "off",
        ]
    )
    assert code == 0
    data = json.loads(js.read_text())
    assert data["verdict"] == "pass"
    assert len(data["cases"]) >= 10
    assert all({"pvalue", "power_at_tv", "detectable_tv", "tv", "samples"} <= set(c) for c in data["cases"])
    assert "<svg" in rep.read_text()


def test_audit_of_a_lossy_verifier_exits_1_with_a_witness(tmp_path, capsys):
    js, rep = tmp_path / "a.json", tmp_path / "a.md"
    code = main(
        [
            "audit",
            "chain",
            "mutant.residual_from_p",
            "--budget-seconds",
            "8",
            "--json",
            str(js),
            "--report",
            str(rep),
            "--progress",
            "off",
        ]
    )
    assert code == 1
    data = json.loads(js.read_text())
    assert data["verdict"] == "lossy"
    w = data["witness"]
    assert w["pvalue"] <= 1e-6 and w["rejected"]
    assert w["worst_cells"] and "observed" in w["worst_cells"][0]
    text = rep.read_text()
    assert "Observed vs expected" in text and "Emitted tokens per step" in text
    assert "witness" in capsys.readouterr().out


def test_audit_usage_errors_exit_2(capsys):
    assert main(["audit", "chain", "torch.token", "--alpha", "2"]) == 2
    assert main(["audit", "chain"]) == 2
    assert main(["audit", "tree", "torch.token"]) == 2  # a chain backend
    assert (
        main(["audit", "tree", "specproof.properties.backends.torch_chain:strict_chain"]) == 2
    )  # no --process
    assert main(["audit", "chain", "no.such.module:fn"]) == 2
    assert main(["audit", "chain", "torch.token", "--tv", "0"]) == 2
    err = capsys.readouterr().err
    assert "alpha" in err and "--process" in err and "tv" in err


def test_audit_of_a_module_function_target(capsys):
    code = main(
        [
            "audit",
            "chain",
            "specproof.properties.backends.torch_chain:strict_chain",
            "--process",
            "onehot_chain",
            "--budget-seconds",
            "4",
            "--progress",
            "off",
        ]
    )
    assert code == 0


def test_backends_lists_reference_alternatives_and_mutants(capsys):
    assert main(["backends", "--json"]) == 0
    names = {(b["kind"], b["name"]) for b in json.loads(capsys.readouterr().out)}
    assert ("chain", "reference.token") in names and ("tree", "reference.mss") in names
    assert ("chain", "torch.token_gumbel") in names and ("chain", "mutant.residual_from_p") in names


def test_default_audit_of_a_group_checks_declared_verdicts(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(
        [
            "audit",
            "--group",
            "alternative",
            "--budget-seconds",
            "4",
            "--json",
            "all.json",
            "--progress",
            "off",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    data = json.loads((tmp_path / "all.json").read_text())
    assert data["verdict"] == "agrees"
    assert (tmp_path / "audit-report.md").exists()


def test_pytest_plugin_one_item_per_case(pytester):
    ok = pytester.runpytest_subprocess(
        "--specproof-chain", "torch.token", "--specproof-budget-seconds", "0.5", "-p", "no:cacheprovider"
    )
    counts = ok.parseoutcomes()
    # at 0.5 s a case, the two V = 152,064 cases may have no time left to run: skipped, never failed
    assert counts.get("passed", 0) + counts.get("skipped", 0) == 22 and counts.get("passed", 0) >= 20
    assert "failed" not in counts
    bad = pytester.runpytest_subprocess(
        "--specproof-chain",
        "mutant.residual_from_p",
        "--specproof-samples",
        "3000",
        "-p",
        "no:cacheprovider",
    )
    outcomes = bad.parseoutcomes()
    assert outcomes.get("failed", 0) >= 5
    bad.stdout.fnmatch_lines(["*LOSSY*"])


def test_pytest_plugin_fixture(pytester):
    pytester.makepyfile(
        """
        def test_mine(specproof_audit):
            from specproof.properties.backends.torch_chain import block_chain
            r = specproof_audit(block_chain, kind="chain", budget_seconds=3)
            assert r.verdict == "pass", r.summary()
        """
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_slow_verifier_gets_a_budget_limited_audit_that_states_its_power():
    from specproof.properties.audit import AuditConfig, audit
    from specproof.properties.backends import REGISTRY

    result = audit(REGISTRY[("chain", "reference.token")], AuditConfig(budget_seconds=5))
    assert result.verdict == "pass"
    limited = [c for c in result.cases if c.budget_limited]
    assert limited, "the pure-Python reference cannot reach the planned sample size in 5 s"
    for c in limited:
        assert c.n < c.planned
    # a case with one possible sequence keeps high power (any deviation is a hard failure);
    # the others state the lower power they reached
    weak = [c for c in limited if c.cells > 1]
    assert weak and all(c.power < 0.99 and c.detectable_tv > 0.01 for c in weak)
    assert "detects TV" in result.summary()
