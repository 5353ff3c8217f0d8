"""The launcher's wait loop with stand-in worker processes: no TensorFlow, no real workers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from perfkit.cluster import local_cluster
from perfkit.events import NullObserver
from perfkit.profiler.sampler import Sampler
from perfkit.results import RunDir
from perfkit.runmeta import RunMeta, WorkerRecord
from perfkit.trainer.faultnaming import Failure
from perfkit.trainer.hosts.cpubudget import Placement
from perfkit.trainer.processes import Launcher
from perfkit.trainer.supervise import profiler_crash, supervise


class FakeProc:
    def __init__(self, pid: int, code: int | None = None) -> None:
        self.pid, self.returncode = pid, code

    def poll(self) -> int | None:
        return self.returncode


class FakeClock:
    """Time that passes only when the launcher sleeps: its connect and hang limits cost no real time."""

    def __init__(self) -> None:
        self.mono, self.wall_ns, self.slept = 1000.0, time.time_ns(), 0.0

    def monotonic(self) -> float:
        return self.mono

    def time_ns(self) -> int:
        return self.wall_ns

    def sleep(self, seconds: float) -> None:
        self.mono += seconds
        self.wall_ns += int(seconds * 1e9)
        self.slept += seconds


def _launcher(tmp_path: Path, states: list[dict], codes: list[int | None], **kw: float) -> Launcher:
    run = RunDir.create(tmp_path, "r", RunMeta.new("r"))
    cluster = local_cluster(len(states), 2.0)
    placements = [Placement(i, "localhost", None, None, None) for i in range(len(states))]
    launcher = Launcher(run, cluster, placements, None, Sampler(0.5), NullObserver(), **kw, clock=FakeClock())
    for i, (state, code) in enumerate(zip(states, codes)):
        (run.worker_dir(i) / "status.json").write_text(json.dumps({"index": i, "t_wall_ns": 1, **state}))
        launcher.workers[i].proc = FakeProc(1000 + i, code)  # type: ignore[assignment]
    return launcher


def _beat(run_dir: Path, index: int, progress: int, kind: str, **where: object) -> None:
    main = {"kind": kind, "file": f"/src/{kind}.py", "line": 7, "function": "f", **where}
    beat = {"pid": 1, "t_wall_ns": time.time_ns(), "interval_s": 1.0, "progress": progress, "main": main}
    (run_dir / "workers" / str(index) / "heartbeat.json").write_text(json.dumps(beat))


def test_a_hung_cluster_names_the_worker_stuck_in_its_own_code_and_the_peer_as_waiting(tmp_path: Path) -> None:
    states = [{"state": "training", "epoch": 1, "step": 7}, {"state": "training", "epoch": 1, "step": 7}]
    launcher = _launcher(tmp_path, states, [None, None], connect_timeout=60, hang_timeout=0.5)
    _beat(launcher.run.path, 0, 40, "tensorflow")
    _beat(launcher.run.path, 1, 39, "user", file="/home/u/train.py", line=31, function="on_train_batch_end")
    t0 = time.monotonic()
    failure = launcher.wait()
    assert failure is not None and time.monotonic() - t0 < 5
    assert 0.5 < launcher.clock.slept < 1.0, "judged by the launcher's clock: a limit and a poll past it"
    assert failure.message.startswith("worker 1 ") and "stuck in its own code (epoch 1, step 7)" in failure.message
    assert "train.py:31 in on_train_batch_end" in failure.message and "worker 0 " in failure.message
    assert "waits for it inside TensorFlow" in failure.message and "(limit 0.5 s: --hang-timeout)" in failure.message
    assert failure.details["hung"] == [1] and failure.details["waiting"] == [0]


def test_a_cluster_without_a_stuck_worker_says_every_worker_waits_in_tensorflow(tmp_path: Path) -> None:
    states = [{"state": "training"}, {"state": "training"}]
    launcher = _launcher(tmp_path, states, [None, None], connect_timeout=60, hang_timeout=0.5)
    for i in (0, 1):
        _beat(launcher.run.path, i, 40, "tensorflow")
    failure = launcher.wait()
    assert failure is not None and failure.details["hung"] == [] and failure.details["waiting"] == [0, 1]
    assert "every worker waits inside TensorFlow and none is stuck in its own code" in failure.message


def test_a_lost_link_is_named_before_a_worker_whose_sampled_stack_looks_stuck(tmp_path: Path, monkeypatch) -> None:
    """CI 2026-12-06: a cut link between emulated hosts, and worker 0's stack sampled in Python code at the hang
    limit: it was named stuck in its own code. The run's network is probed first."""
    import perfkit.trainer.faultnaming as naming

    monkeypatch.setattr(naming, "lost_links", lambda env, cluster: [("fast", "slow")])
    states = [{"state": "training", "epoch": 1, "step": 3}, {"state": "training", "epoch": 1, "step": 3}]
    launcher = _launcher(tmp_path, states, [None, None], connect_timeout=60, hang_timeout=0.5)
    _beat(launcher.run.path, 0, 40, "user", file="/venv/numpy/array.py", line=540, function="__init__")
    _beat(launcher.run.path, 1, 40, "tensorflow")
    failure = launcher.wait()
    assert failure is not None and failure.message.startswith("hosts fast and slow lost each other"), failure
    assert failure.details["lost_links"] == [["fast", "slow"]] and failure.details["hung"] == []


