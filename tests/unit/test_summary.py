from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from perfkit.analysis.summary import cpu_table, epoch_table, summarize
from perfkit.results import RunDir, RunMeta, RunRecord

S = 1_000_000_000


def _make_run(tmp_path: Path, epoch_train_s: list[float], val_s: float = 1.0) -> RunRecord:
    run = RunDir.create(tmp_path, "r", RunMeta.new("r", mode="single", preset="tiny"))
    steps, epochs, t = [], [], 0
    for e, train_s in enumerate(epoch_train_s):
        start = t
        for s in range(4):  # 4 steps of 100 samples each
            steps.append((e, s, t, t + int(train_s / 4 * S), train_s / 4, 100))
            t += int(train_s / 4 * S)
        t += int(val_s * S)
        epochs.append({"epoch": e, "t_start_ns": start, "t_end_ns": t, "train_s": train_s, "val_s": val_s,
                       "val_accuracy": 0.9 + e / 100, "val_auc": 0.95})
    run.write_frame("workers/0/steps.parquet", pd.DataFrame(
        steps, columns=["epoch", "step", "t_start_ns", "t_end_ns", "duration_s", "samples"]))
    run.write_frame("workers/0/epochs.parquet", pd.DataFrame(epochs))
    ticks = range(0, t + 1, S // 2)
    cpu = pd.DataFrame({"t_ns": list(ticks) * 2, "worker": 0, "host": "h",
                        "pid": [1] * len(ticks) + [2] * len(ticks),
                        "role": ["trainer"] * len(ticks) + ["trainer-child"] * len(ticks),
                        "cpu_percent": [150.0] * len(ticks) + [50.0] * len(ticks),
                        "rss_bytes": 10, "num_threads": 4})
    cpu.loc[len(cpu)] = [t + 10 * S, 0, "h", 1, "trainer", 999.0, 10, 4]  # after training: excluded
    run.write_frame("cpu.parquet", cpu)
    run.finish("complete")
    return RunRecord.load(run.path)


def test_steady_epoch_is_median_after_the_first(tmp_path: Path) -> None:
    rec = _make_run(tmp_path, [10.0, 4.0, 6.0, 5.0])
    s = summarize(rec)
    assert s.steady_epoch_s == pytest.approx(6.0)  # median of 5, 7, 6 (train + 1 s validation)
    assert not s.steady_is_warmup and s.epochs == 4
    # 400 samples per epoch; rates 100, 66.7, 80 after the first -> median 80
    assert s.steady_samples_per_s == pytest.approx(80.0)
    assert s.fit_s == pytest.approx(10 + 4 + 6 + 5 + 4 * 1.0)
    assert s.val_accuracy == pytest.approx(0.93) and s.val_auc == pytest.approx(0.95)


def test_cpu_sums_a_workers_processes_per_tick_within_training(tmp_path: Path) -> None:
    rec = _make_run(tmp_path, [2.0, 2.0])
    table = cpu_table(rec)
    assert table["cpu_mean"].tolist() == [pytest.approx(200.0)]
    assert table["cpu_p95"].tolist() == [pytest.approx(200.0)]
    assert summarize(rec).cpu_mean == pytest.approx(200.0)


def test_one_epoch_is_flagged_as_warmup(tmp_path: Path) -> None:
    s = summarize(_make_run(tmp_path, [3.0]))
    assert s.steady_is_warmup and s.steady_epoch_s == pytest.approx(4.0)


def test_empty_run_gives_nan_not_numbers(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "empty", RunMeta.new("empty", mode="single"))
    run.finish("failed", "boom")
    rec = RunRecord.load(run.path)
    s = summarize(rec)
    assert s.status == "failed" and s.epochs == 0
    assert math.isnan(s.steady_epoch_s) and math.isnan(s.cpu_mean)
    assert epoch_table(rec).empty and cpu_table(rec).empty


def test_startup_is_command_start_to_first_step_on_the_wall_clock(tmp_path: Path) -> None:
    from perfkit.analysis.summary import startup_seconds

    rec = _make_run(tmp_path, [2.0, 2.0])
    # the worker's monotonic 0 (its first step) is wall 100 s; the command started at wall 88 s
    meta = RunMeta.parse({**rec.meta, "command_started_wall_ns": 88 * S,
                          "workers": [{"index": 0, "anchor_wall_ns": 100 * S, "anchor_mono_ns": 0}]}, "t")
    assert startup_seconds(RunRecord(rec.path, meta, rec.steps, rec.epochs, rec.cpu, rec.system)) == pytest.approx(12.0)
    assert math.isnan(startup_seconds(rec))


def test_workers_of_one_host_sampled_by_separate_samplers_are_summed_per_interval() -> None:
    """Two Slurm tasks on one node: each part's sampler ticks at its own times (every 0.5 s, 0.2 s apart)."""
    import numpy as np
    import pandas as pd

    from perfkit.analysis.cpu import _host_sum

    t0 = np.arange(10) * S // 2
    df = pd.concat([pd.DataFrame({"worker": 0, "t_ns": t0, "cpu_percent": 80.0}),
                    pd.DataFrame({"worker": 1, "t_ns": t0 + S // 5, "cpu_percent": 90.0})], ignore_index=True)
    summed = _host_sum(df["worker"].to_numpy(), df["t_ns"].to_numpy(), df["cpu_percent"].to_numpy())
    assert len(summed) >= 9 and (summed == 170.0).all()


def test_only_the_first_run_of_a_command_counts_its_start_up_from_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """perfkit compare runs the baseline, then the multi run: the second's origin is its own start."""
    from perfkit import _started
    from perfkit.machine import command_started_ns

    monkeypatch.setattr(_started, "_origin", {"ns": _started.WALL_NS, "runs": 0})
    assert _started.begin_run() == _started.WALL_NS == command_started_ns()
    second = _started.begin_run()
    assert second > _started.WALL_NS and command_started_ns() == second
