"""Real multi-worker clusters of worker processes on loopback, through the `perfkit` command."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from perfkit.analysis.summary import final_attempt
from perfkit.profiler.tracewindow import CRASH_IN_STOP_ENV
from tests import clusters
from tests.integration._util import (
    PERFKIT,
    TINY_MULTI,
    assert_no_orphans,
    meta,
    only_run,
    perfkit,
    require_every_trace,
    run_ok,
    start,
    wait_for_status,
)

pytestmark = pytest.mark.integration

TINY = TINY_MULTI


def _assert_no_orphans(scope: Path) -> None:
    assert_no_orphans(scope)


def test_two_local_workers_record_every_step(tmp_path: Path) -> None:
    run, proc = run_ok(tmp_path / "results", "run", "--mode", "multi", "--workers", "2", *TINY, "--live")
    assert "workers" in proc.stdout and "run directory:" in proc.stdout
    # --live: the workers' view (perfkit watch's) under the bars, its last frame left on the terminal
    view = proc.stdout.split(f"{run.name} running", 1)
    assert len(view) == 2 and "state" in view[1] and "localhost" in view[1], proc.stdout[-3000:]
    m = meta(run)
    assert m["status"] == "complete" and m["strategy"] == "MultiWorkerMirroredStrategy"
    assert m["cluster"]["num_workers"] == 2 and m["cluster"]["cpu_budget"]["mechanism"] == "affinity+thread-caps"
    assert [w["state"] for w in m["workers"]] == ["done", "done"]
    assert all(w["anchor_wall_ns"] and w["host"] for w in m["workers"])
    # TF's profiler crash at capture stop (docs/tf-profiler-crash.md) restarts the cluster from the epoch it
    # was in; that known fault is the only restart this healthy run may have, and the epoch's earlier
    # attempt is kept beside the final one. Every step is then counted in the final attempt.
    assert all(r["profiler_crash"] for r in m.get("restarts") or []), m["restarts"]
    steps_per_epoch = 2048 // 256
    for i in range(2):
        steps = final_attempt(pd.read_parquet(run / f"workers/{i}/steps.parquet").assign(worker=i))
        epochs = final_attempt(pd.read_parquet(run / f"workers/{i}/epochs.parquet").assign(worker=i))
        assert len(steps) == 2 * steps_per_epoch and steps["samples"].eq(128).all()
        assert steps[["epoch", "step"]].drop_duplicates().shape[0] == len(steps)
        assert len(epochs) == 2 and epochs["val_accuracy"].notna().all()
        assert (run / f"workers/{i}/worker.log").stat().st_size > 0
    cpu = pd.read_parquet(run / "cpu.parquet")
    assert set(cpu["worker"]) >= {-1, 0, 1} and cpu.loc[cpu["worker"] >= 0, "cpu_percent"].max() > 20
    _assert_multi_trace(run, m)
    _assert_no_orphans(tmp_path)


def _assert_multi_trace(run: Path, m: dict) -> None:  # type: ignore[type-arg]
    """Every worker captured steps 11-16 into one session, under its own name; all-reduce shows up."""
    tables = require_every_trace(run)
    files = sorted(p.name for p in (run / "tensorboard/plugins/profile" / run.name).glob("*.xplane.pb"))
    assert files == [f"{w['host']}-w{w['index']}.xplane.pb" for w in m["workers"]]
    window = m["profile"]["workers"]["0"]["window"]
    first = window["first"] - 1  # global 1-based -> (epoch, step) 0-based, 8 steps an epoch
    want = [[(first + i) // 8, (first + i) % 8] for i in range(window["last"] - window["first"] + 1)]
    for i in range(2):
        mine = tables.steps[tables.steps["worker"] == i]
        assert mine[["epoch", "step"]].values.tolist() == want
        assert (mine["collective_total_s"] > 0).all() and (mine["compute_s"] > 0).all()
        assert (mine["collectives"] >= 1).all()
        assert tables.checks[str(i)]["within_10pct"], tables.checks[str(i)]


def test_a_worker_killed_inside_the_profiler_is_retried_and_every_trace_is_kept(tmp_path: Path) -> None:
    """The crash TF 2.21's profiler causes in stop() (docs/tf-profiler-crash.md), injected at the same point
    once: the cluster resumes from the last completed epoch and traces the window again."""
    results = tmp_path / "results"
    env = {**os.environ, CRASH_IN_STOP_ENV: str(tmp_path / "crashed-once")}
    proc = subprocess.run([*PERFKIT, "run", "--mode", "multi", "--workers", "2", *TINY, "--results-dir",
                           str(results), "--quiet"], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = only_run(results)
    m = meta(run)
    assert m["status"] == "complete", (m.get("error"), m.get("restarts"))
    assert (tmp_path / "crashed-once").exists(), "the injected crash never ran"
    crashes = [r for r in m["restarts"] if r["profiler_crash"]]
    assert len(crashes) >= 1 and "SIGSEGV" in crashes[0]["after"] and crashes[0]["profile_steps"] == "11-16", \
        m["restarts"]
    for entry in m["profile"]["workers"].values():
        assert entry["status"] == "captured" and entry["attempt"] >= 1, entry
        assert entry["attempts"][0]["status"] == "crashed", entry
    tables = require_every_trace(run)
    assert sorted(tables.steps["worker"].unique()) == [0, 1]
    for w in (0, 1):  # the cross-check reads the traced attempt's step records, not the crashed one's
        assert tables.checks[str(w)]["matched_steps"] == 6 and tables.checks[str(w)]["within_10pct"], tables.checks
    steps = pd.read_parquet(run / "workers/0/steps.parquet")
    # The crashed attempt's records are kept beside the last one's. TF's own crash can strike a retry too
    # (then that retry's records may be lost with it: its workers are stopped, not saved): the last
    # attempt is the one after every restart.
    assert 0 in set(steps["attempt"]) and int(steps["attempt"].max()) == len(m["restarts"]), (
        sorted(set(steps["attempt"])), m["restarts"])
    _assert_no_orphans(tmp_path)


@pytest.mark.solo  # the throttled worker's CPU share against its quota
def test_emulated_unequal_hosts_hold_the_small_host_to_its_budget(tmp_path: Path) -> None:
    cluster = clusters.write(tmp_path / "cluster.toml", clusters.pair((3, 1), ("big", "small"), base_port=20000))
    run, _ = run_ok(tmp_path / "results", "run", "--mode", "multi", "--cluster", str(cluster), *TINY, "--epochs", "4",
                    "--quiet")
    budget = meta(run)["cluster"]["cpu_budget"]
    cores = len(os.sched_getaffinity(0))
    assert budget["emulated"] and budget["host_budgets_cores"]["small"] == pytest.approx(cores / 4)
    # 3:1 on this machine is no whole number of cores: only a quota can hold it, or the run is refused.
    assert budget["mechanism"] in ("cgroup-v1", "cgroup-v2"), budget["quota"]
    applied = budget["applied"]
    assert applied["host_budgets_cores"] == pytest.approx(budget["host_budgets_cores"], rel=0.01)
    assert applied["differs_from_request"] == [] and all(w["alive"] for w in applied["workers"])
    assert {w["worker"]: w["quota_cores"] for w in applied["workers"]} == pytest.approx({0: cores * 0.75,
                                                                                          1: cores * 0.25})
    cpu = pd.read_parquet(run / "cpu.parquet")
    steps = pd.read_parquet(run / "workers/1/steps.parquet")
    window = cpu[(cpu["t_ns"] >= steps["t_start_ns"].min()) & (cpu["t_ns"] <= steps["t_end_ns"].max())]
    small = window[window["host"] == "small"].groupby("t_ns")["cpu_percent"].sum()
    assert len(small) >= 8
    limit = applied["host_budgets_cores"]["small"] * 100
    assert abs(small.mean() - limit) <= 0.10 * limit, f"the throttled worker's mean CPU {small.mean():.1f}% vs {limit}%"
    bases = [Path("/sys/fs/cgroup/cpu/perfkit"), Path("/sys/fs/cgroup/perfkit")]
    assert not [g for b in bases for g in b.glob(f"*-{run.name}-*")], "cgroups must be removed"
    if budget["mechanism"].startswith("cgroup"):
        # The throttled worker computes longest and waits least: its exposed all-reduce is the short one.
        med = require_every_trace(run).steps.groupby("worker").median(numeric_only=True)
        assert med.loc[1, "compute_s"] > med.loc[0, "compute_s"]
        assert med.loc[0, "collective_s"] > med.loc[1, "collective_s"], med


def test_a_worker_that_never_joins_is_named_within_the_timeout(tmp_path: Path) -> None:
    cluster = clusters.write(tmp_path / "cluster.toml", clusters.host("a", base_port=23170),
                             clusters.host("b", base_port=23171))
    t0 = time.monotonic()
    proc = perfkit("run", "--mode", "multi", "--cluster", str(cluster), "--task-index", "0", "--run-id", "lone",
                   "--preset", "tiny", "--connect-timeout", "10", "--results-dir", str(tmp_path / "r"), "--quiet")
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    assert "did not form within 10 s" in line and "1 (b 127.0.0.1:23171)" in line and "0 (a" not in line
    assert elapsed < 90
    m = meta(tmp_path / "r" / "lone--w0")
    assert m["status"] == "failed" and m["failure"]["missing"] == [1] and m["run_id"] == "lone"
    _assert_no_orphans(tmp_path)


def _kill_worker_1(results: Path, after_epochs: int, *args: str, timeout: float) -> tuple[int, str, float]:
    """A 2-worker run whose worker 1 gets SIGKILL after ``after_epochs`` epochs: exit code, stderr and
    the seconds the launcher took to end after the kill."""
    proc = start("run", "--mode", "multi", "--workers", "2", *TINY, *args, "--results-dir", str(results), "--quiet")
    try:
        status = wait_for_status(results, 1, "epochs_done", after_epochs, proc)
        os.kill(status["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        _, err = proc.communicate(timeout=timeout)
        return proc.returncode, err, time.monotonic() - killed_at
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_kill_9_of_a_worker_fails_the_run_and_names_it(tmp_path: Path) -> None:
    results = tmp_path / "results"
    code, err, took = _kill_worker_1(results, 1, "--epochs", "100", "--no-profile", timeout=60)
    assert took < 10
    assert code == 1 and "worker 1" in err and "SIGKILL" in err and "Traceback" not in err
    run = only_run(results)
    m = meta(run)
    assert m["status"] == "failed" and m["failure"]["worker"] == 1 and m["failure"]["signal"] == "SIGKILL"
    assert m["failure"]["last_log_lines"]
    assert len(pd.read_parquet(run / "workers/1/epochs.parquet")) >= 1, "records until the kill are kept"
    assert len(pd.read_parquet(run / "cpu.parquet")) > 0
    assert m["profile"] == {"spec": "off", "workers": {}} and not (run / "tensorboard/plugins").exists()
    _assert_no_orphans(tmp_path)


@pytest.mark.slow
def test_max_restarts_resumes_and_trains_exactly_the_requested_epochs(tmp_path: Path) -> None:
    results = tmp_path / "results"
    # Without a trace window: TF's profiler crash (see profiler_crashed) would add a restart of its own.
    code, err, _ = _kill_worker_1(results, 2, "--epochs", "5", "--max-restarts", "1", "--no-profile", timeout=300)
    assert code == 0, err[-3000:]
    run = only_run(results)
    m = meta(run)
    assert m["status"] == "complete" and len(m["restarts"]) == 1 and "worker 1" in m["restarts"][0]["after"]
    epochs = pd.read_parquet(run / "workers/0/epochs.parquet")
    final = epochs.sort_values("attempt").groupby("epoch").tail(1)
    assert sorted(final["epoch"]) == [0, 1, 2, 3, 4]
    assert final["attempt"].max() == 1 and final.loc[final["epoch"] == 0, "attempt"].item() == 0
    # BackupAndRestore's backups, timed (the goodput ledger's checkpoint saves): one an epoch the attempt ran
    saves = {w["index"]: w["checkpoints"] for w in m["workers"]}
    assert all(s["saves"] >= 3 and s["s"] > 0 for s in saves.values()), saves
    _assert_no_orphans(tmp_path)