def test_a_peer_that_died_waiting_for_a_stopped_worker_blames_the_stopped_one(tmp_path: Path) -> None:
    stopped = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        states = [{"state": "failed", "error": "UnavailableError: task /job:worker/replica:0/task:1 heartbeat timeout"},
                  {"state": "training", "epoch": 0, "step": 20}]
        launcher = _launcher(tmp_path, states, [1, None], connect_timeout=60)
        launcher.workers[1].proc = stopped  # type: ignore[assignment]
        _beat(launcher.run.path, 1, 40, "tensorflow")
        time.sleep(0.2)  # the kernel reports the state once the signal is delivered
        failure = launcher.wait()
    finally:
        stopped.kill()
        stopped.wait()
    assert failure is not None and failure.message.startswith("worker 1 ")
    assert "is stopped (epoch 0, step 20)" in failure.message and "SIGSTOP" in failure.message
    assert "worker 0 (" in failure.message and "exited with code 1 waiting for it" in failure.message
    assert failure.details["hung"] == [1] and failure.details["worker"] == 0


def test_a_survivor_aborted_by_the_coordination_service_blames_the_peer_stuck_on_a_lock(tmp_path: Path) -> None:
    """CI 2026-12-04: worker 0, starved of CPU beside a peer stuck on a lock, was aborted by TF's
    coordination service after 9 s, before the hang limit; the peer that stopped is the cause."""
    states = [{"state": "failed", "error": "AbortedError: Graph execution error:"},
              {"state": "training", "epoch": 0, "step": 5}]
    launcher = _launcher(tmp_path, states, [1, None], connect_timeout=60)
    _beat(launcher.run.path, 1, 12, "user", file="/src/stuck_script.py", line=29, function="on_train_batch_end")
    failure = launcher.wait()
    assert failure is not None and failure.message.startswith("worker 1 ")
    assert "stuck in its own code (epoch 0, step 5)" in failure.message
    assert "exited with code 1 waiting for it (AbortedError" in failure.message
    assert failure.details["hung"] == [1] and failure.details["worker"] == 0


def test_a_dead_worker_is_named_with_its_exit_code(tmp_path: Path) -> None:
    states = [{"state": "training"}, {"state": "failed", "error": "ValueError: boom"}]
    failure = _launcher(tmp_path, states, [None, 3], connect_timeout=60).wait()
    assert failure is not None and failure.details["worker"] == 1 and failure.details["exit_code"] == 3
    assert "exited with code 3: ValueError: boom" in failure.message


def test_local_workers_stuck_before_connecting_are_named_at_the_connect_timeout(tmp_path: Path) -> None:
    states = [{"state": "connecting"}, {"state": "loading-data"}]
    launcher = _launcher(tmp_path, states, [None, None], connect_timeout=90)
    failure = launcher.wait()
    assert failure is not None and failure.details == {"missing": [1]}
    assert "did not form within 90 s" in failure.message and 90 < launcher.clock.slept <= 90.25


def test_all_workers_exiting_zero_is_success(tmp_path: Path) -> None:
    assert _launcher(tmp_path, [{"state": "done"}] * 2, [0, 0], connect_timeout=60).wait() is None


