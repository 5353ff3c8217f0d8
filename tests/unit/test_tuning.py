"""perfkit tune's reading of what it ran: advice into knob changes, predicted against measured, accuracy
kept or lost (hand-built runs of known step times)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from perfkit.analysis.tuning import TriedRuns, combined_prediction, gained, tried_table, tuned_run
from perfkit.errors import UsageError
from perfkit.trainer.tune import knob_change
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


def test_advice_flags_become_knob_changes_checked_like_the_flags() -> None:
    assert knob_change("--metrics minimal") == {"metrics": "minimal"}
    assert knob_change("--steps-per-execution 8") == {"steps_per_execution": 8}
    assert knob_change("host budgets a=1 (perfkit compare --verify runs it)") is None
    with pytest.raises(UsageError, match="--metrics"):
        knob_change("--metrics most")


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


def test_a_combination_adds_its_parts_epoch_savings() -> None:
    pred = {"--a 1": (1.25, 1.0, 1.5), "--b 2": (1.25, 1.25, 1.25)}
    mid, lo, hi = combined_prediction(["--a 1", "--b 2"], pred)
    assert mid == pytest.approx(1 / (1 - 0.2 - 0.2)) and lo == pytest.approx(1 / (1 - 0.0 - 0.2))
    assert hi == pytest.approx(1 / (1 - (1 - 1 / 1.5) - 0.2))
