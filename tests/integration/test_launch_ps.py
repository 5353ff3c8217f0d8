"""`perfkit launch --mode ps` of the parameter-server example, which imports nothing of perfkit: its baseline
(chief + 1 worker + 1 parameter server) and chief + 2 workers with Keras fit, 2 workers with the custom loop
driven by ClusterCoordinator.schedule, then analysed; a worker killed (the run goes on), a parameter server
killed (the run fails naming it), a chief that hangs, and a chief that never builds the strategy."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from tests.integration._util import assert_no_orphans, meta, only_run, perfkit, start, wait_for_status

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "ps_training" / "train.py"
ARGS = ("--epochs", "3", "--steps-per-epoch", "16", "--global-batch", "128", "--units", "64")
LONG = ("--epochs", "10", "--steps-per-epoch", "100", "--global-batch", "128", "--units", "64")
LONG_STEPS = 10 * 100
CHIEF = 3  # task index of the chief with 2 workers and 1 ps: workers, then parameter servers, then the chief


@dataclass(frozen=True)
class Runs:
    baseline: Path
    fit: Path
    custom: Path
    analysis: dict


def _launch(results: Path, workers: int, *script_args: str) -> Path:
    proc = perfkit("launch", "--mode", "ps", "--workers", str(workers), "--ps", "1", "--sample-interval", "0.25",
                   "--results-dir", str(results), "--quiet", "--", sys.executable, str(SCRIPT), *script_args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    results = tmp_path_factory.mktemp("launch-ps")
    baseline = _launch(results, 1, *ARGS)
    fit = _launch(results, 2, *ARGS)
    proc = perfkit("analyze", str(baseline), str(fit), "--results-dir", str(results), "--format", "json", "--no-html")
    assert proc.returncode == 0, proc.stderr[-3000:]
    custom = _launch(tmp_path_factory.mktemp("launch-ps-custom"), 2, *ARGS, "--loop", "custom")
    return Runs(baseline, fit, custom, json.loads(proc.stdout))


def test_every_step_the_chief_scheduled_is_recorded_on_the_worker_that_ran_it(runs: Runs) -> None:
    for run, workers in ((runs.baseline, 1), (runs.fit, 2), (runs.custom, 2)):
        m = meta(run)
        assert m["status"] == "complete" and m["mode"] == "ps" and m["launch"]["recorded"] is True, m.get("error")
        assert m["strategy"] == "ParameterServerStrategy"
        assert [w["role"] for w in m["workers"]] == ["worker"] * workers + ["ps", "chief"]
        assert m["config"]["epochs"] == 3 and m["config"]["steps_per_epoch"] == 16 and m["config"]["batch_size"] == 128
        steps = pd.concat([pd.read_parquet(run / "workers" / str(w) / "steps.parquet") for w in range(workers)])
        assert len(steps) == 3 * 16 and (steps["samples"] == 128).all() and (steps["duration_s"] > 0).all()
        assert sorted(steps.groupby("epoch").size()) == [16, 16, 16]
        chief = workers + 1
        epochs = pd.read_parquet(run / "workers" / str(chief) / "epochs.parquet")
        assert list(epochs["epoch"]) == [0, 1, 2]
        for e, rows in steps.groupby("epoch"):  # each step inside its epoch, on the chief's clock
            ep = epochs[epochs["epoch"] == e].iloc[0]
            assert rows["t_start_ns"].min() >= ep["t_start_ns"] and rows["t_end_ns"].max() <= ep["t_end_ns"]
        log = (run / "workers" / str(chief) / "worker.log").read_text()
        assert "trained 48 steps" in log  # the script's own count: nothing changed what it ran
        coordinator = m["workers"][chief]["plan"]["coordinator"]
        per_worker = [len(pd.read_parquet(run / "workers" / str(w) / "steps.parquet")) for w in range(workers)]
        assert coordinator["steps_per_worker"] == per_worker and coordinator["lost_steps"] == {}
    assert meta(runs.custom)["workers"][CHIEF]["plan"]["step_function"]["name"] == "step_fn"


def test_servers_blocked_in_join_are_stopped_once_the_chief_ends(runs: Runs) -> None:
    m = meta(runs.fit)
    chief = m["workers"][CHIEF]
    assert chief["exit_code"] == 0 and chief["state"] == "done"
    for w in m["workers"][:CHIEF]:  # workers and the ps sit in server.join() until perfkit stops them
        assert w["exit_code"] == -signal.SIGTERM and w["died"] is None


def test_analyze_gives_throughput_against_the_one_worker_baseline_and_every_tasks_cpu(runs: Runs) -> None:
    a = runs.analysis
    assert a["baseline"]["run_id"] == runs.baseline.name and "one worker" in a["baseline"]["chosen"]
    row = next(r for r in a["runs"] if r["run_id"] == runs.fit.name)
    assert row["mode"] == "ps" and row["workers"] == 2 and row["ps"] == 1
    assert row["steady_samples_per_s"] > 0 and row["speedup"] > 0 and row["samples"] == 48 * 128
    shares = [w["step_share"] for w in a["workers"] if w["run_id"] == runs.fit.name]
    assert len(shares) == 2 and abs(sum(shares) - 1) < 1e-9
    roles = {p["role"] for p in a["processes"] if p["run_id"] == runs.fit.name and p["cpu_s"] is not None}
    assert {"worker", "ps", "chief"} <= roles
    assert any("Asynchronous training (2 workers, 1 parameter server)" in line for line in a["verdict"])


def test_the_same_script_without_ps_tasks_trains_synchronously_and_is_set_against_async(runs: Runs) -> None:
    """Without ps tasks in TF_CONFIG the example's fit runs under MultiWorkerMirroredStrategy, and without
    TF_CONFIG alone: the single-mode run becomes the baseline and the strategies table holds all three."""
    results = runs.fit.parent
    for mode in (("--mode", "single"), ("--workers", "2")):
        proc = perfkit("launch", *mode, "--no-profile", "--results-dir", str(results), "--quiet", "--",
                       sys.executable, str(SCRIPT), *ARGS)
        assert proc.returncode == 0, proc.stderr[-3000:]
    out = perfkit("analyze", "--results-dir", str(results), "--format", "json", "--no-html")
    assert out.returncode == 0, out.stderr[-3000:]
    a = json.loads(out.stdout)
    assert a["baseline"]["chosen"].startswith("latest complete single-mode run")
    modes = {m["mode"]: m for m in a["modes"]}
    assert set(modes) == {"single", "multi", "ps"} and modes["multi"]["workers"] == 2
    assert modes["ps"]["epoch_ratio_vs_multi"] > 0
    assert any(line.startswith("Synchronous against asynchronous training") for line in a["verdict"])


def _pid_of(results: Path, role: str, index: int) -> int:
    """A task's process: the launcher's record of its pid is in launch.json's workers (its TF_CONFIG role)."""
    import psutil

    for proc in psutil.process_iter(["pid", "environ"]):
        env = (proc.info.get("environ") or {}).get("TF_CONFIG", "")
        if str(results) in (proc.info.get("environ") or {}).get("PERFKIT_RUN_DIR", "") and \
                json.loads(env or "{}").get("task") == {"type": role, "index": index}:
            return int(proc.info["pid"])
    raise AssertionError(f"no {role} {index} process of {results}")


