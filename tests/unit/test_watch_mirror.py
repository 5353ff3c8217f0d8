"""A run on SSH hosts watched from the launching host: each host's agent relays its workers' status,
heartbeat and process (``trainer/remote/agent.py``), the launcher mirrors them under ``<results>/.live/``
(``trainer/remote/mirror.py``), and ``perfkit watch`` reads the mirror as it reads a local run, the CPU as
the worker's own host read it. No SSH and no training: the relayed lines are made here."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from typing import Any

from perfkit.cluster import ClusterSpec, HostSpec
from perfkit.live.snapshot import WorkerState
from perfkit.live.watcher import Watcher, find_running
from perfkit.results import LIVE_DIR, RunDir
from perfkit.runmeta import RunMeta
from perfkit.trainer.remote.agent import Relay
from perfkit.trainer.remote.mirror import Mirror

CLUSTER = ClusterSpec((HostSpec("east", "10.0.0.1", 2.0, 1, 20000), HostSpec("west", "10.0.0.2", 1.0, 1, 20000)))


def _live(index: int, cpu_s: float, *, proc: bool = True, age_s: float = 0.2) -> dict[str, Any]:
    now = time.time_ns()
    return {"worker": index, "beat_age_s": age_s,
            "status": {"index": index, "pid": 700 + index, "state": "training", "host": ("east", "west")[index],
                       "epochs": 4, "steps_per_epoch": 10},
            "beat": {"pid": 700 + index, "t_wall_ns": now - 10**12, "interval_s": 1.0, "epoch": 0, "step": 3,
                     "batches": 4, "samples": 128, "progress": 4, "main": {"kind": "tensorflow"}},
            "proc": {"status": "running", "cpu_s": cpu_s, "rss_bytes": 2**28, "create_wall_s": 1.0,
                     "wait_s": 0.0} if proc else None}


def test_the_mirror_is_a_run_perfkit_watch_reads_with_each_hosts_own_process_readings(tmp_path: Path) -> None:
    clock = [100.0]
    mirror = Mirror(tmp_path, "two", CLUSTER, "multi")
    assert mirror.path == tmp_path / LIVE_DIR / "two"
    for i in (0, 1):
        mirror.write(_live(i, cpu_s=10.0))
    # never this machine's /proc: the mirrored process is the one its host read
    watcher = Watcher(mirror.path, clock=lambda: clock[0], procs=lambda pid: None)
    watcher.poll()
    clock[0] += 2.0
    mirror.write(_live(0, cpu_s=12.0))  # 2 s of CPU in 2 s: a whole core
    mirror.write(_live(1, cpu_s=10.5, proc=False))  # its host found it gone
    snap = watcher.poll()
    rows = {r.index: r for r in snap.workers}
    assert (rows[0].host, rows[1].host) == ("east", "west")
    assert rows[0].state is WorkerState.TRAINING and abs(rows[0].cpu_percent - 100.0) < 1e-6
    assert rows[0].rss_bytes == 2**28 and rows[0].budget_cores == 2.0
    assert rows[0].beat_age_s is not None and rows[0].beat_age_s < 5, "its age on its host, not across clocks"
    assert rows[1].state is WorkerState.EXITED
    mirror.close()
    assert not (tmp_path / LIVE_DIR / "two").exists()


def test_watch_finds_the_mirror_not_the_parts_of_the_same_run(tmp_path: Path) -> None:
    """With a shared results directory each host's part runs there too; the mirror holds every worker."""
    mirror = Mirror(tmp_path, "two", CLUSTER, "multi")
    mirror.write(_live(0, cpu_s=1.0))
    part = RunDir.create(tmp_path, "two--east", RunMeta.new("two", mode="multi"))
    assert part.path.is_dir()
    assert find_running(tmp_path) == mirror.path


def test_the_agent_relays_each_workers_status_heartbeat_and_process(tmp_path: Path) -> None:
    wdir = tmp_path / "workers" / "3"
    wdir.mkdir(parents=True)
    (wdir / "status.json").write_text(json.dumps({"pid": os.getpid(), "state": "training"}))
    (wdir / "heartbeat.json").write_text(json.dumps({"pid": os.getpid(), "t_wall_ns": time.time_ns()}))
    out = io.StringIO()
    relay = Relay(out)
    relay._live(wdir, 3)
    relay._live(tmp_path / "workers" / "4", 4)  # nothing written yet: nothing relayed
    relay.close()
    [line] = [json.loads(x)["live"] for x in out.getvalue().splitlines()]
    assert line["worker"] == 3 and line["status"]["state"] == "training" and 0 <= line["beat_age_s"] < 60
    assert line["proc"]["cpu_s"] > 0 and line["proc"]["create_wall_s"] > 0
