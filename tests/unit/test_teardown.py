"""A worker's end after its last step (trainer/teardown.py) and how the launcher's wait treats it: never a
hang, a limit of its own, a crash in the teardown a warning. Stand-in processes, no TensorFlow."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from perfkit.cluster import local_cluster
from perfkit.events import NullObserver
from perfkit.profiler.sampler import Sampler
from perfkit.results import RunDir
from perfkit.runmeta import RunMeta
from perfkit.trainer import hang, teardown
from perfkit.trainer.hosts.cpubudget import Placement
from perfkit.trainer.processes import Launcher

S = 1_000_000_000


class FakeProc:
    def __init__(self, pid: int, code: int | None = None) -> None:
        self.pid, self.returncode = pid, code

    def poll(self) -> int | None:
        return self.returncode


def _status(state: str, ended_ns: int) -> dict:
    phases = [{"state": "training", "t_wall_ns": ended_ns - 10 * S}, {"state": state, "t_wall_ns": ended_ns}]
    return {"state": state, "t_wall_ns": ended_ns, "phases": phases, "epoch": 2, "step": 15}


def _beat(kind: str) -> dict:
    return {"t_wall_ns": time.time_ns(), "interval_s": 1.0, "progress": 60,
            "main": {"kind": kind, "file": "/v/tf_keras/src/utils/traceback_utils.py", "line": 65,
                     "function": "error_handler"}}


def _seen(index: int, cpu: float) -> hang.Seen:
    return hang.Seen(index, f"worker {index}", "sleeping", _beat("tensorflow"), cpu, 1.0)


def test_a_workers_end_is_timed_from_its_first_state_past_its_steps_to_its_exit() -> None:
    ends = teardown.Ends()
    assert teardown.steps_ended_ns({"state": "training", "t_wall_ns": 5}) is None
    ends.observe(0, _status("finishing", 100 * S), _beat("tensorflow"), None, 101 * S)
    ends.observe(0, {**_status("finishing", 100 * S), "state": "done",
                     "phases": _status("finishing", 100 * S)["phases"] + [{"state": "done", "t_wall_ns": 140 * S}]},
                 _beat("tensorflow"), 0, 150 * S)
    ends.observe(0, _status("done", 100 * S), None, 0, 999 * S)  # a later poll changes nothing
    record = ends.record(0)
    assert record is not None and record["s"] == 50.0 and record["stopped"] is False
    assert record["where"] == "its main thread inside TensorFlow at traceback_utils.py:65 in error_handler"
    notes = ends.notes({0: "worker 0 (h 127.0.0.1:1)"})
    assert notes == ["worker 0 (h 127.0.0.1:1) took 50 s from its last step to exit (its main thread inside "
                     "TensorFlow at traceback_utils.py:65 in error_handler); see docs/troubleshooting.md#slow-exit"]
    assert ends.record(1) is None, "a worker that never passed its steps has no teardown"
    ends.observe(1, _status("finishing", 100 * S), _beat("tensorflow"), 0, 112 * S)
    assert ends.notes({0: "worker 0 (h 127.0.0.1:1)"}) == [
        "2 workers took 12-50 s from their last step to exit (worker 0 (h 127.0.0.1:1): its main thread inside "
        "TensorFlow at traceback_utils.py:65 in error_handler); see docs/troubleshooting.md#slow-exit"], "one line"


def test_a_quick_exit_is_recorded_without_a_warning_and_a_signal_after_the_steps_is_excused() -> None:
    ends = teardown.Ends()
    ends.observe(0, _status("done", 100 * S), None, 0, 101 * S)
    ends.observe(1, _status("done", 100 * S), None, -11, 102 * S)
    ends.observe(2, {"state": "training", "t_wall_ns": 1}, None, -11, 102 * S)
    assert ends.record(0)["s"] == 1.0 and not ends.excused(0)
    assert ends.excused(1) and not ends.excused(2), "only a death after the last step is the teardown's"
    assert ends.notes({}) == ["worker 1 was killed by signal 11 2.0 s after its last step (in its teardown; every "
                              "step it ran is recorded)"]


def test_the_time_to_exit_runs_out_after_finish_s_or_the_ceiling_while_the_worker_computes() -> None:
    ends = teardown.Ends()
    ended = 1000 * S
    for i in (0, 1):
        ends.observe(i, _status("finishing", ended), _beat("tensorflow"), None, ended)
    just_in = ended + int(teardown.FINISH_S * S) - S
    assert ends.overdue([_seen(0, 0.0), _seen(1, 0.0)], just_in) == []
    late = ended + int(teardown.FINISH_S * S) + S
    assert [s.index for s in ends.overdue([_seen(0, 0.0), _seen(1, 95.0)], late)] == [0], "a busy worker has longer"
    assert [s.index for s in ends.overdue([_seen(1, 95.0)], ended + int(hang.CEILING_S * S) + S)] == [1]
    ends.stop([_seen(0, 0.0)], late)
    assert ends.record(0)["stopped"] is True and not ends.excused(0)
    assert ends.notes({})[0].startswith("worker 0 had not exited 301 s after its last step (its main thread inside "
                                        "TensorFlow at traceback_utils.py:65 in error_handler, in fit's teardown")


def _launcher(tmp_path: Path, statuses: list[dict], procs: list, **kw: float) -> Launcher:
    run = RunDir.create(tmp_path, "r", RunMeta.new("r"))
    placements = [Placement(i, "localhost", None, None, None) for i in range(len(statuses))]
    launcher = Launcher(run, local_cluster(len(statuses), 2.0), placements, None, Sampler(0.5), NullObserver(),
                        connect_timeout=60, hang_timeout=0.3, **kw)
    for i, (status, proc) in enumerate(zip(statuses, procs)):
        (run.worker_dir(i) / "status.json").write_text(json.dumps({"index": i, **status}))
        (run.worker_dir(i) / "heartbeat.json").write_text(json.dumps({**_beat("tensorflow"), "progress": 60}))
        launcher.workers[i].proc = proc
    return launcher


@pytest.fixture
def sleepers():
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_workers_past_their_steps_are_not_hung_and_are_stopped_when_their_time_to_exit_runs_out(
        tmp_path: Path, sleepers: list, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(teardown, "FINISH_S", 1.5)
    now = time.time_ns()
    launcher = _launcher(tmp_path, [_status("finishing", now), _status("done", now)], sleepers)
    t0 = time.monotonic()
    assert launcher.wait() is None, "no hang verdict though nothing moved for 5x the hang limit"
    assert 1.0 < time.monotonic() - t0 < 10 and all(p.poll() is not None for p in sleepers)
    records = {w.index: w.teardown for w in launcher.worker_records()}
    assert records[0]["stopped"] and records[1]["stopped"] and records[0]["s"] >= 1.5
    notes = launcher.end_notes()
    assert len(notes) == 2 and "had not exited" in notes[0] and "every step it ran is recorded" in notes[0]


def test_while_one_worker_still_trains_a_quiet_cluster_is_hung(tmp_path: Path, sleepers: list) -> None:
    now = time.time_ns()
    launcher = _launcher(tmp_path, [_status("finishing", now), {"state": "training", "t_wall_ns": now}], sleepers)
    failure = launcher.wait()
    assert failure is not None and "no step ended on any worker" in failure.message


def test_a_signal_after_the_steps_is_a_warning_an_error_code_is_the_scripts_failure(tmp_path: Path) -> None:
    now = time.time_ns()
    crashed = _launcher(tmp_path / "a", [_status("done", now), _status("done", now)], [FakeProc(1, 0), FakeProc(2, -6)])
    assert crashed.wait() is None
    notes = crashed.end_notes()
    assert len(notes) == 1 and notes[0].startswith("worker 1 (") and "was killed by signal 6" in notes[0]
    assert crashed.worker_records()[1].teardown["signal_after_steps"] is True
    failed = _launcher(tmp_path / "b", [_status("done", now), _status("done", now)], [FakeProc(1, 0), FakeProc(2, 1)])
    failure = failed.wait()
    assert failure is not None and "exited with code 1" in failure.message


def test_once_a_peer_exited_0_the_others_are_past_their_steps_though_they_never_said_so(
        tmp_path: Path, sleepers: list, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(teardown, "FINISH_S", 1.5)
    now = time.time_ns()
    training = {"state": "training", "t_wall_ns": now}  # a custom loop says done only at its process's exit
    launcher = _launcher(tmp_path, [training, training], [FakeProc(1, 0), sleepers[0]])
    assert launcher.wait() is None, "a quiet worker whose peer finished is tearing down, not hung"
    record = launcher.worker_records()[1].teardown
    assert record["stopped"] is True and record["s"] >= 1.5