def _kill_midway(tmp_path: Path, role: str, index: int) -> tuple[str, int, Path]:
    results = tmp_path / "results"
    proc = start("launch", "--mode", "ps", "--workers", "2", "--results-dir", str(results), "--quiet", "--",
                 sys.executable, str(SCRIPT), *LONG)
    try:
        wait_for_status(results, CHIEF, "epochs_done", 1, proc)  # both workers have run steps
        # then into the next epoch's steps: a worker killed mid-epoch has a step in flight for TensorFlow to put
        # back (at the epoch boundary it may be idle, waiting for the chief, and lose none)
        wait_for_status(results, CHIEF, "step", 20, proc, where=lambda status: status.get("epoch", 0) >= 1)
        os.kill(_pid_of(results.resolve(), role, index), signal.SIGKILL)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    return err, proc.returncode, only_run(results)


def test_a_killed_worker_is_named_and_the_chief_goes_on_without_it(tmp_path: Path) -> None:
    err, code, run = _kill_midway(tmp_path, "worker", 1)
    assert code == 0 and "worker 1 (" in err and "SIGKILL" in err and "the run goes on" in err, err[-3000:]
    m = meta(run)
    assert m["status"] == "complete" and m["workers"][1]["died"]["signal"] == "SIGKILL"
    assert m["workers"][0]["died"] is None and m["workers"][CHIEF]["exit_code"] == 0
    lost = m["workers"][CHIEF]["plan"]["coordinator"]["lost_steps"]
    assert lost.get("1", 0) >= 1 and set(lost) == {"1"}, lost  # the step it was running, put back by TensorFlow
    # The script's own count: every scheduled step, plus a lost one whose update reached the ps before its
    # worker died (TensorFlow then ran it again elsewhere).
    trained = re.search(r"trained (\d+) steps", (run / "workers" / str(CHIEF) / "worker.log").read_text())
    assert trained and LONG_STEPS <= int(trained.group(1)) <= LONG_STEPS + lost["1"], trained
    steps = sum(len(pd.read_parquet(run / "workers" / str(w) / "steps.parquet")) for w in (0, 1))
    assert steps == LONG_STEPS
    out = perfkit("analyze", str(run), "--results-dir", str(run.parent), "--format", "json", "--no-html")
    assert out.returncode == 0, out.stderr[-2000:]
    row = json.loads(out.stdout)["runs"][0]
    assert row["workers_died"] == "1 (SIGKILL)" and row["steps_lost"] >= 1
    assert any("died during the run" in line for line in json.loads(out.stdout)["verdict"])
    assert_no_orphans(tmp_path)


