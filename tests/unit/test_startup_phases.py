"""A worker's start-up cut at the states it reported: launcher, python, each state, until its first step."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pandas as pd
import pytest

from perfkit.analysis.startup import phase_summary, startup_phases
from perfkit.results import RunDir, RunRecord
from perfkit.runmeta import RunMeta, WorkerRecord
from perfkit.trainer.worker.part import Status, process_started_ns

S = 1_000_000_000


def _record(tmp_path: Path, workers: list[dict], **meta: object) -> RunRecord:
    records = [WorkerRecord.parse(w, "test") for w in workers]
    run = RunDir.create(tmp_path, "r", RunMeta.new("r", mode="multi", command_started_wall_ns=100 * S, workers=records,
                                                   **meta))
    steps = pd.DataFrame({"worker": [0, 0], "epoch": 0, "step": [0, 1], "t_start_ns": [5 * S, 6 * S],
                          "t_end_ns": [6 * S, 7 * S], "duration_s": 1.0, "samples": 8})
    run.write_frame("workers/0/steps.parquet", steps.drop(columns="worker"))
    run.finish("complete")
    return RunRecord.load(run.path)


def test_each_phase_runs_from_its_state_to_the_next_and_the_last_to_the_first_step(tmp_path: Path) -> None:
    phases = [{"state": "starting", "t_wall_ns": 103 * S, "cpu_s": 0.5},
              {"state": "connecting", "t_wall_ns": 107 * S, "cpu_s": 4.5},
              {"state": "training", "t_wall_ns": 110 * S, "cpu_s": 7.0},
              {"state": "done", "t_wall_ns": 130 * S, "cpu_s": 20.0}]
    # monotonic 5 s (the first step) is wall 112 s
    worker = {"index": 0, "anchor_wall_ns": 107 * S, "anchor_mono_ns": 0, "started_wall_ns": 102 * S,
              "phases": phases}
    got = startup_phases(_record(tmp_path, [worker, {"index": 1}]))  # worker 1 kept no phases: no rows
    assert got["phase"].tolist() == ["launcher", "python", "starting", "connecting", "training"]
    assert got["start_s"].tolist() == pytest.approx([0, 2, 3, 7, 10])
    assert got["wall_s"].tolist() == pytest.approx([2, 1, 4, 3, 2])
    assert math.isnan(got["cpu_s"].iloc[0]) and got["cpu_s"].tolist()[1:4] == pytest.approx([0.5, 4.0, 2.5])
    assert math.isnan(got["cpu_s"].iloc[4]), "no CPU figure at the first step: not invented"
    assert got["wall_s"].sum() == pytest.approx(12), "the phases add up to the command's start-up"
    assert set(got["worker"]) == {0}


def test_a_forked_worker_shows_the_fork_servers_import_and_its_wait_for_the_fork(tmp_path: Path) -> None:
    phases = [{"state": "starting", "t_wall_ns": 108 * S, "cpu_s": 0.01},
              {"state": "training", "t_wall_ns": 110 * S, "cpu_s": 1.0}]
    worker = {"index": 0, "anchor_wall_ns": 107 * S, "anchor_mono_ns": 0, "started_wall_ns": 107 * S,
              "phases": phases}
    late = {**worker, "index": 1, "started_wall_ns": 104 * S}  # started before the server was ready: not forked
    start = {"method": "fork", "started_wall_ns": 101 * S, "ready_wall_ns": 105 * S, "import_cpu_s": 3.5}
    got = startup_phases(_record(tmp_path, [worker, late], worker_start=start))
    mine = got[got["worker"] == 0]
    assert mine["phase"].tolist() == ["launcher", "import (fork server)", "fork", "python", "starting", "training"]
    assert mine["wall_s"].tolist() == pytest.approx([1, 4, 2, 1, 2, 2])
    assert mine["cpu_s"].iloc[:3].isna().all(), "the server's CPU is not the worker's (worker_start has it)"
    assert got[got["worker"] == 1]["phase"].tolist()[:2] == ["launcher", "python"]
    exec_run = startup_phases(_record(tmp_path / "x", [worker], worker_start={**start, "method": "exec"}))
    assert exec_run["phase"].tolist()[:2] == ["launcher", "python"]


def test_the_summary_is_the_median_over_runs_of_the_median_worker() -> None:
    run = pd.DataFrame({"worker": [0, 1, 0, 1], "phase": ["python", "python", "connecting", "connecting"],
                        "start_s": 0.0, "wall_s": [1.0, 3.0, 5.0, 7.0], "cpu_s": [1.0, 1.0, 2.0, 4.0]})
    other = run.assign(wall_s=run["wall_s"] * 3)
    got = phase_summary([run, other, run.iloc[0:0]])
    assert got["phase"].tolist() == ["python", "connecting"]  # in the order a worker goes through them
    assert got["wall_s"].tolist() == pytest.approx([4.0, 12.0]) and got["runs"].tolist() == [2, 2]
    assert got["cpu_s"].tolist() == pytest.approx([1.0, 3.0])


def test_status_json_keeps_each_state_once_with_its_time_and_cpu(tmp_path: Path) -> None:
    status = Status(tmp_path / "status.json", 3)
    status.write(state="connecting")
    status.write(force=False, step=5)  # a progress write is not a phase
    status.write(state="connecting", epoch=1)
    sum(i * i for i in range(200_000))
    status.write(state="training")
    said = json.loads((tmp_path / "status.json").read_text())
    assert [p["state"] for p in said["phases"]] == ["starting", "connecting", "training"]
    cpus = [p["cpu_s"] for p in said["phases"]]
    assert cpus == sorted(cpus) and cpus[-1] > cpus[0]
    assert said["started_wall_ns"] <= said["phases"][0]["t_wall_ns"] <= time.time_ns()


def test_this_process_started_before_now_and_after_the_suite_began() -> None:
    started = process_started_ns()
    assert started is not None and 0 < (time.time_ns() - started) / S < 24 * 3600
