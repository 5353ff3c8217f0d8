"""Real tiny training runs through the installed `perfkit` command, checked file by file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.integration._util import PERFKIT, meta, run_ok, traces
from tests.integration._util import only_run as _only_run
from tests.integration._util import perfkit as _perfkit

pytestmark = pytest.mark.integration


def test_single_run_records_every_step_epoch_and_cpu_sample(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = _perfkit("run", "--mode", "single", "--preset", "tiny", "--results-dir", str(results),
                    "--sample-interval", "0.2", "--label", "it")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "run directory:" in proc.stdout and "steady" in proc.stdout
    run = _only_run(results)
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "complete" and meta["error"] is None
    assert meta["mode"] == "single" and meta["strategy"] == "MirroredStrategy" and meta["preset"] == "tiny"
    assert run.name.endswith("-single-it")
    assert meta["versions"]["tensorflow"].startswith("2.21") and meta["machine"]["logical_cores"] >= 1
    assert meta["plan"]["params"] == 441_729
    assert meta["sampler"]["samples"] > 0 and meta["sampler"]["overhead_pct"] < 5

    steps_per_epoch = 2048 // 256
    steps = pd.read_parquet(run / "workers/0/steps.parquet")
    epochs = pd.read_parquet(run / "workers/0/epochs.parquet")
    assert len(steps) == 2 * steps_per_epoch == meta["recorded"]["steps"]
    assert steps.groupby("epoch")["step"].apply(list).tolist() == [list(range(steps_per_epoch))] * 2
    assert (steps["duration_s"] > 0).all() and steps["samples"].eq(256).all()
    assert steps["t_start_ns"].is_monotonic_increasing
    assert len(epochs) == 2 and (epochs["train_s"] > 0).all() and (epochs["val_s"] > 0).all()
    assert epochs[["loss", "accuracy", "auc", "val_loss", "val_accuracy", "val_auc"]].notna().all().all()

    cpu = pd.read_parquet(run / "cpu.parquet")
    trainer = cpu[cpu["role"] == "trainer"]
    assert len(trainer) >= 5 and trainer["pid"].nunique() == 1
    assert trainer["cpu_percent"].max() > 20, "training must show up as CPU use"
    system = pd.read_parquet(run / "system.parquet")
    assert system["core"].nunique() == os.cpu_count()
    assert "epoch 2" in (run / "workers/0/worker.log").read_text()
    _assert_single_trace(run, meta)
    assert "profiler trace of steps 11-16" in proc.stdout

    listing = _perfkit("runs", "--results-dir", str(results))
    assert listing.returncode == 0 and run.name in listing.stdout and "complete" in listing.stdout
    _assert_live_status(run, meta, steps_per_epoch)


def _assert_live_status(run: Path, meta: dict, steps_per_epoch: int) -> None:  # type: ignore[type-arg]
    """What ``perfkit watch`` read while it trained, written as a multi run's worker writes it."""
    status = json.loads((run / "workers/0/status.json").read_text())
    beat = json.loads((run / "workers/0/heartbeat.json").read_text())
    assert status["state"] == "done" and status["host"] == meta["workers"][0]["host"], status
    assert [p["state"] for p in status["phases"]][:2] == ["starting", "training"], status["phases"]
    assert status["epochs"] == 2 and status["steps_per_epoch"] == steps_per_epoch and status["epochs_done"] == 2
    assert beat["pid"] == status["pid"] == meta["workers"][0]["pid"], (beat, status)
    assert 0 < beat["batches"] <= 2 * steps_per_epoch, beat
    watch = _perfkit("watch", str(run), "--once")
    assert watch.returncode == 0 and "finished" in watch.stdout and len(watch.stdout.strip().splitlines()) == 1, watch


def _assert_single_trace(run: Path, meta: dict) -> None:  # type: ignore[type-arg]
    """The default window is global steps 11-16: epoch 2 (index 1), steps 2-7 of 8."""
    profile = meta["profile"]
    assert profile["window"] == {"first": 11, "last": 16}
    host = meta["workers"][0]["host"]
    files = sorted(p.name for p in (run / "tensorboard/plugins/profile" / run.name).glob("*.xplane.pb"))
    assert files == [f"{host}-w0.xplane.pb"]
    tables = traces(run)
    trace = tables.steps
    assert trace is not None, tables.warnings
    assert trace[["epoch", "step"]].values.tolist() == [[1, s] for s in range(2, 8)]
    assert (trace["collective_total_s"] == 0).all() and (trace["compute_s"] > 0).all()
    assert profile["workers"]["0"]["status"] == "captured", profile
    check = tables.checks["0"]
    assert check["matched_steps"] == 6 and check["within_10pct"], check
    assert list((run / "tensorboard/w0").glob("events.out.tfevents.*")), "epoch scalars for the Scalars tab"


def test_bad_data_file_fails_in_one_line_and_creates_no_run(tmp_path: Path) -> None:
    bad = tmp_path / "players.csv"
    bad.write_text("player_id,day,label\n1,0,1\n")
    results = tmp_path / "results"
    proc = _perfkit("run", "--preset", "tiny", "--data", str(bad), "--results-dir", str(results), "--quiet")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in proc.stderr
    assert not results.exists() or not list(results.glob("*/run.json"))


def test_replicas_split_the_cpu_and_time_their_all_reduce(tmp_path: Path) -> None:
    """--replicas 2: MirroredStrategy over two logical CPU devices of the one process, and the replicas'
    all-reduce timed after fit in the field a cluster's workers use (docs/scaling.md)."""
    run, _ = run_ok(tmp_path / "results", "run", "--mode", "single", "--replicas", "2", "--preset", "tiny",
                    "--epochs", "1", "--train-players", "1024", "--test-players", "256", "--no-profile", "--quiet")
    m = meta(run)
    assert m["status"] == "complete" and m["replicas"] == 2 and m["config"]["replicas"] == 2  # num_replicas_in_sync
    assert [d.rsplit("/", 1)[1] for d in m["devices"]] == ["device:CPU:0", "device:CPU:1"]
    setup = m["strategy_setup"]
    assert (setup["cross_device_ops"], setup["implementation"], setup["logical_cpus"]) == ("CollectiveAllReduce",
                                                                                         "RING", 2)
    calibration = m["workers"][0]["calibration"]
    assert calibration["gradients_s"] > 0 and calibration["floats"] == 441_729, calibration
    steps = pd.read_parquet(run / "workers/0/steps.parquet")
    assert len(steps) == 1024 // 256 and steps["samples"].eq(256).all()  # the global batch, split in two


@pytest.mark.slow
def test_ctrl_c_marks_the_run_interrupted_and_keeps_the_records(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = subprocess.Popen([*PERFKIT, "run", "--preset", "tiny", "--epochs", "200", "--results-dir",
                             str(results), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            logs = list(results.glob("*/workers/0/worker.log"))
            if logs and "epoch 2:" in logs[0].read_text():
                break
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.5)
        else:
            pytest.fail("training never reached epoch 2")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    run = _only_run(results)
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "interrupted"
    epochs = pd.read_parquet(run / "workers/0/epochs.parquet")
    steps = pd.read_parquet(run / "workers/0/steps.parquet")
    assert 2 <= len(epochs) < 200 and len(steps) >= 2 * 8
    assert len(pd.read_parquet(run / "cpu.parquet")) > 0
