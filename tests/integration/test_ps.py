"""ParameterServerStrategy runs through the `perfkit` command: a chief, workers and parameter servers on
loopback (in the run's own network namespace), or on emulated hosts held to their CPU budgets."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pandas as pd
import pytest

from tests import clusters
from tests.integration._util import (
    TINY_MULTI,
    assert_no_orphans,
    meta,
    only_run,
    perfkit,
    run_ok,
    start,
    wait_for_status,
)

pytestmark = pytest.mark.integration

TINY = TINY_MULTI
PAIR = clusters.host("fast", "127.0.0.1", 3, ps=1, chief=True) + clusters.host("slow", "127.0.0.2", 1)


def test_a_ps_run_records_every_workers_steps_and_the_chiefs_epochs(tmp_path: Path) -> None:
    results = tmp_path / "results"
    run, _ = run_ok(results, "run", "--mode", "ps", "--workers", "2", *TINY)
    m = meta(run)
    assert m["status"] == "complete" and m["mode"] == "ps" and m["strategy"] == "ParameterServerStrategy"
    assert [(w["role"], w["task"]) for w in m["workers"]] == [("worker", 0), ("worker", 1), ("ps", 0), ("chief", 0)]
    assert [w["state"] for w in m["workers"]] == ["stopped", "stopped", "stopped", "done"]
    assert m["profile"]["spec"] == "off"
    spe = 2048 // 256  # each step is one worker's step on the whole global batch
    steps = [pd.read_parquet(run / f"workers/{i}/steps.parquet") for i in range(2)]
    assert sum(len(s) for s in steps) == 2 * spe and all(len(s) >= 1 for s in steps)
    for s in steps:
        assert s["samples"].eq(256).all() and (s["duration_s"] > 0).all() and (s["duration_s"] < 30).all()
        assert s["epoch"].isin([0, 1]).all()
    epochs = pd.read_parquet(run / "workers/3/epochs.parquet")
    assert len(epochs) == 2 and epochs["val_accuracy"].notna().all() and (epochs["train_s"] > 0).all()
    # The steps lie inside their epochs' training time on the chief's clock.
    for s in steps:
        for e, rows in s.groupby("epoch"):
            ep = epochs[epochs["epoch"] == e].iloc[0]
            assert rows["t_start_ns"].min() >= ep["t_start_ns"] - 50_000_000
            assert rows["t_end_ns"].max() <= ep["t_start_ns"] + ep["train_s"] * 1e9 + 50_000_000
    cpu = pd.read_parquet(run / "cpu.parquet")
    roles = cpu.groupby("worker", observed=True)["role"].first().astype(str).to_dict()
    assert roles == {-1: "launcher", 0: "worker", 1: "worker", 2: "ps", 3: "chief"} or \
        {k: v for k, v in roles.items() if k >= 0} == {0: "worker", 1: "worker", 2: "ps", 3: "chief"}
    out = perfkit("analyze", str(run), "--results-dir", str(results), "--format", "json", "--output",
                  str(tmp_path / "a.json"))
    assert out.returncode == 0, out.stderr[-2000:]
    a = json.loads((tmp_path / "a.json").read_text())
    row = a["runs"][0]
    assert row["mode"] == "ps" and row["ps"] == 1 and row["samples"] == 2 * spe * 256
    assert abs(sum(w["step_share"] for w in a["workers"]) - 1) < 1e-9
    assert any("Asynchronous training (2 workers, 1 parameter server)" in line for line in a["verdict"])
    assert_no_orphans(tmp_path)


@pytest.mark.solo  # the throttled worker's share of the steps
def test_the_throttled_worker_runs_fewer_steps_instead_of_slowing_the_other(tmp_path: Path) -> None:
    cluster = tmp_path / "pair-ps.toml"
    cluster.write_text(PAIR)
    run, _ = run_ok(tmp_path / "results", "run", "--mode", "ps", "--cluster", str(cluster), *TINY, "--train-players",
                    "8192", "--quiet")
    m = meta(run)
    assert m["cluster"]["emulated"] and m["cluster"]["cpu_budget"]["host_budgets_cores"] == {"fast": 1.5, "slow": 0.5}
    fast, slow = (len(pd.read_parquet(run / f"workers/{i}/steps.parquet")) for i in (0, 1))
    assert fast + slow == 2 * 8192 // 256
    # At a third of the fast host's budget (shared there with the ps and the chief) the slow worker ran
    # 30% of the steps in the runs this was written from; 40% leaves room for noise, not for equal shares.
    assert slow / (fast + slow) < 0.40, (fast, slow)
    assert_no_orphans(tmp_path)


def test_a_killed_parameter_server_fails_the_run_and_is_named(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = start("run", "--mode", "ps", "--workers", "2", *TINY, "--epochs", "60", "--results-dir", str(results),
                 "--quiet")
    try:
        wait_for_status(results, 3, "epochs_done", 1, proc)  # the chief finished an epoch
        ps = json.loads(next(results.glob("*/workers/2/status.json")).read_text())
        os.kill(ps["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - killed_at < 15
    assert proc.returncode == 1 and "ps 0 (" in err and "SIGKILL" in err and "Traceback" not in err, err[-2000:]
    m = meta(only_run(results))
    assert m["status"] == "failed" and m["failure"]["worker"] == 2 and m["failure"]["signal"] == "SIGKILL"
    assert_no_orphans(tmp_path)


def test_a_killed_worker_is_named_and_the_run_goes_on_without_it(tmp_path: Path) -> None:
    """The same policy as a launched script's (trainer/lostworkers.py): TensorFlow's coordinator runs a dead
    worker's steps on the others."""
    results = tmp_path / "results"
    proc = start("run", "--mode", "ps", "--workers", "2", *TINY, "--epochs", "8", "--results-dir", str(results),
                 "--quiet")
    try:
        wait_for_status(results, 3, "epochs_done", 1, proc)
        worker = json.loads(next(results.glob("*/workers/1/status.json")).read_text())
        os.kill(worker["pid"], signal.SIGKILL)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "worker 1 (" in err and "the run goes on" in err, err[-2000:]
    m = meta(only_run(results))
    assert m["status"] == "complete" and m["workers"][1]["died"]["signal"] == "SIGKILL"
    epochs = pd.read_parquet(only_run(results) / "workers/3/epochs.parquet")
    assert list(epochs["epoch"]) == list(range(8))
    assert_no_orphans(tmp_path)


