"""The synthetic run generator (for benchmarks) writes the on-disk format the loader reads, small here."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.synthetic import SyntheticSpec, write_synthetic_baseline, write_synthetic_run
from perfkit.analysis.analyze import analyze
from perfkit.analysis.load import TRACE_STEP_COLUMNS, load_runs
from perfkit.results import CPU_COLUMNS, EPOCH_COLUMNS, STEP_COLUMNS, RunRecord

SMALL = SyntheticSpec(steps=600, epochs=3, cpu_rows=6_000, val_s=2.0)


def test_generated_run_follows_the_format(tmp_path: Path) -> None:
    [path] = write_synthetic_run(tmp_path, SMALL)
    rec = RunRecord.load(path)
    assert rec.status == "complete" and rec.meta["cluster"]["num_workers"] == 4
    assert set(STEP_COLUMNS) <= set(rec.steps.columns) and len(rec.steps) == 4 * 600
    assert set(EPOCH_COLUMNS) <= set(rec.epochs.columns) and len(rec.epochs) == 4 * 3
    assert set(CPU_COLUMNS) <= set(rec.cpu.columns) and len(rec.cpu) == 6_000
    assert (path / "trace_steps.parquet").is_file() and (path / "trace_ops.parquet").is_file()
    run = load_runs([path], tmp_path).runs[0]
    assert not run.problems and not run.warnings
    assert run.trace is not None and set(TRACE_STEP_COLUMNS) <= set(run.trace.columns)


def test_analysis_recovers_the_simulated_straggler(tmp_path: Path) -> None:
    write_synthetic_baseline(tmp_path, SMALL)
    write_synthetic_run(tmp_path, SMALL)
    a = analyze(None, tmp_path)
    assert a.baseline_id == "20261130T000000Z-single-synthetic" and a.excluded.empty
    run = a.runs.set_index("run_id").loc[SMALL.run_id]
    assert run["split_source"] == "trace" and run["slowest_worker"] == 3 and run["slowest_host"] == "small"
    assert run["slowest_speed_score"] == pytest.approx(SMALL.slow_speed, rel=0.1)
    assert run["slowest_straggler_share"] > 0.95 and run["flagged_workers"] == "3"


def test_parts_merge_back_into_the_same_figures(tmp_path: Path) -> None:
    one, parts = tmp_path / "one", tmp_path / "parts"
    write_synthetic_run(one, SMALL)
    paths = write_synthetic_run(parts, replace(SMALL, parts=True))
    assert [p.name for p in paths] == [f"{SMALL.run_id}--big", f"{SMALL.run_id}--small"]
    a, b = (analyze(None, d).runs.set_index("run_id").loc[SMALL.run_id] for d in (one, parts))
    for col in ("steady_epoch_s", "fit_s", "straggler_cost", "slowest_speed_score", "equal_epoch_s"):
        assert b[col] == pytest.approx(a[col], rel=1e-3), col


def test_a_long_runs_shape_is_recorded_as_the_recorder_writes_it_and_analysed(tmp_path: Path) -> None:
    """benchmarks/analysis_speed.py's 64w and 256w shape: one trace window per worker, start-up states and a
    restart whose lost half epoch (attempt 0) the analysis leaves out."""
    spec = replace(SMALL, trace_window=10, restart_epoch=2, phases=True)
    write_synthetic_baseline(tmp_path, spec)
    [path] = write_synthetic_run(tmp_path, spec)
    rec = RunRecord.load(path)
    lost = rec.steps[rec.steps["attempt"] == 0]
    assert len(rec.steps) == 4 * (600 + 100) and set(lost[lost["epoch"] == 2]["step"]) == set(range(100))
    assert [r["attempt"] for r in rec.run.restarts] == [1]
    assert all([p.state for p in w.phases] == ["starting", "connecting", "training"] for w in rec.run.workers)
    run = load_runs([path], tmp_path).runs[0]
    assert not run.problems and len(run.trace) == 4 * 10 and set(run.trace["epoch"]) == {1}
    a = analyze(None, tmp_path)
    got = a.runs.set_index("run_id").loc[spec.run_id]
    plain = analyze(None, _plain(tmp_path / "plain")).runs.set_index("run_id").loc[spec.run_id]
    # the lost attempt's steps are not counted twice: the same steady epoch as the run without the restart
    assert got["steady_epoch_s"] == pytest.approx(plain["steady_epoch_s"], rel=1e-6)
    assert got["slowest_worker"] == 3 and set(a.startup["worker"]) >= {0, 1, 2, 3}


def _plain(root: Path) -> Path:
    write_synthetic_baseline(root, SMALL)
    write_synthetic_run(root, SMALL)
    return root
