"""``perfkit check overhead``'s rounds and figures, with each arm's epochs given here instead of trained."""

from __future__ import annotations

import math

import pytest

from perfkit.errors import UsageError
from perfkit.studies.overhead import ARMS, ArmRun, OverheadSpec, _bare_result, check_overhead, overhead_summary

# steady epoch per (round, arm): the instrumented arms 2% and 10% slower than bare in round 0, 4% and 20% in 1
EPOCHS = {(0, "bare"): (9.0, 5.0, 5.0), (0, "untraced"): (9.0, 5.1, 5.1), (0, "traced"): (9.0, 5.5, 5.5),
          (1, "bare"): (9.0, 4.0, 6.0), (1, "untraced"): (9.0, 5.2, 5.2), (1, "traced"): (9.0, 6.0, 6.0)}


def fake(ran: list[tuple[int, str]]):
    def run(round_index: int, arm: str, spec: OverheadSpec) -> ArmRun:
        ran.append((round_index, arm))
        return ArmRun(round_index, arm, EPOCHS[(round_index, arm)])
    return run


def test_each_round_runs_every_arm_its_order_turned_and_the_first_epoch_is_left_out() -> None:
    ran: list[tuple[int, str]] = []
    runs = check_overhead(OverheadSpec(repeats=2), run=fake(ran))
    assert ran == [(0, "bare"), (0, "untraced"), (0, "traced"), (1, "untraced"), (1, "traced"), (1, "bare")]
    steady = runs.set_index(["round", "arm"])["steady_epoch_s"]
    assert steady[(0, "bare")] == 5.0 and steady[(1, "bare")] == 5.0  # median of the epochs after the first


def test_each_instrumented_run_is_set_against_the_bare_run_of_its_own_round() -> None:
    summary = overhead_summary(check_overhead(OverheadSpec(repeats=2), run=fake([]))).set_index("arm")
    assert summary.loc["untraced", "ratio"] == pytest.approx((1.02 + 1.04) / 2)
    assert (summary.loc["traced", "ratio_min"], summary.loc["traced", "ratio_max"]) == pytest.approx((1.10, 1.20))
    assert summary.loc["traced", "n"] == 2 and math.isnan(summary.loc["bare", "ratio"])


def test_a_failed_run_is_counted_and_its_round_leaves_the_ratio() -> None:
    def run(round_index: int, arm: str, spec: OverheadSpec) -> ArmRun:
        if (round_index, arm) == (1, "bare"):
            return ArmRun(round_index, arm, error="the bare run failed: killed")
        return ArmRun(round_index, arm, EPOCHS[(round_index, arm)])

    runs = check_overhead(OverheadSpec(repeats=2), run=run)
    summary = overhead_summary(runs).set_index("arm")
    assert summary.loc["bare", "failed"] == 1 and summary.loc["bare", "runs"] == 1
    assert summary.loc["untraced", "n"] == 1 and summary.loc["untraced", "ratio"] == pytest.approx(1.02)
    assert runs["error"].notna().sum() == 1


def test_no_rounds_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--repeats"):
        check_overhead(OverheadSpec(repeats=0), run=fake([]))


def test_the_bare_workers_line_is_found_among_tensorflows_output() -> None:
    out = "I0000 tensorflow chatter\nPERFKIT_RESULT {\"epochs\": [{\"wall_s\": 3.5}, {\"wall_s\": 2.5}]}\nmore\n"
    assert _bare_result(0, out).epoch_wall_s == (3.5, 2.5)
    assert _bare_result(0, "no result here").error == "the bare run printed no result"


def test_the_sizes_given_reach_both_kinds_of_run() -> None:
    spec = OverheadSpec(preset="tiny", epochs=3, train_players=1024)
    assert spec.sizes() == ["--epochs", "3", "--train-players", "1024"]
    assert ARMS == ("bare", "untraced", "traced")
