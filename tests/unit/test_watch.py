"""`perfkit watch`'s reading of a run (perfkit/live): worker states from status, heartbeat and process, the
slowest worker from CPU against budget, the run finished or not updated, and the command's one-line errors.
Time and processes are passed in: nothing sleeps and no worker runs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from perfkit.cli import main
from perfkit.errors import UsageError
from perfkit.live import render
from perfkit.live.snapshot import RunState, WorkerState
from perfkit.live.watcher import NAMED_AFTER_S, NOT_UPDATED_S, WINDOW_S, ProcInfo, Watcher, find_running
from tests.unit._analysis_runs import set_meta, write_run

NOW = 1_900_000_000.0  # wall seconds of the first reading
PAIR = (("a", 3.0, 1), ("b", 1.0, 1))  # worker 0 has 3 cores, worker 1 has 1


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def wall_ns(self) -> int:
        return int((NOW + self.t - 100.0) * 1e9)


class Procs:
    """Fake processes: pid -> [status, cpu seconds, seconds waiting for a core]; started with their worker."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.table = clock, {}

    def __call__(self, pid: int) -> ProcInfo | None:
        if pid not in self.table:
            return None
        status, cpu, wait = self.table[pid]
        return ProcInfo(status, cpu, 300 * 2**20, NOW - 60.0, wait)


def _running(tmp_path: Path, hosts: tuple[tuple[str, float, int], ...] = PAIR) -> Path:
    [run] = write_run(tmp_path, "live", hosts=hosts, status="running")
    return run


def _worker(run: Path, index: int, clock: Clock, *, state: str = "training", batches: int = 0, epoch: int = 0,
            step: int | None = None, main: dict[str, Any] | None = None, validating: bool = False,
            beat_age_s: float = 0.0, attempt: int = 0) -> None:
    d = run / "workers" / str(index)
    d.mkdir(parents=True, exist_ok=True)
    wall = clock.wall_ns()
    status = {"index": index, "pid": 500 + index, "state": state, "started_wall_ns": int((NOW - 60.0) * 1e9),
              "host": "ab"[index], "epochs": 10, "steps_per_epoch": 20, "epoch": epoch, "attempt": attempt,
              "phases": [{"state": "training", "t_wall_ns": int((NOW - 50.0) * 1e9)}]}
    beat = {"pid": 500 + index, "t_wall_ns": wall - int(beat_age_s * 1e9), "interval_s": 1.0, "progress": batches,
            "epoch": epoch, "step": step, "batches": batches, "samples": batches * 32, "validating": validating,
            "main": main or {"kind": "tensorflow", "file": "/tf/execute.py", "line": 53, "function": "quick_execute"}}
    for name, value in (("status.json", status), ("heartbeat.json", beat)):
        (d / name).write_text(json.dumps(value))
        os.utime(d / name, (wall / 1e9, wall / 1e9))
    os.utime(run / "run.json", (wall / 1e9, wall / 1e9))


def _watch(run: Path) -> tuple[Watcher, Clock, Procs]:
    clock = Clock()
    procs = Procs(clock)
    procs.table = {500: ["running", 0.0, 0.0], 501: ["running", 0.0, 0.0]}
    return Watcher(run, clock=clock, wall_ns=clock.wall_ns, procs=procs, baseline=("single", 100.0)), clock, procs


def _started(run: Path) -> tuple[Watcher, Clock, Procs]:
    """A watcher after its first reading of both workers, training at step 0."""
    watcher, clock, procs = _watch(run)
    for i in (0, 1):
        _worker(run, i, clock)
    watcher.poll()
    return watcher, clock, procs


