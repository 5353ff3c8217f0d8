"""The launcher's wait loop with stand-in worker processes: no TensorFlow, no real workers."""

from __future__ import annotations

import json
import time
from pathlib import Path

from perfkit.cluster import local_cluster
from perfkit.events import NullObserver
from perfkit.profiler.sampler import Sampler
from perfkit.results import RunDir
from perfkit.trainer.hosts.cpubudget import Placement
from perfkit.trainer.processes import Failure, Launcher
from perfkit.trainer.supervise import profiler_crash, supervise


class FakeProc:
    def __init__(self, pid: int, code: int | None = None) -> None:
        self.pid, self.returncode = pid, code

    def poll(self) -> int | None:
        return self.returncode


def _launcher(tmp_path: Path, states: list[dict], codes: list[int | None], **kw: float) -> Launcher:
    run = RunDir.create(tmp_path, "r", {})
    cluster = local_cluster(len(states), 2.0)
    placements = [Placement(i, "localhost", None, None, None) for i in range(len(states))]
    launcher = Launcher(run, cluster, placements, None, Sampler(0.5), NullObserver(), **kw)
    for i, (state, code) in enumerate(zip(states, codes)):
        (run.worker_dir(i) / "status.json").write_text(json.dumps({"index": i, "t_wall_ns": 1, **state}))
        launcher.workers[i].proc = FakeProc(1000 + i, code)  # type: ignore[assignment]
    return launcher


def test_a_formed_cluster_that_stops_reporting_is_a_failure_naming_the_workers(tmp_path: Path) -> None:
    states = [{"state": "training", "epoch": 1, "step": 7}, {"state": "training", "epoch": 1, "step": 7}]
    launcher = _launcher(tmp_path, states, [None, None], connect_timeout=60, stall_timeout=0.5)
    t0 = time.monotonic()
    failure = launcher.wait()
    assert failure is not None and time.monotonic() - t0 < 5
    assert "no worker reported progress for 0.5 s" in failure.message and "epoch 1 step 7" in failure.message
    assert failure.details == {"stalled": [0, 1]}


def test_a_dead_worker_is_named_with_its_exit_code(tmp_path: Path) -> None:
    states = [{"state": "training"}, {"state": "failed", "error": "ValueError: boom"}]
    failure = _launcher(tmp_path, states, [None, 3], connect_timeout=60).wait()
    assert failure is not None and failure.details["worker"] == 1 and failure.details["exit_code"] == 3
    assert "exited with code 3: ValueError: boom" in failure.message


def test_local_workers_stuck_before_connecting_are_named_at_the_connect_timeout(tmp_path: Path) -> None:
    states = [{"state": "connecting"}, {"state": "loading-data"}]
    failure = _launcher(tmp_path, states, [None, None], connect_timeout=0.3).wait()
    assert failure is not None and failure.details == {"missing": [1]}
    assert "did not form within 0.3 s" in failure.message


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

    def worker_records(self) -> list[dict]:
        return [{"index": 0, "profile": {"status": "captured", "file": "x.xplane.pb"}},
                {"index": 1, "profile": {"status": "stopping", "window": {"first": 19, "last": 28}}}]


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
