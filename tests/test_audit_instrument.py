"""The audit as an instrument: its reading depends on the plan and the seed, never on the clock.

* the plan and the verdict do not change when the clock runs slow (a patched clock, a verifier
  that sleeps), except to become ``underpowered``; a budget of a second never passes;
* ids narrowed to 16 bits or passed through bfloat16 are caught by the smoke stage's id-range
  probes whatever the budget;
* every exit code of the table is reached by its path, and a JSON is written on each (also when
  interrupted); hangs, exceptions and 0-padding are named contract violations;
* a replayed witness is a pytest test that fails on the buggy verifier and passes on a correct one;
* importing specproof and auditing a user's Triton verifier leaves Triton's settings alone.

Statistical verdicts here use alpha 1e-6 and seed 0 at fixed plans; none depends on timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from specproof.properties.audit.battery import chain_battery
from specproof.properties.audit.stages import AuditConfig, audit
from specproof.properties.cli import main
from specproof.properties.conformance import mutants  # noqa: F401  (registers mutant.*)
from specproof.properties.conformance.backends import REGISTRY, Backend
from specproof.properties.conformance.backends.torch_chain import token_chain

SMALL = [
    c for c in chain_battery() if c.name in ("iid/K1/V8", "onehot/K2/V6/tiny", "iid/K3/V5", "iid/K2/V8/rows")
]
TOKEN = REGISTRY[("chain", "torch.token")]


def _quick(**over: object) -> AuditConfig:
    base = dict(tv=0.1, cases=SMALL, probes=False)
    base.update(over)
    return AuditConfig(**base)  # type: ignore[arg-type]


def _slow_clock(factor: float):
    """A clock on which every real second lasts ``factor`` seconds."""
    t0 = time.perf_counter()
    return lambda: t0 + factor * (time.perf_counter() - t0)


def _sleepy(seconds: float):
    def verify(d, dp, tp, g):
        time.sleep(seconds)
        return token_chain(d, dp, tp, g)

    return Backend("sleepy.token", "chain", verify, TOKEN.processes)


def test_the_reading_does_not_depend_on_the_clock():
    fast = audit(TOKEN, _quick(budget_seconds=10**6)).to_json(timings=False)
    slow = audit(TOKEN, _quick(budget_seconds=10**6), clock=_slow_clock(1000.0)).to_json(timings=False)
    assert fast["verdict"] == "pass"
    assert fast == slow  # same plan, same samples, same p-values, same verdict
    sleepy = audit(_sleepy(0.002), _quick(budget_seconds=10**6)).to_json(timings=False)
    for key in ("verdict", "cases", "vouched_tv"):
        assert sleepy[key] == fast[key]


def test_a_slow_clock_only_makes_it_underpowered_and_what_ran_is_unchanged():
    fast = audit(TOKEN, _quick(budget_seconds=10**6))
    short = audit(TOKEN, _quick(budget_seconds=60), clock=_slow_clock(2000.0))
    assert short.verdict == "underpowered" and short.exit_code == 3
    by_name = {r.case.name: r for r in fast.cases}
    assert short.short
    for r in short.cases:
        if r.status == "ran":  # a case that ran its plan is the same reading as in the fast run
            assert r.to_json() == by_name[r.case.name].to_json()
    assert "ran short" in short.summary()


@pytest.mark.parametrize("budget", [1.0, 0.01])
def test_a_budget_of_a_second_never_passes(budget):
    result = audit(TOKEN, AuditConfig(budget_seconds=budget, probes=False), clock=_slow_clock(50.0))
    assert result.verdict == "underpowered", result.summary()
    assert result.not_run and result.vouched_tv() == 1.0


def test_a_case_with_no_steps_planned_is_never_shown_as_4_of_0():
    """A case that drew its smoke rows and was given no plan (the smoke stage only, or stopped
    before the plan) reads as what it is in both tables of the report, not as "4/0"."""
    from specproof.properties.audit.report import _case_table, _short_blocks

    result = audit(TOKEN, _quick(budget_seconds=10**6))
    result.cases[0].n, result.cases[0].planned, result.cases[0].status = 4, 0, "planned"
    _, (head, rows) = _case_table(result)
    ((_, _), (_, (head2, rows2)), *_) = _short_blocks([result])
    cells = [row[head.index("steps / planned")] for row in rows] + [
        r[head2.index("steps / planned")] for r in rows2
    ]
    assert "4/0" not in cells and cells.count("4 (smoke stage only: no steps planned)") == 2, cells


@pytest.mark.parametrize(("name", "hint"), [("mutant.int16_ids", "16 bits"), ("mutant.bf16_ids", "bfloat16")])
def test_narrowed_ids_are_caught_by_the_smoke_stage_at_any_budget(name, hint):
    start = time.perf_counter()
    result = audit(REGISTRY[("chain", name)], AuditConfig(budget_seconds=0.001))
    seconds = time.perf_counter() - start
    assert result.verdict == "contract_violation", result.summary()
    v = result.violation
    assert v["kind"] == "id_narrowing" and v["during"] == "smoke stage" and hint in v["detail"]
    print(f"\n{name}: caught in {seconds:.1f} s of audit ({v['case']})")


def test_the_float32_probe_catches_ids_passed_through_float32():
    def f32_ids(d, dp, tp, g):
        out = token_chain(d, dp, tp, g)
        return torch.where(out >= 0, out.float().long(), out)

    result = audit(Backend("f32", "chain", f32_ids, ("onehot_chain",)), AuditConfig(cases=SMALL[:1]))
    assert result.violation["kind"] == "id_narrowing" and "float32" in result.violation["detail"]


BAD = textwrap.dedent(
    """
    import threading

    import torch

    from specproof.properties.conformance.backends.torch_chain import token_chain

    CALLS = {"n": 0}


    def zero_padded(d, dp, tp, g):
        out = token_chain(d, dp, tp, g)
        return torch.where(out < 0, torch.zeros_like(out), out)


    def _helper_that_fails(x):
        raise ValueError("the verifier's own bug")


    def raises(d, dp, tp, g):
        return _helper_that_fails(d)


    def hangs_on_the_third_call(d, dp, tp, g):
        CALLS["n"] += 1
        if CALLS["n"] >= 3:
            threading.Event().wait()
        return token_chain(d, dp, tp, g)


    def interrupted_on_the_tenth_call(d, dp, tp, g):
        CALLS["n"] += 1
        if CALLS["n"] >= 10:
            raise KeyboardInterrupt
        return token_chain(d, dp, tp, g)
    """
)


@pytest.fixture
def bad(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(BAD)
    return str(path)


def _audit_cli(target: str, tmp_path, *extra: str) -> tuple[int, dict]:
    js = tmp_path / "out.json"
    code = main(["audit", "chain", target, "--json", str(js), "--progress", "off", *extra])
    return code, json.loads(js.read_text()) if js.exists() else {}


@pytest.mark.slow
def test_exit_codes_for_every_verdict(tmp_path, capsys, bad):
    quick = ["--tv", "0.1", "--large-vocab-tv", "0.5", "--no-wide-probe"]
    assert _audit_cli("torch.token", tmp_path, *quick)[0] == 0
    code, data = _audit_cli(
        "mutant.residual_from_p", tmp_path, "--samples", "3000", "--shrink", "0", "--stop-early"
    )
    assert code == 1 and data["verdict"] == "lossy"
    code, data = _audit_cli("mutant.global_rng", tmp_path, *quick)
    assert code == 2 and data["verdict"] == "contract_violation"
    code, data = _audit_cli("torch.token", tmp_path, "--budget-seconds", "0.001", "--no-wide-probe")
    assert code == 3 and data["verdict"] == "underpowered" and data["not_run_cases"]
    assert main(["audit", "chain", "torch.token", "--tv", "2"]) == 4
    code, data = _audit_cli(f"{bad}:interrupted_on_the_tenth_call", tmp_path, *quick)
    assert code == 4 and data["verdict"] == "interrupted"  # the JSON is still written


def test_an_internal_error_exits_4_with_its_traceback(monkeypatch, capsys):
    from specproof.properties.audit import stages as audit_module

    def broken(*a, **k):
        raise RuntimeError("an internal bug")

    monkeypatch.setattr(audit_module, "audit", broken)
    assert main(["audit", "chain", "torch.token", "--progress", "off"]) == 4
    err = capsys.readouterr().err
    assert "internal error" in err and "Traceback" in err and "an internal bug" in err


def test_a_hang_is_a_timeout_violation_naming_the_case(tmp_path, capsys, bad):
    code, data = _audit_cli(f"{bad}:hangs_on_the_third_call", tmp_path, "--call-timeout", "2", "--no-probes")
    assert code == 2
    v = data["violation"]
    assert v["kind"] == "timeout" and v["case"] and "2 s" in v["detail"]


def test_a_raising_verifier_shows_its_traceback(tmp_path, capsys, bad):
    code, data = _audit_cli(f"{bad}:raises", tmp_path, "--no-probes")
    assert code == 2 and data["violation"]["kind"] == "raised"
    assert "_helper_that_fails" in data["violation"]["traceback"]
    assert "_helper_that_fails" in capsys.readouterr().out


def test_zero_padding_is_named_as_padding_with_the_row(tmp_path, capsys, bad):
    code, data = _audit_cli(f"{bad}:zero_padded", tmp_path, "--no-probes")
    assert code == 2
    v = data["violation"]
    assert (
        v["kind"] == "padding" and "padding must be -1" in v["detail"] and "output_token_ids[" in v["detail"]
    )


def _run_pytest(path) -> int:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
        capture_output=True,
        text=True,
        cwd=path.parent,
        env=dict(os.environ, PYTEST_ADDOPTS=""),
    ).returncode


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "args", "fixed"),
    [
        ("mutant.residual_from_p", ["--samples", "3000", "--shrink", "0", "--stop-early"], "torch.token"),
        ("mutant.int16_ids", ["--tv", "0.1"], "torch.token"),  # an id-range probe
        ("mutant.sentinel_index", ["--tv", "0.1", "--no-probes"], "torch.token"),  # a batch call
    ],
)
def test_a_replayed_witness_fails_on_the_bug_and_passes_once_fixed(tmp_path, capsys, target, args, fixed):
    code, _ = _audit_cli(target, tmp_path, *args)
    assert code in (1, 2)
    test = tmp_path / "test_witness.py"
    assert main(["replay", str(tmp_path / "out.json"), "-o", str(test)]) == 0
    assert _run_pytest(test) == 1  # fails on the buggy verifier
    test.write_text(test.read_text().replace(f"TARGET = {target!r}", f"TARGET = {fixed!r}"))
    assert _run_pytest(test) == 0  # passes on a correct one


@pytest.mark.slow
def test_replay_of_a_passing_audit_says_there_is_nothing_to_replay(tmp_path, capsys):
    assert _audit_cli("torch.token", tmp_path, "--tv", "0.2", "--no-wide-probe")[0] == 0
    assert main(["replay", str(tmp_path / "out.json")]) == 4
    assert "no witness" in capsys.readouterr().err


USER_KERNEL = textwrap.dedent(
    """
    import os

    import torch
    import triton
    import triton.language as tl

    from specproof.properties.conformance.backends.torch_chain import token_chain

    SEEN = []


    @triton.jit
    def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(dst + i, tl.load(src + i, mask=i < n), mask=i < n)


    def verify(d, dp, tp, g):
        from triton.runtime import interpreter

        SEEN.append(
            (
                os.environ.get("TRITON_DEFAULT_FP_FUSION"),
                getattr(interpreter.InterpretedFunction, "_specproof_fast", False),
            )
        )
        out = token_chain(d, dp, tp, g)
        flat = out.flatten().contiguous()
        copy = torch.empty_like(flat)
        copy_kernel[(1,)](flat, copy, flat.numel(), BLOCK=triton.next_power_of_2(flat.numel()))
        return copy.reshape(out.shape)
    """
)


def test_a_user_triton_verifier_is_audited_with_its_own_settings(tmp_path, monkeypatch):
    before = {k: v for k, v in os.environ.items() if k.startswith("TRITON")}
    import specproof.optimized  # noqa: F401
    from specproof.properties.conformance.backends import all_backends, load_callable

    all_backends()
    assert {k: v for k, v in os.environ.items() if k.startswith("TRITON")} == before
    from triton.runtime import interpreter

    assert not getattr(interpreter.InterpretedFunction, "_specproof_fast", False)
    # the user runs Triton's interpreter on a CPU machine by setting it, as Triton asks
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    path = tmp_path / "user_kernel.py"
    path.write_text(USER_KERNEL)
    fn = load_callable(f"{path}:verify")
    result = audit(Backend("user", "chain", fn, ("onehot_chain",)), _quick(cases=SMALL[1:2]))
    assert result.verdict == "pass", result.summary()
    seen = sys.modules["specproof_user_user_kernel"].SEEN
    assert seen and all(s == (before.get("TRITON_DEFAULT_FP_FUSION"), False) for s in seen)


def test_specproof_kernels_still_run_in_their_own_scope():
    from specproof.optimized import token

    x = torch.tensor([[1, 2]])
    p = torch.softmax(torch.randn(1, 3, 5, generator=torch.Generator().manual_seed(0)), -1)
    u = torch.full((1, 3), 0.5, dtype=torch.float64)
    before = {k: v for k, v in os.environ.items() if k.startswith("TRITON")}
    out = token(x, None, p, u, torch.tensor([0.5], dtype=torch.float64))
    assert out.shape == (1, 3) and int(out[0, 0]) >= 0
    assert {k: v for k, v in os.environ.items() if k.startswith("TRITON")} == before


def test_output_paths_are_checked_before_the_run(tmp_path, capsys, monkeypatch):
    from specproof.properties.audit import stages as audit_module

    def must_not_run(*a, **k):
        raise AssertionError("the audit ran before the output path was checked")

    monkeypatch.setattr(audit_module, "audit", must_not_run)
    assert main(["audit", "chain", "torch.token", "--report", str(tmp_path / "no" / "r.md")]) == 4
    assert "does not exist" in capsys.readouterr().err