def test_a_killed_parameter_server_fails_the_run_and_is_named(tmp_path: Path) -> None:
    killed_at = time.monotonic()
    err, code, run = _kill_midway(tmp_path, "ps", 0)
    assert code == 1 and "ps 0 (" in err and "SIGKILL" in err and "Traceback" not in err, err[-3000:]
    m = meta(run)
    assert m["status"] == "failed" and m["failure"]["worker"] == 2 and m["failure"]["signal"] == "SIGKILL"
    assert time.monotonic() - killed_at < 200
    assert_no_orphans(tmp_path)


HANGING_CHIEF = """
import runpy, sys, threading
import tensorflow as tf
joins = []
original = tf.distribute.coordinator.ClusterCoordinator.join
def join(self):
    original(self)
    joins.append(1)
    if len(joins) == 2:
        threading.Event().wait()  # the chief's main thread stuck in this script's own code
tf.distribute.coordinator.ClusterCoordinator.join = join
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_chief_that_hangs_is_found_by_its_heartbeat(tmp_path: Path) -> None:
    wrapper = tmp_path / "hanging_chief.py"
    wrapper.write_text(HANGING_CHIEF)
    proc = perfkit("launch", "--mode", "ps", "--workers", "1", "--hang-timeout", "6", "--results-dir",
                   str(tmp_path / "r"), "--quiet", "--", sys.executable, str(wrapper), str(SCRIPT), *ARGS,
                   "--loop", "custom", timeout=240)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "chief (" in proc.stderr and "hanging_chief.py" in proc.stderr and "no step ended" in proc.stderr, \
        proc.stderr[-3000:]
    assert_no_orphans(tmp_path)


@pytest.mark.parametrize(("command", "args", "said"), [
    (["-c", "pass"], (), "never trained through tf.distribute.ParameterServerStrategy"),
    (["-c", "import time; time.sleep(120)"], ("--connect-timeout", "6"),
     "a parameter-server script's chief joins when it builds tf.distribute.ParameterServerStrategy"),
])
def test_a_chief_that_never_builds_the_strategy_is_named(tmp_path: Path, command: list[str], args: tuple[str, ...],
                                                         said: str) -> None:
    proc = perfkit("launch", "--mode", "ps", "--workers", "1", *args, "--results-dir", str(tmp_path / "r"),
                   "--quiet", "--", sys.executable, *command, timeout=120)
    assert proc.returncode == 1 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert_no_orphans(tmp_path)
