"""The xplane parser on a recorded capture (2 steps of a tiny 2-worker run) and on damaged files."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfkit.analysis.tracetables import cross_check, load_traces
from perfkit.profiler import xplane
from tests.unit._analysis_runs import typed

pytestmark = pytest.mark.tf  # captures are parsed with the profiler schema shipped in TensorFlow

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture()
def captures(tmp_path: Path) -> dict[int, Path]:
    out = {}
    for w in (0, 1):
        path = tmp_path / f"host-w{w}.xplane.pb"
        path.write_bytes(gzip.decompress((DATA / f"tiny-2w-w{w}.xplane.pb.gz").read_bytes()))
        out[w] = path
    return out


def test_recorded_capture_splits_each_step_into_parts_that_add_up(captures: dict[int, Path]) -> None:
    parsed = xplane.parse(captures[0])
    steps = parsed.steps
    assert list(steps.columns) == list(xplane.STEP_COLUMNS)
    assert steps[["epoch", "step"]].values.tolist() == [[1, 2], [1, 3]]  # the window was global steps 11-12
    assert (steps["step_s"] > 0.01).all() and (steps["collective_s"] > 0).all() and (steps["compute_s"] > 0).all()
    parts = steps[["compute_s", "collective_s", "input_s", "other_s"]].sum(axis=1)
    np.testing.assert_allclose(parts, steps["step_s"], rtol=1e-9)
    assert (steps["t_start_ns"] > 1.7e18).all(), "event times are on the wall clock"


def test_parsing_does_not_import_tensorflow(captures: dict[int, Path]) -> None:
    code = ("import sys; from perfkit.profiler import xplane; xplane.parse(sys.argv[1]); "
            "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'")
    proc = subprocess.run([sys.executable, "-c", code, str(captures[0])], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_workers_of_one_step_overlap_in_wall_time(captures: dict[int, Path]) -> None:
    a, b = (xplane.parse(captures[w]).steps for w in (0, 1))
    assert (abs(a["t_start_ns"] - b["t_start_ns"]) < 0.02e9).all()


def test_top_ops_rank_op_types_by_self_time(captures: dict[int, Path]) -> None:
    ops = xplane.parse(captures[0]).ops
    assert list(ops.columns) == list(xplane.OP_COLUMNS)
    assert ops["total_s"].is_monotonic_decreasing and (ops["count"] > 0).all()
    assert {"MatMul", "CollectiveReduceV2"} <= set(ops["name"])
    assert ops.set_index("name").loc["CollectiveReduceV2", "category"] == "collective"


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_damaged_capture_is_an_error_naming_the_file(captures: dict[int, Path], damage: str) -> None:
    data = captures[0].read_bytes()
    captures[0].write_bytes({"truncate": data[: len(data) // 3], "garbage": b"\xff" * 500, "empty": b""}[damage])
    with pytest.raises(xplane.XPlaneError, match=str(captures[0].name)):
        xplane.parse(captures[0])


def test_union_counts_overlaps_once() -> None:
    s = np.array([0.0, 5e8, 2e9, 2.5e9])
    e = np.array([1e9, 1.5e9, 3e9, 2.6e9])
    assert xplane.union_seconds(s, e) == pytest.approx(2.5)
    assert xplane.union_seconds(np.array([]), np.array([])) == 0.0


def test_cross_check_compares_medians_and_measures_overhead() -> None:
    trace = pd.DataFrame({"epoch": [1, 1], "step": [2, 3], "step_s": [0.20, 0.22]})
    callback = pd.DataFrame({"epoch": [1] * 5, "step": [0, 1, 2, 3, 4], "duration_s": [0.2, 0.2, 0.21, 0.23, 0.2]})
    out = cross_check(trace, callback)
    assert out["matched_steps"] == 2 and out["within_10pct"]
    assert out["agreement"] == pytest.approx(0.22 / 0.21)
    assert out["overhead_ratio"] == pytest.approx(0.22 / 0.2)
    far = cross_check(trace.assign(step_s=[0.4, 0.4]), callback)
    assert not far["within_10pct"]


def test_load_traces_writes_trace_tables_and_skips_an_unreadable_capture(tmp_path: Path,
                                                                          captures: dict[int, Path]) -> None:
    run = tmp_path / "run"
    for w, src in captures.items():
        dest = run / f"tensorboard/plugins/profile/r/h-w{w}.xplane.pb"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(src.read_bytes() if w == 0 else b"\x00\x01broken")
    caps = {str(w): {"status": "captured", "window": {"first": 11, "last": 12},
                     "file": f"tensorboard/plugins/profile/r/h-w{w}.xplane.pb"} for w in (0, 1)}
    meta = {"profile": {"spec": "11-12", "workers": caps}, "workers": [{"index": w, "host": "h"} for w in (0, 1)]}
    tables = load_traces(run, typed(meta))
    assert tables.checks["0"]["steps"] == 2 and tables.checks["0"]["matched_steps"] == 0  # no step callback
    assert set(tables.unreadable) == {"1"} and any("h-w1.xplane.pb" in w for w in tables.warnings)
    steps = pd.read_parquet(run / "trace_steps.parquet")
    assert set(steps["worker"]) == {0} and list(steps.columns[:2]) == ["worker", "host"]
    assert len(pd.read_parquet(run / "trace_ops.parquet")) > 5
    json.dumps(tables.checks)  # trace_cache.json must be able to hold it


def test_collective_time_under_compute_is_overlap_not_communication() -> None:
    # 0-10 ms compute; 4-14 ms all-reduce (6 ms of it under compute); 14-16 ms input; a 20 ms step.
    ms = 1e6
    start = np.array([0, 4, 14]) * ms
    end = np.array([10, 14, 16]) * ms
    split = xplane.split_step(0.020, start, end, np.array(["compute", "collective", "input"]))
    assert split["compute_s"] == pytest.approx(0.010)
    assert split["collective_s"] == pytest.approx(0.004)  # exposed: 10-14 ms only
    assert split["collective_total_s"] == pytest.approx(0.010)
    assert split["overlap_s"] == pytest.approx(0.006)
    assert split["input_s"] == pytest.approx(0.002) and split["other_s"] == pytest.approx(0.004)
    assert split["collectives"] == 1 and split["allreduce_max_s"] == pytest.approx(0.010)
    parts = split["compute_s"] + split["collective_s"] + split["input_s"] + split["other_s"]
    assert parts == pytest.approx(split["step_s"])


def test_recorded_capture_reports_the_overlap_it_took_out(captures: dict[int, Path]) -> None:
    steps = xplane.parse(captures[0]).steps
    np.testing.assert_allclose(steps["collective_s"] + steps["overlap_s"], steps["collective_total_s"], rtol=1e-9)
    assert (steps["collective_total_s"] >= steps["collective_s"]).all()


def test_a_capture_written_by_the_oldest_supported_tensorflow_parses_under_this_one(tmp_path: Path) -> None:
    """TensorFlow 2.15 wrote this capture (examples/keras_fit on 2 workers, worker 0): no profile_start_time,
    times relative to its start. The same schema parses it: its steps split, its markers numbered."""
    path = tmp_path / "tf215-w0.xplane.pb"
    path.write_bytes(gzip.decompress((DATA / "tf215-2w-w0.xplane.pb.gz").read_bytes()))
    trace = xplane.parse(path)
    assert len(trace.steps) >= 5 and (trace.steps["step_s"] > 0).all()
    assert (trace.steps["collective_s"] > 0).all(), "MultiWorkerMirroredStrategy's all-reduce in every step"
    events = xplane.capture_events(path).events
    assert int(events["start_ns"].min()) < 10**18  # relative: placed by its step markers when exported
    assert (events["epoch"] >= 0).sum() == len(trace.steps)
