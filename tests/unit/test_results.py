from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest

from perfkit.errors import ResultsError, UsageError
from perfkit.results import SCHEMA_VERSION, RunDir, RunRecord, iter_run_dirs, new_run_id, write_json
from perfkit.runmeta import RunMeta


def _steps() -> pd.DataFrame:
    return pd.DataFrame({"epoch": [0, 0, 1], "step": [0, 1, 0], "t_start_ns": [0, 10, 20],
                         "t_end_ns": [5, 15, 25], "duration_s": [5e-9] * 3, "samples": [8, 8, 8]})


def test_round_trip(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r1", RunMeta.new("r1", mode="single", preset="tiny"))
    assert json.loads((run.path / "run.json").read_text())["status"] == "running"
    run.write_frame("workers/0/steps.parquet", _steps())
    run.write_frame("cpu.parquet", pd.DataFrame({"t_ns": [1], "worker": [0], "host": ["h"], "pid": [1],
                                                  "role": ["trainer"], "cpu_percent": [50.0],
                                                  "rss_bytes": [1], "num_threads": [3]}))
    run.finish("complete", sampler={"samples": 1})
    rec = RunRecord.load(run.path)
    assert rec.status == "complete" and rec.meta["schema_version"] == SCHEMA_VERSION
    assert rec.meta["ended"] and rec.meta["sampler"] == {"samples": 1}
    assert len(rec.steps) == 3 and set(rec.steps["worker"]) == {0}
    assert rec.cpu["cpu_percent"].tolist() == [50.0]
    assert rec.epochs.empty and rec.system.empty
    assert not list(run.path.rglob("*.tmp")), "temp files must be renamed into place"


def test_existing_run_id_is_refused(tmp_path: Path) -> None:
    RunDir.create(tmp_path, "same", RunMeta.new("same"))
    with pytest.raises(UsageError, match="already exists"):
        RunDir.create(tmp_path, "same", RunMeta.new("same"))


def test_run_id_is_sanitised_into_the_results_dir(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "res", "../../escape", RunMeta.new("escape"))
    assert run.path.parent == tmp_path / "res" and run.path.name == "escape"


def test_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    write_json(target, {"a": 1})

    class Unserialisable:
        def __str__(self) -> str:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_json(target, {"a": Unserialisable()})
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_not_a_run_and_newer_schema(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="not a perfkit run"):
        RunRecord.load(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(ResultsError, match="newer"):
        RunRecord.load(tmp_path)
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(ResultsError, match="unreadable"):
        RunRecord.load(tmp_path)


def test_damaged_parquet_names_the_file(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "r", RunMeta.new("r"))
    (run.path / "cpu.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(ResultsError, match="cpu.parquet"):
        RunRecord.load(run.path)


def test_run_ids_and_listing(tmp_path: Path) -> None:
    now = datetime(2026, 11, 30, 16, 0, 0, tzinfo=timezone.utc)
    assert new_run_id("single", None, now) == "20261130T160000Z-single"
    assert new_run_id("multi", "4 workers/blog", now) == "20261130T160000Z-multi-4-workers-blog"
    RunDir.create(tmp_path, "b", RunMeta.new("b"))
    RunDir.create(tmp_path, "a", RunMeta.new("a"))
    (tmp_path / "datasets").mkdir()
    assert [p.name for p in iter_run_dirs(tmp_path)] == ["a", "b"]


def test_a_workers_record_is_built_once_from_what_it_reported_and_read_back_as_written() -> None:
    from perfkit.runmeta import FitPlan, Phase, RunMeta, WorkerRecord, fit_plan

    status = {"state": "done", "anchor_wall_ns": 5, "anchor_mono_ns": "7", "plan": {
        "epochs": 2, "steps_per_epoch": 10, "executions_per_epoch": 10, "params": True, "step_function": {"name": "s"}},
        "phases": [{"state": "starting", "t_wall_ns": 3, "cpu_s": 0.5}, {"state": "no time"}, "garbage"],
        "started_wall_ns": 1}
    w = WorkerRecord.reported(1, status, host="h", pid=9, task=0)
    assert (w.state, w.anchor_wall_ns, w.anchor_mono_ns, w.host, w.pid) == ("done", 5, None, "h", 9), \
        "a value of the wrong type from a status file on disk is left out"
    assert w.phases == (Phase("starting", 3, 0.5),) and w.extra == {"task": 0}
    assert w.plan == FitPlan(epochs=2, steps_per_epoch=10, executions_per_epoch=10)
    assert w.plan.extra == {"params": True, "step_function": {"name": "s"}}, "no int: kept as written, not a field"
    d = w.to_dict()
    assert d["plan"] == status["plan"] and d["task"] == 0 and d["phases"] == [status["phases"][0]]
    again = WorkerRecord.parse(d, "run.json")
    assert again == w and again.plan is not None and again.plan.extra == w.plan.extra
    assert fit_plan([WorkerRecord(0), w]) == status["plan"]
    assert fit_plan([WorkerRecord(0, plan=FitPlan(epochs=1))]) is None, "a plan without executions is no fit's"
    meta = RunMeta.parse({"schema_version": 1, "run_id": "r", "workers": [d]}, "run.json")
    assert meta.plan().steps_per_epoch == 10 and meta.plan().get("step_function") == {"name": "s"}
    own = RunMeta.parse({"schema_version": 1, "run_id": "r", "plan": {"params": 440}, "workers": [d]}, "run.json")
    assert own.plan().params == 440 and RunMeta.parse({"schema_version": 1}, "x/run.json").plan() == FitPlan()


def test_a_run_record_is_written_typed_and_a_field_of_the_wrong_type_fails_in_the_writer(tmp_path: Path) -> None:
    from perfkit.runmeta import ClusterRecord, WorkerRecord

    run = RunDir.create(tmp_path, "r", RunMeta.new("r", mode="multi", cluster=ClusterRecord(num_workers=2),
                                                   versions={"tf": "x"}))
    run.update(workers=[WorkerRecord(0, host="h"), WorkerRecord(1, host="h")])
    with pytest.raises(TypeError, match="workers"):
        run.update(workers=[{"index": 0}])
    with pytest.raises(TypeError, match="cluster"):
        run.update(cluster={"num_workers": 2})
    with pytest.raises(TypeError, match="config"):
        run.update(config="tiny")
    run.finish("complete")
    meta = RunRecord.load(run.path).run
    assert meta == run.meta and meta.status == "complete" and meta.cluster.num_workers == 2
    assert [w.index for w in meta.workers] == [0, 1] and meta.extra["versions"] == {"tf": "x"}  # a writer's own key


def test_a_listing_reads_a_run_without_its_cpu_and_system_samples(tmp_path: Path) -> None:
    import pandas as pd

    run = RunDir.create(tmp_path, "r", RunMeta.new("r", mode="single"))
    cpu = pd.DataFrame({"t_ns": [1, 2], "worker": [0, 0], "host": ["h", "h"], "pid": [7, 7], "role": ["trainer"] * 2,
                        "cpu_percent": [50.0, 60.0], "rss_bytes": [1, 2], "num_threads": [3, 3]})
    run.write_frame("cpu.parquet", cpu)
    run.finish("complete")
    whole, listed = RunRecord.load(run.path), RunRecord.load(run.path, samples=False)
    assert len(whole.cpu) == 2 and listed.cpu.empty and listed.system.empty
    assert list(listed.cpu.columns) == list(whole.cpu.columns) and listed.run == whole.run
