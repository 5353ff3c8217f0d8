"""`perfkit watch --trace-now`: the request file, a worker's windows asked for beside its scheduled one
(profiler/ondemand.py, with a fake profiler), and the watcher's wait for every worker's answer (clock passed
in)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perfkit.errors import TraceNotTaken, UsageError
from perfkit.live import tracenow
from perfkit.profiler.ondemand import FRESH_S, Captures, OnDemand, read_request
from perfkit.profiler.tracewindow import CaptureTarget, TraceCapture, Window

WALL = 1_900_000_000 * 10**9


class Profiler:
    """A fake profiler: start writes an .xplane.pb where TensorFlow would, stop does nothing."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def make(self, window: Window, target: CaptureTarget, changed: Any) -> TraceCapture:
        def start(logdir: str) -> None:
            self.started.append(target.session)
            out = Path(logdir) / "plugins" / "profile" / "s"
            out.mkdir(parents=True)
            (out / "h.xplane.pb").write_bytes(b"x")

        return TraceCapture(window, target, start, lambda: None, changed)


def _drive(captures: Captures, steps: range) -> None:
    for g in steps:
        captures.step_begin(g)
        captures.step_end(g)


def _asked(tmp_path: Path, clock: list[float], report: list[dict[str, Any]], profiler: Profiler,
           wall: int = WALL) -> OnDemand:
    target = CaptureTarget(tmp_path, "run1", "vm-w0")
    return OnDemand(target, report.append, profiler.make, clock=lambda: clock[0], wall_ns=lambda: wall)


def test_a_request_starts_a_window_at_the_next_step_under_its_own_session(tmp_path: Path) -> None:
    clock, report, profiler = [0.0], [], Profiler()
    captures = Captures(None, _asked(tmp_path, clock, report, profiler))
    _drive(captures, range(1, 4))
    assert profiler.started == []
    assert tracenow.ask(tmp_path, 2, wall_ns=WALL) == 1 and read_request(tmp_path) == (1, 2, WALL)
    clock[0] = 5.0
    _drive(captures, range(4, 8))
    assert profiler.started == ["run1-now1"]
    done = report[-1]["1"]
    assert done["status"] == "captured" and done["window"] == {"first": 4, "last": 5}
    assert (tmp_path / done["file"]).is_file() and done["file"].endswith("run1-now1/vm-w0.xplane.pb")
    _drive(captures, range(8, 10))  # the same request is not taken twice
    assert profiler.started == ["run1-now1"] and tracenow.ask(tmp_path, 1) == 2


def test_a_request_waits_while_the_scheduled_window_runs(tmp_path: Path) -> None:
    clock, report, profiler = [0.0], [], Profiler()
    scheduled = profiler.make(Window(3, 4), CaptureTarget(tmp_path, "run1", "vm-w0"), None)
    captures = Captures(scheduled, _asked(tmp_path, clock, report, profiler))
    tracenow.ask(tmp_path, 1, wall_ns=WALL)
    _drive(captures, range(1, 6))
    assert profiler.started == ["run1", "run1-now1"] and report[-1]["1"]["window"] == {"first": 5, "last": 5}


def test_a_restarted_worker_takes_a_fresh_request_again_not_a_stale_one(tmp_path: Path) -> None:
    tracenow.ask(tmp_path, 1, wall_ns=WALL)
    for age_s, taken in ((FRESH_S / 2, True), (FRESH_S * 2, False)):
        clock, report, profiler = [0.0], [], Profiler()
        captures = Captures(None, _asked(tmp_path, clock, report, profiler, wall=WALL + int(age_s * 1e9)))
        _drive(captures, range(1, 3))
        assert bool(profiler.started) is taken, age_s


def _status(run: Path, worker: int, state: str, traces: dict[str, Any] | None = None) -> None:
    d = run / "workers" / str(worker)
    d.mkdir(parents=True, exist_ok=True)
    (d / "status.json").write_text(json.dumps({"state": state, "traces_now": traces or {}}))


def test_the_watcher_waits_for_every_training_worker_and_names_who_did_not_answer(tmp_path: Path) -> None:
    t = [0.0]

    def sleep(s: float) -> None:
        t[0] += s
        if t[0] >= 1.0:  # worker 0 answers a second later
            _status(tmp_path, 0, "training", {"1": {"status": "captured", "file": "f0", "window": {}}})

    _status(tmp_path, 0, "training")
    _status(tmp_path, 1, "training")
    _status(tmp_path, 2, "done")  # ended: not waited for
    with pytest.raises(TraceNotTaken, match=r"worker 1 took no trace window within 5 s \(request 1"):
        list(tracenow.wait(tmp_path, 1, 5.0, clock=lambda: t[0], sleep=sleep))
    _status(tmp_path, 1, "training", {"1": {"status": "failed", "error": "boom", "window": {}}})
    with pytest.raises(TraceNotTaken, match=r"worker 1: failed \(boom\)"):
        list(tracenow.wait(tmp_path, 1, 5.0, clock=lambda: t[0], sleep=sleep))
    _status(tmp_path, 1, "training", {"1": {"status": "captured", "file": "f1", "window": {}}})
    got = list(tracenow.wait(tmp_path, 1, 5.0, clock=lambda: t[0], sleep=sleep))
    assert [(w, a["file"]) for w, a in got] == [(0, "f0"), (1, "f1")]
    with pytest.raises(UsageError, match="--trace-steps: 0 is not between 1 and 100"):
        tracenow.ask(tmp_path, 0)
