"""The run's janitor (a real helper process, no training) and the no-namespace path of the sandbox."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import psutil
import pytest

from perfkit.cluster import load_cluster
from perfkit.errors import UsageError
from perfkit.results import RunRecord
from perfkit.trainer.hosts import janitor, netns
from perfkit.trainer.hosts.janitor import Janitor
from perfkit.trainer.worker import guard
from tests import clusters


def test_the_janitor_removes_what_was_registered_when_its_pipe_closes(tmp_path: Path) -> None:
    kept, tmp, run = tmp_path / "kept", tmp_path / "backup", tmp_path / "run" / "tensorboard"
    for d in (kept, tmp, run / ".capture-1", run / ".capture-2", run / "plugins"):
        d.mkdir(parents=True)
    janitor = Janitor()
    janitor.start()
    janitor.register("dir", tmp)
    janitor.register("glob", run / ".capture-*")
    time.sleep(0.3)
    assert tmp.exists(), "nothing is removed while the launcher lives"
    os.kill(janitor._proc.pid, signal.SIGTERM)  # type: ignore[union-attr]  # ignored: only the pipe ends it
    janitor.close(timeout=30)
    assert not tmp.exists() and not list(run.glob(".capture-*"))
    assert kept.exists() and (run / "plugins").exists()


def _pair(tmp_path: Path, link: str = "") -> Path:
    return clusters.write(tmp_path / "pair.toml", clusters.pair(extra=link))


def test_without_namespaces_the_sandbox_says_why(tmp_path: Path) -> None:
    with mock.patch.object(netns, "why_unavailable", return_value="not root (network namespaces need CAP_SYS_ADMIN)"):
        box = netns.Sandbox.create(load_cluster(_pair(tmp_path)), lambda n: None)
        assert box.mechanism == "none" and box.wrap("h0") == []
        assert box.to_dict()["reachable_from_other_machines"] is True and "not root" in box.to_dict()["reason"]
        with pytest.raises(UsageError, match=r"hosts\[0\].link: emulated links need network namespaces.*not root"):
            netns.Sandbox.create(load_cluster(_pair(tmp_path, "link = { bandwidth_mbit = 100 }\n")), lambda n: None)


def test_root_without_cap_sys_admin_falls_back_like_not_root(tmp_path: Path) -> None:
    def refuse(*args: str, ns: str | None = None) -> str:
        raise netns._Failed("`ip netns add pk1x0-0`: mount --make-shared /run/netns failed: Operation not permitted")

    with mock.patch.object(netns, "why_unavailable", return_value=None), mock.patch.object(netns, "_ip", refuse), \
            mock.patch.object(netns, "remove_stale"):
        box = netns.Sandbox.create(load_cluster(_pair(tmp_path)), lambda n: None)
    assert box.mechanism == "none" and "Operation not permitted" in str(box.reason)


# -- a run whose launcher died: the janitor stops its workers and marks it interrupted --------------------

def _running_run(tmp_path: Path, states: dict[int, dict[str, object]]) -> Path:
    from perfkit.results import RunDir, write_json
    from perfkit.runmeta import ClusterRecord, RunMeta

    cluster = ClusterRecord(num_workers=len(states), local_workers=tuple(sorted(states)),
                            tasks=tuple({"index": i, "host": f"h{i}", "endpoint": f"10.0.0.{i}:2000", "role": "worker",
                                         "task": i} for i in sorted(states)))
    run = RunDir.create(tmp_path, "r1", RunMeta.new("r1", mode="multi", config={"profile_steps": "off"},
                                                     cluster=cluster))
    for i, st in states.items():
        write_json(run.worker_dir(i) / "status.json", {"index": i, "anchor_wall_ns": 10 ** 18 + i,
                                                       "anchor_mono_ns": 10 ** 9 + i, **st})
    return run.path


def _deaf_sleeper() -> subprocess.Popen[bytes]:
    """A 'worker' that ignores SIGINT, as one stuck inside TensorFlow does."""
    code = ("import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); "
            "time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


def test_a_run_left_running_ends_interrupted_with_its_workers_last_states(tmp_path: Path) -> None:
    run = _running_run(tmp_path, {0: {"state": "interrupted", "epochs_done": 2},
                                  1: {"state": "training", "epochs_done": 1}})
    stuck = _deaf_sleeper()
    try:
        started = psutil.Process(stuck.pid).create_time()
        items = [{"kind": "run", "value": str(run)},
                 {"kind": "worker", "value": str(stuck.pid), "index": 1, "started": started}]
        assert janitor.finish_run(items, launcher=4242, grace=0.5) == [run]
        assert stuck.wait(timeout=30) == -signal.SIGKILL, "a worker deaf to SIGINT is killed after the grace"
    finally:
        stuck.kill()
        stuck.wait()
    record = RunRecord.load(run)
    assert record.status == "interrupted" and "launcher (pid 4242) ended without finishing" in str(record.run.error)
    assert {w.index: w.state for w in record.run.workers} == {0: "interrupted", 1: "training"}
    assert record.run.worker(1).anchor_wall_ns == 10 ** 18 + 1 and record.run.worker(1).endpoint == "10.0.0.1:2000"
    lost = record.meta["lost"]
    assert any("cpu.parquet" in x for x in lost)
    assert any(x.startswith("worker 1: its steps after epoch 1") for x in lost)
    assert not any(x.startswith("worker 0") for x in lost), "worker 0 saved its steps when interrupted"


def test_a_finished_run_and_a_reused_pid_are_left_alone(tmp_path: Path) -> None:
    from perfkit.results import RunDir
    from perfkit.runmeta import RunMeta

    run = _running_run(tmp_path, {0: {"state": "done", "epochs_done": 3}})
    RunDir(run, RunMeta.parse(json.loads((run / "run.json").read_text()), "run.json")).finish("complete")
    before = (run / "run.json").read_bytes()
    other = _deaf_sleeper()  # a process that reuses a dead worker's pid: same pid, another start time
    try:
        items = [{"kind": "run", "value": str(run)},
                 {"kind": "worker", "value": str(other.pid), "index": 0, "started": 1.0}]
        assert janitor.finish_run(items, launcher=4242, grace=0.2) == []
        assert other.poll() is None, "a process that is not the registered worker was signalled"
    finally:
        other.kill()
        other.wait()
    assert (run / "run.json").read_bytes() == before


def test_the_janitor_finishes_the_run_when_its_launcher_goes_without_a_word(tmp_path: Path) -> None:
    run = _running_run(tmp_path, {0: {"state": "training", "epochs_done": 0}})
    worker = _deaf_sleeper()
    try:
        helper = Janitor(grace_s=0.5)  # a deaf worker: SIGKILLed once its grace is over
        helper.start()
        helper.register("run", run)
        helper.register("worker", worker.pid, index=0, started=psutil.Process(worker.pid).create_time())
        helper.close(timeout=60)  # the pipe closes as when the launcher is killed: nothing else is said
        assert worker.wait(timeout=30) == -signal.SIGKILL
    finally:
        worker.kill()
        worker.wait()
    m = json.loads((run / "run.json").read_text())
    assert m["status"] == "interrupted" and f"(pid {os.getpid()})" in m["error"] and m["ended"]


def test_workers_die_by_sigint_only_where_a_janitor_backs_it_up() -> None:
    assert not guard.has_janitor(os.getpid())
    helper = Janitor()
    helper.start()
    try:
        deadline = time.monotonic() + 30  # the helper's command line is its own once it has started
        while not guard.has_janitor(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert guard.has_janitor(os.getpid())
    finally:
        helper.close(timeout=30)
    assert not guard.has_janitor(os.getpid())