def test_the_worker_that_died_first_is_blamed_not_the_peer_that_lost_it(tmp_path: Path) -> None:
    states = [{"state": "failed", "error": "UnavailableError: Collective ops is aborted by: connection reset"},
              {"state": "training"}]
    failure = _launcher(tmp_path, states, [1, -9], connect_timeout=60).wait()
    assert failure is not None and failure.details["worker"] == 1 and failure.details["signal"] == "SIGKILL"
    assert failure.details["also_exited"] == [0] and "killed by SIGKILL" in failure.message


class FakeLauncher:
    """Attempts that end as scripted; records what each launch file asked for."""

    def __init__(self, outcomes: list[Failure | None], epochs_done: int = 1) -> None:
        self.outcomes, self.observer, self.launches = list(outcomes), NullObserver(), []
        status = {"steps_per_epoch": 16, "epochs": 3, "epochs_done": epochs_done}
        self.workers = [type("W", (), {"status": dict(status)})() for _ in range(2)]

    def start(self) -> None:
        pass

    def wait(self) -> Failure | None:
        return self.outcomes.pop(0)

    def stop(self) -> None:
        pass

    def interrupt(self) -> None:
        pass

    def worker_records(self) -> list[WorkerRecord]:
        return [WorkerRecord(0, profile={"status": "captured", "file": "x.xplane.pb"}),
                WorkerRecord(1, profile={"status": "stopping", "window": {"first": 19, "last": 28}})]


def _death(signal_name: str | None, profile_state: str | None) -> Failure:
    profile = {"status": profile_state, "window": {"first": 19, "last": 28}} if profile_state else None
    return Failure("failed", "worker 1 was killed by SIGSEGV", {"worker": 1, "signal": signal_name, "profile": profile})


def _supervise(fake: FakeLauncher, retries: int) -> tuple[Failure | None, list[dict]]:
    return supervise(fake, 0, lambda a, spec: fake.launches.append((a, spec)), recover_profiler=True,  # type: ignore[arg-type]
                     profile_retries=retries)


def test_a_crash_inside_the_profiler_without_retries_left_resumes_without_profiling() -> None:
    fake = FakeLauncher([_death("SIGSEGV", "stopping"), None])
    failure, restarts = _supervise(fake, 0)
    assert failure is None
    assert fake.launches == [(0, None), (1, "off")]
    assert restarts[0]["profiler_crash"] and restarts[0]["profiles"]["1"]["status"] == "stopping"


def test_a_crash_inside_the_profiler_traces_the_window_again_while_retries_last() -> None:
    fake = FakeLauncher([_death("SIGSEGV", "stopping"), _death("SIGABRT", "stopping"), _death("SIGSEGV", "stopping"),
                         None])
    failure, restarts = _supervise(fake, 2)
    assert failure is None  # crashes inside the profiler never count against max_restarts (0 here)
    assert fake.launches == [(0, None), (1, "19-28"), (2, "19-28"), (3, "off")]
    assert [r["profile_steps"] for r in restarts] == ["19-28", "19-28", "off"]


def test_a_retry_moves_the_window_past_the_epochs_already_done_or_gives_up() -> None:
    fake = FakeLauncher([_death("SIGSEGV", "stopping"), None], epochs_done=2)  # window 19-28 lies in epoch 2
    _supervise(fake, 3)
    assert fake.launches == [(0, None), (1, "35-44")]
    fake = FakeLauncher([_death("SIGSEGV", "stopping"), None], epochs_done=3)
    _supervise(fake, 3)
    assert fake.launches == [(0, None), (1, "off")]


def test_a_crash_outside_a_capture_or_without_a_signal_is_a_failure() -> None:
    fake = FakeLauncher([_death("SIGSEGV", "capturing"), _death("SIGSEGV", None)])
    failure, _ = _supervise(fake, 0)
    assert failure is not None and fake.launches == [(0, None), (1, "off")]
    for death in (_death("SIGSEGV", "captured"), _death(None, "capturing")):
        fake = FakeLauncher([death])
        failure, _ = _supervise(fake, 3)
        assert failure is death and not profiler_crash(death) and fake.launches == [(0, None)]


