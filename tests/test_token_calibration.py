"""``specproof calibrate --tokens`` at small sizes: every section runs and reads what its plan
says (seeded: each reading is fixed), the toy and tilted engines are what they claim (exact
checks), and bad input is refused by name. The full run: docs/measurements/token-calibration.md."""

from __future__ import annotations

import numpy as np
import pytest

from specproof.properties.measure import token_calibration as tc
from specproof.properties.measure import token_calibration_md
from specproof.reference.errors import UsageError


def quiet(_: str) -> None:
    pass


def test_power_rows_cross_by_the_planned_tokens_within_a_small_multiple_of_the_limit():
    rows = tc.power_rows(tvs=(0.05,), runs=3, say=quiet)
    assert [r["statistic"] for r in rows] == ["mean", "greedy", "uniform", "serial"]
    for r in rows:
        assert r["crossed"] == 3, r  # planned for power 0.99; seeded, so fixed
        assert r["median_tokens_to_cross"] <= r["planned_tokens"]
        if r["information_limit"]:
            assert 1.0 < r["planned_tokens"] / r["information_limit"] < 4.0


def test_false_alarm_rows_on_the_toy_engine():
    (row,) = tc.false_alarm_rows(3, 0.01, 0.1, ["calibration.speculative[V=64]@64"], say=quiet)
    assert row["runs"] == 3 and sum(row["verdicts"].values()) == 3
    assert row["false_alarms"] == 0 and row["tokens_per_audit"] > 0


def test_false_alarm_rows_on_the_engine_with_an_end_of_sequence():
    """calibration.ending: its samples end early (more samples than planned, to score the planned
    tokens) and the eos statistic is fed; seeded, its three audits pass."""
    (row,) = tc.false_alarm_rows(3, 0.01, 0.1, ["calibration.ending[V=64]@32"], say=quiet)
    assert row["runs"] == 3 and row["false_alarms"] == 0 and row["tokens_per_audit"] > 0
    (spec,) = tc._exact_specs(["calibration.ending[V=64]@32"])
    engine = spec.build(spec.samplings[0])
    assert "eos" in engine.capabilities and engine.eos_id == 0
    ends = [engine.generate(list(spec.prompts[0]), 32, seed) for seed in range(20)]
    assert any(len(t) < 32 and t[-1] == 0 for t in ends)  # some samples end on it


def test_stopping_rows_read_the_wealth_at_every_look():
    (row,) = tc.stopping_rows(2, 5, 0.01, ["calibration.speculative[V=64]@16"], say=quiet)
    assert row["streams"] == 2 and row["looks"] == 5
    assert row["ever_crossed"] == 0 and row["crossed_at_random_stop"] <= row["ever_crossed"]


def test_side_by_side_runs_both_tests_and_says_what_did_not_run():
    rows = tc.side_by_side_rows(tvs=(0.05,), say=quiet)
    got = [(r["bug"].split(" at ")[1], r["test"], r["verdict"]) for r in rows]
    assert got == [
        ("token 1", "cells", "lossy"),
        ("token 1", "tokens", "lossy"),
        ("tokens 40 on", "cells", "not run"),
        ("tokens 40 on", "tokens", "lossy"),
    ]
    assert "M <= 12" in rows[2]["why"]
    assert "token 1" in token_calibration_md.markdown({"versions": {"python": "3"}, "side_by_side": rows})


def test_the_tilted_engine_deviates_by_exactly_its_tv_where_it_says():
    e = tc.TiltedEngine(64, 0.01, (40, 64))
    ctx = [1, 2, 9]
    p = e.p(ctx)
    assert np.array_equal(e.emitted_law(ctx, 39), p)
    assert 0.5 * np.abs(e.emitted_law(ctx, 40) - p).sum() == pytest.approx(0.01, abs=1e-15)


def test_the_toy_engine_emits_the_target_law_at_the_first_token_exactly():
    """Speculative sampling's first token: accepted draft or residual, summed exactly."""
    e = tc.ToySpeculative(16)
    ctx = [1, 2]
    p, q = e.p(ctx), e.q(ctx)
    accept = np.minimum(1.0, p / q)
    rejected = float((q * (1 - accept)).sum())
    r = np.maximum(p - q, 0.0)
    law = q * accept + rejected * r / r.sum()
    np.testing.assert_allclose(law, p, rtol=1e-12)


@pytest.mark.parametrize(
    "ref, what",
    [
        ("calibration.speculative[V=x]", "V must be an integer"),
        ("calibration.speculative[V=64]@ten", "horizon after @"),
        ("mutant.no_kv_rollback", "not exact"),
    ],
)
def test_bad_exact_engines_are_refused_by_name(ref, what):
    with pytest.raises(UsageError, match=what):
        tc._exact_specs([ref])


def test_the_cli_refuses_token_options_without_tokens_and_a_bad_tv(capsys):
    """Exit 4: a usage error (README, exit codes)."""
    from specproof.properties.cli import main

    assert main(["calibrate", "--exact", "calibration.speculative[V=64]"]) == 4
    assert "--tokens" in capsys.readouterr().err
    assert main(["calibrate", "--tokens", "--tv", "0.7"]) == 4
    assert "--tv" in capsys.readouterr().err
