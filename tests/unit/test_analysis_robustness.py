"""Bad, partial and foreign run directories: left out with a reason, or a one-line error; never half-used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfkit.analysis.analyze import analyze
from perfkit.errors import ResultsError, UsageError
from tests.unit._analysis_runs import set_meta, single_run, typed, write_run

BASE, RUN = "20260101T000000Z-single-base", "20260101T010000Z-multi-run"


def _reason(tmp_path: Path, run_id: str = RUN) -> str:
    a = analyze(None, tmp_path)
    assert run_id not in set(a.runs["run_id"]), "a run left out must not be analysed"
    return str(a.excluded.set_index("run_id").loc[run_id, "reason"])


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return single_run(tmp_path, BASE)


@pytest.mark.parametrize(("status", "words"), [("failed", "status failed: boom"), ("running", "status running"),
                                               ("interrupted", "status interrupted")])
def test_runs_that_did_not_complete_are_left_out(tmp_path: Path, base: Path, status: str, words: str) -> None:
    write_run(tmp_path, RUN, status=status)
    assert words in _reason(tmp_path)


def test_missing_worker_files_are_named(tmp_path: Path, base: Path) -> None:
    [path] = write_run(tmp_path, RUN)
    (path / "workers" / "2" / "steps.parquet").unlink()
    assert "no steps recorded for worker(s) 2" in _reason(tmp_path)


def test_missing_cpu_file_is_named(tmp_path: Path, base: Path) -> None:
    [path] = write_run(tmp_path, RUN)
    (path / "cpu.parquet").unlink()
    assert "cpu.parquet missing" in _reason(tmp_path)


def test_fewer_epochs_than_configured(tmp_path: Path, base: Path) -> None:
    write_run(tmp_path, RUN, epochs_recorded=2)
    assert "worker 0 recorded 2 of 3 epochs" in _reason(tmp_path)


def test_another_preset_or_dataset_than_the_baseline(tmp_path: Path, base: Path) -> None:
    # the latest multi-mode runs have no baseline of their own: the older one that has decides
    write_run(tmp_path, "20260101T005000Z-multi-ok", started="2026-01-01T00:50:00Z")
    write_run(tmp_path, RUN, preset="blog", started="2026-01-01T01:00:00Z")
    write_run(tmp_path, "20260101T020000Z-multi-data", train_players=9999, started="2026-01-01T02:00:00Z")
    a = analyze(None, tmp_path)
    assert a.baseline_id == BASE and a.runs["run_id"].tolist() == [BASE, "20260101T005000Z-multi-ok"]
    assert _reason(tmp_path) == "preset blog, not the baseline's quick"
    assert "dataset" in _reason(tmp_path, "20260101T020000Z-multi-data")
    assert "9999/150 players" in _reason(tmp_path, "20260101T020000Z-multi-data")


def test_runs_on_other_workloads_without_any_baseline(tmp_path: Path) -> None:
    write_run(tmp_path, RUN, preset="blog", started="2026-01-01T01:00:00Z")
    write_run(tmp_path, "20260101T020000Z-multi-q", started="2026-01-01T02:00:00Z")
    a = analyze(None, tmp_path)
    assert a.baseline_id is None and a.runs["run_id"].tolist() == ["20260101T020000Z-multi-q"]
    assert _reason(tmp_path) == "preset blog, not the latest run's quick"


def test_corrupt_steps_file_leaves_the_run_out(tmp_path: Path, base: Path) -> None:
    [path] = write_run(tmp_path, RUN)
    (path / "workers" / "1" / "steps.parquet").write_bytes(b"not parquet at all")
    assert "unreadable Parquet" in _reason(tmp_path)


def test_non_numeric_column_is_a_schema_error(tmp_path: Path, base: Path) -> None:
    import pandas as pd

    [path] = write_run(tmp_path, RUN)
    f = path / "workers" / "0" / "epochs.parquet"
    pd.read_parquet(f).assign(train_s="six").to_parquet(f)
    assert "epochs column train_s is not numeric" in _reason(tmp_path)


def test_cpu_samples_with_damaged_pages_leave_the_run_out_named(tmp_path: Path, base: Path) -> None:
    """The footer reads (so the file opens) but the pages between do not: found while the run loads, the
    file named, the others analysed; never a traceback midway through the figures."""
    import struct

    [path] = write_run(tmp_path, RUN)
    f = path / "cpu.parquet"
    data = bytearray(f.read_bytes())
    footer = struct.unpack("<I", bytes(data[-8:-4]))[0]
    data[4:len(data) - 8 - footer] = b"\xab" * (len(data) - 12 - footer)
    f.write_bytes(bytes(data))
    reason = _reason(tmp_path)
    assert reason.startswith(f"{f}: unreadable Parquet file (") and "\n" not in reason
    assert BASE in set(analyze(None, tmp_path).runs["run_id"])


@pytest.mark.parametrize(("change", "words"), [({"cpu_percent": "busy"}, "cpu column cpu_percent is not numeric"),
                                               (None, "missing columns rss_bytes")])
def test_cpu_samples_of_another_schema_are_named(tmp_path: Path, base: Path, change: dict | None, words: str) -> None:
    import pandas as pd

    [path] = write_run(tmp_path, RUN)
    f = path / "cpu.parquet"
    df = pd.read_parquet(f)
    (df.assign(**change) if change else df.drop(columns="rss_bytes")).to_parquet(f)
    assert _reason(tmp_path) == f"{f}: {words}"


def test_corrupt_trace_falls_back_to_labelled_estimates(tmp_path: Path, base: Path) -> None:
    [path] = write_run(tmp_path, RUN)
    (path / "trace_steps.parquet").write_bytes(b"\x00garbage")
    a = analyze(None, tmp_path)
    run = a.runs.set_index("run_id").loc[RUN]
    assert run["split_source"] == "estimate"
    assert any("trace_steps.parquet: unreadable" in w and "trace figures skipped" in w for w in a.warnings)
    assert any("Estimated from CPU-seconds per step (trace table missing, damaged or partial)" in line
               for line in a.verdict)


def test_trace_missing_a_worker_falls_back_to_estimates(tmp_path: Path, base: Path) -> None:
    import pandas as pd

    [path] = write_run(tmp_path, RUN)
    f = path / "trace_steps.parquet"
    pd.read_parquet(f).query("worker != 2").to_parquet(f)
    a = analyze(None, tmp_path)
    run = a.runs.set_index("run_id").loc[RUN]
    assert run["split_source"] == "estimate" and run["split_note"].endswith("(trace table missing, damaged or partial)")
    assert any("no steps of worker(s) 2" in w for w in a.warnings)


def test_trace_file_missing_although_captured(tmp_path: Path, base: Path) -> None:
    [path] = write_run(tmp_path, RUN)
    (path / "trace_steps.parquet").unlink()
    a = analyze(None, tmp_path)
    assert a.runs.set_index("run_id").loc[RUN, "split_source"] == "estimate"
    assert any("missing although run.json says traces were captured" in w for w in a.warnings)


def test_failed_capture_and_disagreeing_traces_are_warned_about(tmp_path: Path, base: Path) -> None:
    [path] = write_run(tmp_path, RUN)
    meta = json.loads((path / "run.json").read_text())
    meta["profile"]["workers"]["1"]["within_10pct"] = False
    meta["profile"]["workers"]["2"].update(status="failed", error="xprof crashed")
    set_meta(path, profile=meta["profile"])
    a = analyze(None, tmp_path)
    assert any("worker 2: trace capture failed: xprof crashed" in w for w in a.warnings)
    assert any("worker 1: traced steps" in w and "disagree" in w for w in a.warnings)


def test_estimate_names_the_worker_whose_capture_crashed(tmp_path: Path, base: Path) -> None:
    import pandas as pd

    [path] = write_run(tmp_path, RUN, cpu={0: 40.0, 1: 40.0, 2: 40.0, 3: 100.0})
    f = path / "trace_steps.parquet"
    pd.read_parquet(f).query("worker != 1").to_parquet(f)
    meta = json.loads((path / "run.json").read_text())
    meta["profile"]["workers"]["1"].update(status="crashed", error="TensorFlow's profiler crashed a worker")
    set_meta(path, profile=meta["profile"])
    a = analyze(None, tmp_path)
    run = a.runs.set_index("run_id").loc[RUN]
    why = ("no usable trace of worker 1; 1 capture attempt failed: worker 1 crashed (TensorFlow's profiler "
           "crashed a worker)")
    assert run["split_source"] == "estimate" and run["split_note"].endswith(f"({why})")
    assert any(line.startswith(f"Estimated from CPU-seconds per step ({why}): ") for line in a.verdict)


def test_older_run_without_profile_key_uses_estimates_silently(tmp_path: Path, base: Path) -> None:
    [path] = write_run(tmp_path, RUN, trace=False)
    meta = json.loads((path / "run.json").read_text())
    meta.pop("profile")
    (path / "run.json").write_text(json.dumps(meta))
    a = analyze(None, tmp_path)
    run = a.runs.set_index("run_id").loc[RUN]
    assert run["split_source"] == "estimate" and run["split_note"].endswith("(no trace window)") and not a.warnings


def test_named_directory_that_is_not_a_run_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "notarun").mkdir()
    with pytest.raises(ResultsError, match="not a perfkit run"):
        analyze([tmp_path / "notarun"], tmp_path)
    with pytest.raises(ResultsError, match="no such run directory"):
        analyze([tmp_path / "missing"], tmp_path)


def test_newer_schema_is_one_error_when_named_and_left_out_when_scanned(tmp_path: Path, base: Path) -> None:
    [path] = write_run(tmp_path, RUN)
    set_meta(path, schema_version=99)
    with pytest.raises(ResultsError, match="schema_version 99 is newer"):
        analyze([path], tmp_path)
    assert "newer" in _reason(tmp_path, RUN)


def test_empty_results_dir_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no perfkit runs"):
        analyze(None, tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="--results-dir"):
        analyze(None, tmp_path / "file")


def test_unknown_or_unusable_baseline_is_a_usage_error(tmp_path: Path, base: Path) -> None:
    write_run(tmp_path, RUN)
    with pytest.raises(UsageError, match="--baseline: no run nope"):
        analyze(None, tmp_path, "nope")
    single_run(tmp_path, "20260101T020000Z-single-failed", status="failed")
    with pytest.raises(UsageError, match="cannot be the baseline: status failed"):
        analyze(None, tmp_path, "20260101T020000Z-single-failed")


def test_two_copies_of_a_run_are_not_merged(tmp_path: Path, base: Path) -> None:
    import shutil

    [path] = write_run(tmp_path, RUN)
    shutil.copytree(path, tmp_path / f"{RUN}-copy")
    assert "several copies" in _reason(tmp_path)


def test_a_worker_without_cpu_samples_leaves_the_cpu_figures_out(tmp_path: Path, base: Path) -> None:
    import pandas as pd

    [path] = write_run(tmp_path, RUN, trace=False)
    f = path / "cpu.parquet"
    pd.read_parquet(f).query("worker != 1").to_parquet(f)
    a = analyze(None, tmp_path)
    run = a.runs.set_index("run_id").loc[RUN]
    assert pd.isna(run["cpu_s"]) and pd.isna(run["cpu_s_per_1k_samples"]) and pd.isna(run["split_source"])
    assert RUN not in set(a.hosts["run_id"])
    assert any("no CPU samples of worker(s) 1" in w for w in a.warnings)
    assert run["steady_epoch_s"] == pytest.approx(7.5)  # what was measured is still reported
    assert not any(line.startswith("CPU cost") for line in a.verdict[2:])  # only the baseline's line has CPU
    assert any(line.startswith("Stragglers and the what-if are not computed (no split") for line in a.verdict)


def test_cached_and_freshly_generated_data_of_one_file_is_the_same_data() -> None:
    from perfkit.analysis.select import dataset

    cfg = {"train_players": 60000, "test_players": 15000, "sequence_length": 7, "seed": 1}
    single = {"data": {"path": "results/datasets/synth.parquet", "source": "cache"}, "config": cfg}
    multi = {"data": {"path": "results/datasets/synth.parquet", "source": "generated"}, "config": cfg}
    user = {"data": {"path": "results/datasets/synth.parquet", "source": "file"}, "config": cfg}
    assert dataset(typed(single)) == dataset(typed(multi)) != dataset(typed(user))
    # the bot detector's parameters in ``params``, as a run records them now: the same data as before
    params = {"seed": 1, "params": {k: v for k, v in cfg.items() if k != "seed"}}
    assert dataset(typed({**multi, "config": params})) == dataset(typed(multi))