@pytest.mark.parametrize(("hosts", "args", "message"), [
    (clusters.host("a", cores=2, workers=2, chief=True), (), "needs at least one parameter server: add ps = 1"),
    (clusters.host("a", cores=2, workers=2, ps=1), (), "needs the chief's host: add chief = true"),
    (clusters.host("a", ps=4, chief=True) + clusters.host("b", "127.0.0.2", 9), (), "host a has 6 processes"),
    (clusters.host("a", cores=2, workers=2, ps=1, chief=True), ("--ps", "2"), "--ps: not with --cluster"),
])
def test_bad_ps_clusters_are_one_line_errors(tmp_path: Path, hosts: str, args: tuple[str, ...], message: str) -> None:
    cluster = tmp_path / "c.toml"
    cluster.write_text(hosts)
    proc = perfkit("run", "--mode", "ps", "--cluster", str(cluster), *args, "--results-dir", str(tmp_path / "r"))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").glob("*/run.json"))


def test_a_host_that_runs_only_servers_waits_for_its_chief_with_a_timeout_that_names_it(tmp_path: Path) -> None:
    cluster = tmp_path / "two.toml"
    clusters.write(cluster, clusters.host("a", ps=1, chief=True, base_port=23400),
                   clusters.host("b", "127.0.0.2", base_port=23500))
    proc = perfkit("run", "--mode", "ps", "--cluster", str(cluster), "--host", "b", "--run-id", "lone", "--preset",
                   "tiny", "--connect-timeout", "10", "--results-dir", str(tmp_path / "r"), "--quiet")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "did not form within 10 s" in proc.stderr and "chief (a 127.0.0.1:23402)" in proc.stderr, proc.stderr
    assert_no_orphans(tmp_path)
