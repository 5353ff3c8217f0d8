"""perfkit tune's reading of what it ran: advice into knobs, predicted against measured, accuracy
kept or lost (hand-built runs of known step times)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from perfkit.analysis.advice import Advice, CauseKind, Change, Prediction, Tried, advice_frame, advice_of
from perfkit.analysis.tuning import TriedRuns, _speed_outcome, gained, predicted_for, tried_table, tuned_run
from perfkit.config import Knobs
from perfkit.errors import UsageError
from perfkit.studies.tune import Trial
from tests.unit._analysis_runs import single_run, write_run

BASE = "20260101T000000Z-single-base"
HOSTS = (("localhost", 2.0, 2),)


def _runs(root: Path) -> tuple[Path, Path, Path, Path]:
    """Default steps 0.5 + 0.05 + 0.1 s; a change at 0.3 s busy (0.45 s steps); one as fast that lost accuracy."""
    base = single_run(root, BASE, busy=1.0, started="2026-01-01T00:00:00Z")
    [default] = write_run(root, "20260101T010000Z-multi-tune-default", hosts=HOSTS, busy={0: 0.5, 1: 0.5})
    [faster] = write_run(root, "20260101T020000Z-multi-tune-spe", hosts=HOSTS, busy={0: 0.3, 1: 0.3})
    [worse] = write_run(root, "20260101T030000Z-multi-tune-metrics", hosts=HOSTS, busy={0: 0.3, 1: 0.3},
                        val_accuracy=(0.7, 0.75, 0.8))
    return base, default, faster, worse


def _piece(kind: CauseKind, change: Change | None, predicted: tuple[float, float, float]) -> Advice:
    return Advice(kind, 0.01, 0.1, change, "api", Prediction(*predicted), "basis")


def test_advice_changes_become_knobs_checked_like_the_flags() -> None:
    metrics = _piece(CauseKind.REDUCTIONS, Change("metrics", "minimal"), (1.2, 1.1, 1.3))
    spe = _piece(CauseKind.FRAMEWORK, Change("steps_per_execution", 8), (1.1, 1.0, 1.2))
    both = Trial((metrics, spe))
    assert both.knobs(Knobs(prefetch=2)) == Knobs(metrics="minimal", steps_per_execution=8, prefetch=2)
    assert both.change == "combined: --metrics minimal, --steps-per-execution 8" and Trial().change == "default"
    assert Trial((metrics,)).change == "--metrics minimal"
    assert not Change("profile_steps", "off").is_knob and Change("profile_steps", "off").knobs(Knobs()) == Knobs()
    with pytest.raises(UsageError, match="--metrics"):
        Trial((_piece(CauseKind.REDUCTIONS, Change("metrics", "most"), (1, 1, 1)),)).knobs(Knobs())
    with pytest.raises(ValueError, match="batch_size"):
        Change("batch_size", 64)
    # a table row reads back as the record it was written from, whatever the cell types
    straggler = Advice(CauseKind.STRAGGLER, 0.2, 0.3, None, "api", Prediction(1.3, 1.2, 1.4), "b", Tried.NOT_YET,
                       "a=1.5, b=0.5")
    table = advice_frame([spe, straggler, metrics])
    assert [advice_of(r) for r in table.itertuples(index=False)] == [straggler, spe, metrics]  # ties keep their order
    assert list(table["rank"]) == [1, 2, 3]
    alone = advice_frame([spe, _piece(CauseKind.VALIDATION, None, (1.1, 1.1, 1.1))])  # ints and a None
    assert list(alone["value"]) == [8, None] and isinstance(alone["value"][0], int)


def test_each_change_measured_against_the_default_and_its_prediction(tmp_path: Path) -> None:
    base, default, faster, worse = _runs(tmp_path)
    tried = [TriedRuns("default", (default,)), TriedRuns("--steps-per-execution 8", (faster,), (), (1.2, 1.1, 1.3)),
             TriedRuns("--metrics minimal", (worse,), (), (1.2, 1.1, 1.3)),
             TriedRuns("--bytes-per-pack 1048576", (), ("--all-reduce nccl: no GPU",), (1.05, 1.0, 1.1))]
    table, _ = tried_table(base, tried, tmp_path)
    rows = table.set_index("change")
    epoch = {0.5: 10 * 0.65 + 1.0, 0.3: 10 * 0.45 + 1.0}  # 10 steps + 1 s validation
    spe = rows.loc["--steps-per-execution 8"]
    assert spe["measured_speedup"] == pytest.approx(epoch[0.5] / epoch[0.3]) and spe["outcome"] == "gain"
    assert spe["error"] == pytest.approx(1.2 / (epoch[0.5] / epoch[0.3]) - 1) and spe["within_range"] is False
    assert spe["vs_baseline"] == pytest.approx((10 * 1.05 + 1.0) / epoch[0.3])
    assert rows.loc["--metrics minimal", "outcome"].startswith("diverged: validation accuracy -0.1000")
    assert rows.loc["--bytes-per-pack 1048576", "outcome"] == "failed: --all-reduce nccl: no GPU"
    assert math.isnan(rows.loc["--bytes-per-pack 1048576", "measured_speedup"])
    assert rows.loc["default", "measured_speedup"] == pytest.approx(1.0)
    assert tuned_run(table) == faster.name
    assert gained([faster], [default], tmp_path) and not gained([worse], [default], tmp_path)


def test_a_change_slower_than_the_default_beyond_its_spread_is_reported_slower(tmp_path: Path) -> None:
    base, default, _, _ = _runs(tmp_path)
    [slower] = write_run(tmp_path, "20260101T040000Z-multi-tune-spe", hosts=HOSTS, busy={0: 0.6, 1: 0.6})
    [same] = write_run(tmp_path, "20260101T050000Z-multi-tune-pack", hosts=HOSTS, busy={0: 0.505, 1: 0.505})
    table, _ = tried_table(base, [TriedRuns("default", (default,)), TriedRuns("--steps-per-execution 8", (slower,)),
                                  TriedRuns("--bytes-per-pack 1048576", (same,))], tmp_path)
    rows = table.set_index("change")
    ratio = (10 * 0.65 + 1.0) / (10 * 0.75 + 1.0)  # 0.88x: its epoch 13% longer, beyond the 1% floor
    assert rows.loc["--steps-per-execution 8", "outcome"] == f"slower: {ratio:.2f}x of the default"
    assert rows.loc["--bytes-per-pack 1048576", "outcome"] == "no gain (within 1% of the default)"  # 0.99x
    assert tuned_run(table) == default.name, "a slower change is not the tuned configuration"


def test_outcome_bounds_are_the_defaults_spread_both_ways() -> None:
    assert _speed_outcome(1.021, 0.02) == "gain" and _speed_outcome(1.02, 0.02) == "no gain (within 2% of the default)"
    assert _speed_outcome(0.981, 0.02) == "no gain (within 2% of the default)"  # 1.019x longer: within the spread
    assert _speed_outcome(0.893, 0.02) == "slower: 0.89x of the default"


def test_steps_per_execution_with_minimal_metrics_counts_the_reduction_gaps_once() -> None:
    """Both claim the gaps between the metric reductions: combined, steps per execution counts its low end."""
    metrics = _piece(CauseKind.REDUCTIONS, Change("metrics", "minimal"), (1.25, 1.2, 1.3))
    spe = _piece(CauseKind.FRAMEWORK, Change("steps_per_execution", 8), (1.1, 1.05, 1.2))
    mid, lo, hi = predicted_for([metrics, spe])
    assert mid == pytest.approx(1 / (1 - 0.2 - (1 - 1 / 1.05)))
    assert lo == pytest.approx(1 / (1 - (1 - 1 / 1.2) - (1 - 1 / 1.05)))
    assert hi == pytest.approx(1 / (1 - (1 - 1 / 1.3) - (1 - 1 / 1.05)))
    pack = _piece(CauseKind.GRADIENTS, Change("bytes_per_pack", 1 << 20), (1.0, 1.0, 1.0))
    assert predicted_for([pack, spe]) == pytest.approx((1.1, 1.05, 1.2)), "without --metrics minimal: its own range"
    assert predicted_for([spe]) == pytest.approx((1.1, 1.05, 1.2)) and all(math.isnan(x) for x in predicted_for([]))


def test_a_combination_adds_its_parts_epoch_savings() -> None:
    a = _piece(CauseKind.INPUT, Change("prefetch", "auto"), (1.25, 1.0, 1.5))
    b = _piece(CauseKind.GRADIENTS, Change("bytes_per_pack", 2), (1.25, 1.25, 1.25))
    mid, lo, hi = predicted_for([a, b])
    assert mid == pytest.approx(1 / (1 - 0.2 - 0.2)) and lo == pytest.approx(1 / (1 - 0.0 - 0.2))
    assert hi == pytest.approx(1 / (1 - (1 - 1 / 1.5) - 0.2))