def _advance(run: Path, clock: Clock, procs: Procs, seconds: float, cpu: dict[int, float], batches: int,
             wait: dict[int, float] | None = None, **worker: Any) -> None:
    """``seconds`` later: each worker used cpu[i] cores (and waited wait[i] for one) and both ran to
    ``batches``."""
    clock.t += seconds
    for i, cores in cpu.items():
        procs.table[500 + i][1] += cores * seconds
        procs.table[500 + i][2] += (wait or {}).get(i, 0.0) * seconds
        last = max(batches - 1, 0)
        _worker(run, i, clock, batches=batches, step=last % 20 if batches else None, epoch=last // 20, **worker)


def test_the_worker_that_uses_most_of_its_budget_is_the_one_the_others_wait_for(tmp_path: Path) -> None:
    run = _running(tmp_path)
    watcher, clock, procs = _started(run)
    # worker 0: half of its 3 cores; 1: all of its 1. Found from 5 s of history on, named once found in every
    # reading for NAMED_AFTER_S; 4 batches a second from then
    _advance(run, clock, procs, 5.0, {0: 1.5, 1: 0.98}, batches=20)
    assert watcher.poll().slowest is None
    found_for = int(NAMED_AFTER_S)
    for k in range(1, found_for + 1):
        _advance(run, clock, procs, 1.0, {0: 1.5, 1: 0.98}, batches=20 + 4 * k)
        snap = watcher.poll()
        assert (snap.slowest is None) == (k < found_for), k
    w0, w1 = snap.workers
    assert (w0.cpu_percent, w1.cpu_percent) == (pytest.approx(150.0), pytest.approx(98.0))
    assert WINDOW_S <= 5 + found_for  # the window holds only the steady 4 batches a second
    rate = 4.0
    assert (w0.budget_cores, w1.budget_cores) == (3.0, 1.0) and w1.steps_per_s == pytest.approx(rate)
    assert snap.slowest is not None and snap.slowest.worker == 1 and snap.slowest.host == "b"
    assert snap.slowest.others_wait_share == pytest.approx(1 - 0.5 / 0.98)
    assert snap.slowest.wait_s_per_step == pytest.approx((1 - 0.5 / 0.98) / rate)
    assert snap.samples_per_s == pytest.approx(2 * rate * 32) and snap.speedup == pytest.approx(2 * rate * 0.32)
    done = 20 + 4 * found_for  # of 200 batches, in the 50 + 5 + found_for s since training began
    assert snap.eta_s == pytest.approx((200 - done) * (55.0 + found_for) / done)
    line = render.plain_line(snap)
    assert "the others wait for worker 1 (b): 49% of their step" in line and f"{2 * rate * 0.32:.2f}x single" in line
    assert json.loads(render.json_line(snap))["slowest"]["worker"] == 1


def test_a_custom_loop_has_no_eta_but_says_when_its_epoch_ends_once_the_first_has_ended(tmp_path: Path) -> None:
    run = _running(tmp_path)
    watcher, clock, procs = _started(run)
    for i in (0, 1):  # a custom loop: no epoch count, and no epoch length before its first epoch ends
        status = json.loads((run / "workers" / str(i) / "status.json").read_text())
        status.pop("epochs"), status.pop("steps_per_epoch")
        (run / "workers" / str(i) / "status.json").write_text(json.dumps(status))
    snap = watcher.poll()
    assert snap.eta_s is None and snap.epoch_eta_s is None and "ends in" not in render.headline(snap)
    _advance(run, clock, procs, 10.0, {0: 1.0, 1: 1.0}, batches=30)  # epoch 2, 10 of its 20 steps done
    for i in (0, 1):
        path = run / "workers" / str(i) / "status.json"
        status = json.loads(path.read_text())
        status.pop("epochs"), status.pop("steps_per_epoch")
        path.write_text(json.dumps({**status, "plan": {"epochs": 1, "steps_per_epoch": 20}}))  # as loop.py writes
    snap = watcher.poll()
    assert snap.eta_s is None and snap.epoch == 1
    assert snap.epoch_eta_s == pytest.approx((40 - 30) * 60.0 / 30)  # 30 batches in the 60 s since training began
    assert "epoch 2 ends in 20s (the loop declares no epoch count: no ETA)" in render.headline(snap)
    assert json.loads(render.json_line(snap))["epoch_eta_s"] == pytest.approx(20.0)


def test_a_worker_slow_to_exit_after_a_peer_ended_its_steps_is_finishing_not_stuck(tmp_path: Path) -> None:
    run = _running(tmp_path)
    watcher, clock, procs = _started(run)
    user = {"kind": "user", "file": "/job/train.py", "line": 131, "function": "<module>"}  # TF's teardown below it
    _advance(run, clock, procs, 5.0, {0: 1.0, 1: 1.0}, batches=40)
    watcher.poll()
    for _ in range(3):  # no step, idle in its own code for 15 s: stuck, while its peer is alive and training
        _advance(run, clock, procs, 5.0, {0: 0.01, 1: 0.01}, batches=40, main=user)
        snap = watcher.poll()
    assert [r.state for r in snap.workers] == [WorkerState.STUCK, WorkerState.STUCK]
    _worker(run, 1, clock, state="done", batches=40, step=19, epoch=1)  # worker 1 ended its steps: said done
    procs.table.pop(501)
    snap = watcher.poll()
    assert [r.state for r in snap.workers] == [WorkerState.FINISHING, WorkerState.EXITED]
    assert not any(r.state.alarming for r in snap.workers) and "stuck" not in render.headline(snap)


def test_workers_that_keep_pace_name_nobody(tmp_path: Path) -> None:
    run = _running(tmp_path, hosts=(("a", 1.0, 1), ("b", 1.0, 1)))
    watcher, clock, procs = _started(run)
    _advance(run, clock, procs, 5.0, {0: 0.9, 1: 0.85}, batches=20)
    snap = watcher.poll()
    assert snap.slowest is None and "no worker held the others back" in render.headline(snap)


def test_a_stopped_process_and_a_silent_heartbeat_are_named_at_once(tmp_path: Path) -> None:
    run = _running(tmp_path)
    watcher, clock, procs = _started(run)
    procs.table[501][0] = "stopped"
    _advance(run, clock, procs, 1.0, {0: 0.0}, batches=0)
    snap = watcher.poll()
    assert snap.workers[1].state is WorkerState.STOPPED and snap.workers[0].state is WorkerState.TRAINING
    assert "worker 1 (b) stopped at execute.py:53 in quick_execute: the others wait for it" in render.headline(snap)
    procs.table[501][0] = "running"
    clock.t += 6.0
    _worker(run, 0, clock)
    snap = watcher.poll()  # worker 1's heartbeat is 7 s old now
    assert snap.workers[1].state is WorkerState.NOT_ANSWERING and snap.workers[1].beat_age_s == pytest.approx(7.0)


def test_idle_in_its_own_code_with_no_step_for_10_s_is_stuck(tmp_path: Path) -> None:
    run = _running(tmp_path)
    watcher, clock, procs = _watch(run)
    own = {"kind": "user", "file": "/home/me/train.py", "line": 12, "function": "main"}
    for i in (0, 1):
        _worker(run, i, clock, batches=5, main=own if i == 1 else None)
    assert watcher.poll().workers[1].state is WorkerState.TRAINING
    _advance(run, clock, procs, 5.0, {0: 0.01, 1: 0.0}, batches=5, main=own)
    assert watcher.poll().workers[1].state is WorkerState.TRAINING  # 5 s without a step: not yet
    _advance(run, clock, procs, 5.0, {0: 0.01, 1: 0.0}, batches=5, main=own)
    snap = watcher.poll()
    assert snap.workers[1].state is WorkerState.STUCK and snap.workers[1].where == "at train.py:12 in main"


def test_validation_an_exited_worker_and_a_restart(tmp_path: Path) -> None:
    run = _running(tmp_path)
    watcher, clock, procs = _watch(run)
    _worker(run, 0, clock, batches=40, validating=True)
    _worker(run, 1, clock, batches=40, state="done")
    snap = watcher.poll()
    assert [w.state for w in snap.workers] == [WorkerState.VALIDATING, WorkerState.EXITED]
    del procs.table[500]  # worker 0's process gone, though its status says training
    clock.t += 1.0
    _worker(run, 0, clock, batches=3, attempt=1)  # and counting from zero again: no negative rate
    snap = watcher.poll()
    assert snap.workers[0].state is WorkerState.EXITED and snap.workers[0].steps_per_s is None


def test_a_finished_run_and_one_that_stopped_moving(tmp_path: Path) -> None:
    run = _running(tmp_path)
    watcher, clock, _ = _watch(run)
    for i in (0, 1):
        _worker(run, i, clock)
    clock.t += NOT_UPDATED_S + 5
    snap = watcher.poll()
    assert snap.state is RunState.NOT_UPDATED and snap.slowest is None and snap.eta_s is None
    assert render.plain_line(snap).startswith(f"live not updated for {NOT_UPDATED_S + 5:.0f} s")
    set_meta(run, status="complete")
    snap = watcher.poll()
    assert snap.state is RunState.FINISHED and render.plain_line(snap) == \
        "live has finished (complete): perfkit analyze live"


def test_the_running_run_is_found_or_the_choice_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no run is running under .* perfkit watch RUN_DIR"):
        find_running(tmp_path)
    [done] = write_run(tmp_path, "done", status="complete")
    one = _running(tmp_path)
    now = time.time()
    assert find_running(tmp_path, now) == one and done.is_dir()
    write_run(tmp_path, "other", status="running")
    with pytest.raises(UsageError, match=r"2 runs are running under .* \(live, other\); name one"):
        find_running(tmp_path, now)
    with pytest.raises(UsageError, match="no run is running"):  # both say running, neither moved for long
        find_running(tmp_path, now + NOT_UPDATED_S + 60)


def test_the_command_says_in_one_line_what_to_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--results-dir", str(tmp_path / "none")]) == 2
    assert "--results-dir" in capsys.readouterr().err
    assert main(["watch", "nope", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'nope' is not a run directory" in err
    assert main(["watch", "x", "--interval", "0"]) == 2
    assert "--interval: 0 is not between 0.2 and 60" in capsys.readouterr().err
    [done] = write_run(tmp_path, "done", status="complete")
    assert main(["watch", str(done)]) == 0
    assert capsys.readouterr().out.strip() == "done has finished (complete): perfkit analyze done"
    assert main(["watch", "done", "--results-dir", str(tmp_path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "finished"


def test_live_and_quiet_exclude_each_other_and_live_is_no_json(capsys: pytest.CaptureFixture[str]) -> None:
    from perfkit.cli._shared import Display

    assert Display.of(False, True) is Display.LIVE and Display.of(True) is Display.QUIET
    with pytest.raises(UsageError, match="--live/--quiet: give one of them"):
        Display.of(True, True)
    assert main(["sweep", "--workers", "1,2", "--preset", "tiny", "--live", "--format", "json"]) == 2
    assert "--live: not with --format json" in capsys.readouterr().err


def test_a_host_slower_than_its_recorded_budget_is_named_by_its_wait_for_a_core(tmp_path: Path) -> None:
    """Host b's budget cut behind the run's back: both workers use a quarter of a core (one computes, one
    sleeps in the all-reduce), but b's threads wait for a core the rest of the time."""
    run = _running(tmp_path, hosts=(("a", 1.0, 1), ("b", 1.0, 1)))
    watcher, clock, procs = _started(run)
    for k in range(int(NAMED_AFTER_S) + 1):  # 5 s to the 10th batch, then 2 a second until named
        _advance(run, clock, procs, 5.0 if k == 0 else 1.0, {0: 0.23, 1: 0.24}, batches=10 + 2 * k,
                 wait={0: 0.05, 1: 0.9})
        snap = watcher.poll()
    assert snap.workers[1].cpu_wait_percent == pytest.approx(90.0)
    assert snap.slowest is not None and snap.slowest.worker == 1
    assert snap.slowest.others_wait_share == pytest.approx(1 - 0.28 / 1.14)
    assert "w1 b training e2 s20 2.0 st/s cpu 24%+90% waiting/100%" in render.plain_line(snap)


def test_a_run_whose_workers_wrote_no_status_says_so(tmp_path: Path) -> None:
    run = _running(tmp_path)  # its workers' folders hold records, no status or heartbeat
    watcher, clock, _ = _watch(run)
    os.utime(run / "run.json", (clock.wall_ns() / 1e9,) * 2)
    snap = watcher.poll()
    assert snap.workers == () and "no worker has written its status yet" in render.headline(snap)


def test_a_quiet_run_whose_launcher_lives_is_still_running(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    started = datetime.fromtimestamp(NOW - 100, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    [run] = write_run(tmp_path, "quiet", hosts=PAIR, status="running", started=started)
    (run / "launch.json").write_text(json.dumps({"launcher_pid": 700}))
    watcher, clock, procs = _started(run)
    procs.table[700] = ["sleeping", 1.0, 0.0]  # created at NOW - 60: 40 s after the run began
    clock.t += NOT_UPDATED_S + 5
    assert watcher.poll().state is RunState.NOT_UPDATED  # a process started after the run is not its launcher
    [run2] = write_run(tmp_path, "quiet2", hosts=PAIR, status="running",
                       started=datetime.fromtimestamp(NOW - 30, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z"))
    (run2 / "launch.json").write_text(json.dumps({"launcher_pid": 700}))
    watcher2, clock2, procs2 = _started(run2)
    procs2.table[700] = ["sleeping", 1.0, 0.0]
    clock2.t += NOT_UPDATED_S + 5
    assert watcher2.poll().state is RunState.RUNNING  # a long epoch: its launcher still runs
    del procs2.table[700]
    assert watcher2.poll().state is RunState.NOT_UPDATED


def test_lines_for_a_log_stop_after_the_run_stays_not_updated(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from perfkit.cli import watch as watch_cli
    from perfkit.errors import RunFailed

    run = _running(tmp_path)
    watcher, clock, _ = _started(run)
    clock.t += NOT_UPDATED_S + 1

    def sleep(seconds: float) -> None:
        clock.t += seconds

    with pytest.raises(RunFailed, match=r"live: not updated for \d+ s and its launcher is not running here"):
        watch_cli._lines(watcher, render.plain_line, 60.0, clock=clock, sleep=sleep)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == watch_cli.GIVE_UP_S / 60 + 1 and all("not updated for" in x for x in lines)


@pytest.mark.parametrize("width", [60, 80, 200])
def test_the_view_drops_whole_columns_to_fit_the_terminal_and_keeps_every_host_name(tmp_path: Path,
                                                                                    width: int) -> None:
    from rich.console import Console

    run = _running(tmp_path, hosts=(("east-rack-04", 3.0, 1), ("west-rack-11", 1.0, 1)))
    watcher, clock, procs = _started(run)
    _advance(run, clock, procs, 5.0, {0: 1.5, 1: 0.98}, batches=20)
    for i, host in enumerate(("east-rack-04", "west-rack-11")):  # the status names its host, as a worker does
        status = run / "workers" / str(i) / "status.json"
        status.write_text(json.dumps({**json.loads(status.read_text()), "host": host}))
    console = Console(width=width, record=True, color_system=None)
    console.print(render.view(watcher.poll()))
    drawn = console.export_text()
    header = next(line for line in drawn.splitlines() if line.startswith("worker"))
    shown = header.replace("┃", " ").split()
    assert "east-rack-04" in drawn and "west-rack-11" in drawn and "…" not in drawn
    assert shown[:3] == ["worker", "host", "state"] and max(len(line) for line in drawn.splitlines()[1:]) <= width
    assert len(shown) == 11 if width == 200 else 3 < len(shown) < 11, shown
