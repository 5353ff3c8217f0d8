"""`perfkit launch` with a user-style training script (examples/own_script/train.py: its own tiny model and
data, ``perfkit.record``): its baseline once, then 2 workers, then the analysis; the same script without
perfkit.record (recorded by the start-up hook); commands that record no steps compared as whole commands;
and a command that never starts its TF server named at the connect timeout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.integration._util import last_attempt, launch_retrying, meta
from tests.integration._util import perfkit as _perfkit

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "own_script" / "train.py"
TINY = ["--epochs", "2", "--samples", "6000", "--global-batch", "128"]  # 37 steps an epoch


def _launch(results: Path, *args: str, script_args: tuple[str, ...] = ()) -> Path:
    return launch_retrying(results, args, [sys.executable, str(SCRIPT), *TINY, *script_args])


def test_a_users_script_with_perfkit_record_on_two_workers_against_its_own_baseline(tmp_path: Path) -> None:
    single = _launch(tmp_path, "--mode", "single")
    multi = _launch(tmp_path, "--workers", "2")
    m = meta(multi)
    assert m["status"] == "complete" and m["mode"] == "multi" and m["launch"]["recorded"] is True
    assert m["config"]["epochs"] == 2 and m["config"]["batch_size"] == 128
    assert m["workload"] == meta(single)["workload"], "the baseline matches by its command"
    for w in (0, 1):
        steps = last_attempt(pd.read_parquet(multi / "workers" / str(w) / "steps.parquet"))
        epochs = last_attempt(pd.read_parquet(multi / "workers" / str(w) / "epochs.parquet"))
        assert len(steps) == 2 * 37 and (steps["samples"] == 64).all() and len(epochs) == 2
        assert epochs["val_accuracy"].notna().all()
    assert {w["profile"]["status"] for w in m["workers"]} == {"captured"}
    cpu = pd.read_parquet(multi / "cpu.parquet")
    assert set(cpu.loc[cpu["worker"] >= 0, "worker"]) == {0, 1}

    proc = _perfkit("analyze", "--results-dir", str(tmp_path), "--format", "json", "--no-html")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["baseline"]["run_id"] == single.name
    row = next(r for r in doc["runs"] if r["run_id"] == multi.name)
    assert row["speedup"] > 0 and row["split_source"] == "trace" and row["data"].startswith("command ")


def test_the_same_script_without_perfkit_record_is_recorded_by_the_start_up_hook(tmp_path: Path) -> None:
    run = _launch(tmp_path, "--workers", "2", script_args=("--no-record",))
    m = meta(run)
    assert m["status"] == "complete" and m["launch"]["recorded"] is True
    assert m["launch"]["steps"] == "Keras fit's batches" and m["config"]["batch_size"] == 128
    for w in (0, 1):
        steps = last_attempt(pd.read_parquet(run / "workers" / str(w) / "steps.parquet"))
        epochs = last_attempt(pd.read_parquet(run / "workers" / str(w) / "epochs.parquet"))
        assert len(steps) == 2 * 37 and (steps["samples"] == 64).all() and epochs["val_accuracy"].notna().all()


BUSY = "import sys; sum(i * i for i in range(4 * 10**6)); print('done', file=sys.stderr)"


def test_commands_that_record_no_steps_still_compare_as_whole_commands(tmp_path: Path) -> None:
    """A command perfkit cannot see train (here: Python that never imports TensorFlow) keeps its CPU, memory,
    exit status and wall time, and two such runs give the speedup of the whole command."""
    single = launch_retrying(tmp_path, ("--mode", "single"), [sys.executable, "-c", BUSY])
    multi = launch_retrying(tmp_path, ("--workers", "2", "--no-auto-record", "--sample-interval", "0.1"),
                            [sys.executable, "-c", BUSY])
    for run in (single, multi):
        assert meta(run)["launch"]["recorded"] is False and meta(run)["status"] == "complete"
    assert {w["exit_code"] for w in meta(multi)["workers"]} == {0}
    proc = _perfkit("analyze", "--results-dir", str(tmp_path), "--format", "json", "--no-html")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["excluded"] == [] and doc["baseline"]["run_id"] == single.name
    row = next(r for r in doc["runs"] if r["run_id"] == multi.name)
    assert row["steps_note"].startswith("the launched command recorded no steps")
    assert row["command_wall_s"] > 0 and row["command_speedup"] > 0 and row["speedup"] is None
    workers = [w for w in doc["workers"] if w["run_id"] == multi.name]
    assert sorted(w["worker"] for w in workers) == [0, 1] and all(w["exit_code"] == 0 for w in workers)


def test_a_command_that_never_starts_its_server_is_named_at_the_connect_timeout(tmp_path: Path) -> None:
    proc = _perfkit("launch", "--workers", "2", "--connect-timeout", "5", "--results-dir", str(tmp_path), "--",
                    sys.executable, "-c", "import time; time.sleep(120)", timeout=60)
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    assert "did not form within 5 s" in line and "0 (localhost" in line and "1 (localhost" in line


def test_a_command_that_dies_is_named_with_its_last_words(tmp_path: Path) -> None:
    proc = _perfkit("launch", "--workers", "3", "--no-profile", "--results-dir", str(tmp_path), "--",
                    sys.executable, str(SCRIPT), *TINY, timeout=300)
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    assert "exited with code 1: perfkit.errors.UsageError: perfkit.record: global_batch 128 does not divide " \
           "among 3 workers" in line, line