def test_captures_come_from_the_last_traced_attempt_with_the_lost_ones_listed() -> None:
    from perfkit.trainer.multi import _captures

    crash = {"profiler_crash": True, "after": "worker 1 was killed by SIGSEGV",
             "profiles": {"0": {"status": "captured", "file": "a.xplane.pb", "attempt": 0},
                          "1": {"status": "stopping", "attempt": 0}}}
    retried = [{"index": 0, "profile": {"status": "captured", "file": "a.xplane.pb", "attempt": 1}},
               {"index": 1, "profile": {"status": "captured", "file": "b.xplane.pb", "attempt": 1}}]
    out = _captures(retried, [crash])
    assert out["1"]["status"] == "captured" and out["1"]["attempt"] == 1
    assert [a["status"] for a in out["1"]["attempts"]] == ["crashed"] and "SIGSEGV" in out["1"]["attempts"][0]["error"]
    assert out["0"]["attempts"][0]["status"] == "crashed"  # its file of attempt 0 went with the crashed attempt
    # No retry left: the crashed attempt is the last that traced; nobody's capture of it counts.
    lost = _captures([{"index": 0, "profile": None}, {"index": 1, "profile": None}], [crash])
    assert {w["status"] for w in lost.values()} == {"crashed"}
    assert _captures([{"index": 0, "profile": {"status": "captured"}}], []) == {"0": {"status": "captured"}}


def test_max_restarts_restarts_after_a_hang_as_after_a_death() -> None:
    hung = Failure("failed", "worker 1 is stuck in its own code ...", {"hung": [1], "waiting": [0]})
    fake = FakeLauncher([hung, None])
    failure, restarts = supervise(fake, 1, lambda a, spec: fake.launches.append((a, spec)))  # type: ignore[arg-type]
    assert failure is None and len(restarts) == 1 and restarts[0]["after"] == hung.message
    assert not restarts[0]["profiler_crash"] and [a for a, _ in fake.launches] == [0, 1]
    fake = FakeLauncher([hung])
    assert supervise(fake, 0, lambda a, spec: None)[0] is hung, "no restart left: the hang is the run's failure"  # type: ignore[arg-type]


def test_a_peers_silence_is_a_consequence_whatever_error_tensorflow_names_it() -> None:
    from perfkit.trainer.faultnaming import is_consequence

    # a cut link: the coordination service's heartbeat RPC timed out (faults bench, CI 2026-12-03)
    assert is_consequence("DeadlineExceededError: Graph execution error:")
    assert is_consequence("UnavailableError: Collective ops is aborted by: connection reset")
    # a survivor the coordination service aborted while its peer sat on a lock (faults bench, CI 2026-12-04)
    assert is_consequence("AbortedError: Graph execution error:")
    assert not is_consequence("ValueError: layer sizes do not match") and not is_consequence(None)


def test_a_host_of_servers_ends_well_when_its_quick_chief_came_and_went_between_two_probes(tmp_path: Path) -> None:
    """A TFJob's worker pod (this host runs a ps cluster's worker 0; the chief is elsewhere): the chief connected,
    trained and left while no probe of its port happened to look. The connection it made to this host's server
    says it was at work, so the pod ends well once the chief is gone, not at the connect timeout as a failure."""
    cluster = local_cluster(1, 2.0, ps=1)  # tasks: worker 0, ps 1, chief 2; only worker 0 is this host's
    run = RunDir.create(tmp_path, "r", RunMeta.new("r"))
    launcher = Launcher(run, cluster, [Placement(0, "localhost", None, None, None)], None, Sampler(0.5),
                        NullObserver(), connect_timeout=60, clock=FakeClock())
    (run.worker_dir(0) / "status.json").write_text(json.dumps({"index": 0, "t_wall_ns": 1, "state": "serving"}))
    launcher.workers[0].proc = FakeProc(os.getpid(), None)  # type: ignore[assignment]  # this namespace's tables
    with socket.socket() as server:  # worker 0's server, and the chief's connection to it
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", cluster.tasks[0].port))
        server.listen()
        with socket.create_connection(("127.0.0.1", cluster.tasks[0].port), timeout=5):
            launcher._probed = launcher.clock.monotonic()  # the last probe was just now: the chief not up yet
            assert not launcher._finished()  # looked while the chief was connected
        # the chief left before the next probe; its port (nothing listens there) answers no more
        launcher.clock.sleep(2.5)
        assert launcher.wait() is None and launcher.clock.slept < 10, "ended well, long before the connect timeout"
