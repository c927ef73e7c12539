"""The calibrations' one harness and one table (properties/measure/rate.py, calibrations.py):

* :class:`Rate` is the exact Clopper-Pearson interval, checked against its closed form where
  there is one (0 or all of n: ``(alpha/2)^(1/n)``) and against the beta quantiles otherwise;
  bad counts are refused by name;
* :func:`rejection_rate` runs the seeds in order, counts what is flagged, keeps what it is told;
* the table ``specproof calibrate`` reads agrees with its parser (every mode a flag, every flag a
  mode takes an argument) and its pages exist; a flag given to a mode that does not take it is
  refused by name before anything runs, never ignored.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest
from scipy import stats as st

from specproof.properties.cli import build_parser, main
from specproof.properties.measure import calibrations
from specproof.properties.measure.calibrations import CALIBRATIONS, COMMON, chosen
from specproof.properties.measure.rate import Rate, rejection_rate
from specproof.properties.verdicts import USAGE_ERROR
from specproof.reference.errors import SpecproofInputError, UsageError

ROOT = Path(__file__).resolve().parents[1]


def test_rate_is_the_exact_binomial_interval():
    none = Rate(0, 300)
    assert none.rate == 0.0 and none.ci[0] == 0.0
    assert math.isclose(none.ci[1], 1 - 0.025 ** (1 / 300), rel_tol=1e-9)
    every = Rate(20, 20)
    assert every.ci[1] == 1.0 and math.isclose(every.ci[0], 0.025 ** (1 / 20), rel_tol=1e-9)
    three = Rate(3, 300)
    lo, hi = three.ci
    assert math.isclose(lo, st.beta.ppf(0.025, 3, 298), rel_tol=1e-9)
    assert math.isclose(hi, st.beta.ppf(0.975, 4, 297), rel_tol=1e-9)
    assert three.fields("false_alarms") == {"false_alarms": 3, "rate": 0.01, "ci95": [lo, hi]}
    assert three.text() == f"3 of 300 [95% CI {lo:.3f}, {hi:.3f}]"
    assert Rate(0, 0).ci == (0.0, 1.0) and Rate(0, 0).rate == 0.0


@pytest.mark.parametrize(
    "hits, runs, level, match",
    [(-1, 3, 0.95, "hits"), (4, 3, 0.95, "more than the runs"), (1, 2.5, 0.95, "runs"), (1, 3, 1.0, "level")],
)
def test_rate_refuses_counts_that_are_not_counts(hits, runs, level, match):
    with pytest.raises(SpecproofInputError, match=match):
        Rate(hits, runs, level)


def test_rejection_rate_runs_the_seeds_in_order_and_keeps_what_it_is_told():
    seen: list[tuple[int, int]] = []
    done = rejection_rate(
        lambda seed: seed * 10,
        [3, 1, 4, 1, 5],
        lambda r: r > 20,
        after=lambda j, r: seen.append((j, r)),
        keep=lambda r: r + 1,
    )
    assert done.rate == Rate(3, 5)
    assert done.results == [31, 11, 41, 11, 51]
    assert seen == [(0, 30), (1, 10), (2, 40), (3, 10), (4, 50)]
    assert done.seconds >= 0


def test_the_calibrate_table_agrees_with_its_parser_and_pages():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    cal = sub.choices["calibrate"]
    dests = {a.dest for a in cal._actions}
    for c in CALIBRATIONS.values():
        assert not c.mode or c.mode in dests, c.mode
        assert set(c.takes) <= dests, c.takes
        assert (ROOT / c.page).is_file(), c.page
        assert f"{c.flag} {c.runs}" in cal.format_help().replace("\n", " ") or not c.mode
    assert set(COMMON) <= dests
    section = next(a for a in cal._actions if a.dest == "section")
    from specproof.properties.measure.token_calibration import calibrate_tokens

    assert tuple(section.choices) == calibrations.TOKEN_SECTIONS
    assert calibrate_tokens.__defaults__ is not None
    assert calibrations.TOKEN_SECTIONS in calibrate_tokens.__defaults__


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--tokens", "--engine"], "one mode at a time, got --engine and --tokens"),
        (
            ["--only", "mutant.stale_draft_kv"],
            "--only goes with --engine, not the verifiers' calibration \\(no mode flag\\)",
        ),
        (["--engine", "--exact", "x"], "--exact goes with --tokens, not --engine"),
        (["--deep", "--tv", "0.02"], "--tv goes with --tokens, not --deep"),
        (["--engine", "--load", "8"], "--load goes with --endpoint, not --engine"),
        (["--endpoint", "--section", "power"], "--section goes with --tokens, not --endpoint"),
        (["--tokens", "--samples", "50"], "--samples: --tokens takes no sample size"),
    ],
)
def test_a_flag_the_mode_does_not_take_is_refused_by_name(argv, match):
    args = build_parser().parse_args(["calibrate", *argv])
    with pytest.raises(UsageError, match=match):
        chosen(args)


def test_the_command_refuses_a_misplaced_flag_before_running(capsys):
    assert main(["calibrate", "--engine", "--section", "power"]) == USAGE_ERROR
    assert "--section goes with --tokens, not --engine" in capsys.readouterr().err


def test_every_mode_has_its_default_runs_and_the_token_tv_its_default():
    args = build_parser().parse_args(["calibrate", "--tokens"])
    assert chosen(args) is CALIBRATIONS["tokens"] and args.tv is None
    assert calibrations.TOKEN_TV == 0.05
    assert chosen(build_parser().parse_args(["calibrate"])) is CALIBRATIONS[""]
    assert chosen(build_parser().parse_args(["calibrate", "--deep", "--samples", "100"])).runs == 300
