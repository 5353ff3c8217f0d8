"""When a formed cluster is called hung, and whom it blames (trainer/hang.py), and where a heartbeat says a
thread is (trainer/worker/heartbeat.py): no TensorFlow, no processes."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from perfkit.trainer import hang
from perfkit.trainer.worker.heartbeat import Heartbeat, classify, read_heartbeat, where


def test_the_limit_is_the_connect_timeout_until_every_worker_stepped_then_derived_from_the_longest_pause() -> None:
    p = hang.Progress(None, connect_timeout=120.0)
    p.observe(0, 3, 0.0, [0, 1])
    assert p.limit()[0] == 120.0 and not p.started, "worker 1 has not made a step yet"
    p.observe(1, 3, 0.5, [0, 1])
    assert p.started and p.limit() == (hang.FLOOR_S, p.limit()[1])
    p.observe(0, 9, 6.5, [0, 1])  # a 6 s pause (an epoch's end)
    limit, how = p.limit()
    assert limit == hang.FACTOR * 6.0 and "longest pause" in how
    assert hang.Progress(12.0, 120.0).limit()[0] == 120.0, "before the first step even a fixed limit waits"
    fixed = hang.Progress(12.0, 120.0)
    fixed.observe(0, 5, 1.0, [0])
    assert fixed.limit() == (12.0, "--hang-timeout") and fixed.quiet(4.0) == 3.0


def _seen(index: int, kind: str | None, *, state: str = "sleeping", cpu: float | None = 0.0, age_s: float = 0.0,
          moved_at: float = 0.0) -> hang.Seen:
    beat = None if kind is None else {"t_wall_ns": time.time_ns() - int(age_s * 1e9), "interval_s": 1.0,
                                      "main": {"kind": kind, "file": f"/x/{kind}.py", "line": 3, "function": "f"}}
    return hang.Seen(index, f"worker {index}", state, beat, cpu, 1.0, 0, 5, moved_at)


def test_the_stopped_the_silent_and_the_idle_in_own_code_are_causes_the_rest_wait() -> None:
    now = time.time_ns()
    assert "is stopped" in hang.blame(_seen(0, "tensorflow", state="stopped"), now)
    assert "stopped answering" in hang.blame(_seen(0, "tensorflow", age_s=30), now)
    assert "stuck in its own code (epoch 0, step 5): at user.py:3 in f" in hang.blame(_seen(0, "user"), now)
    assert hang.blame(_seen(0, "user", cpu=90.0), now) is None, "computing in its own code is not stuck"
    assert hang.blame(_seen(0, "tensorflow"), now) is None and hang.blame(_seen(0, None), now) is None


def test_the_worker_whose_progress_stopped_first_is_named_first() -> None:
    live = [_seen(0, "tensorflow"), _seen(1, "user", moved_at=9.0), _seen(2, "user", state="stopped", moved_at=4.0)]
    found = hang.diagnose(live, time.time_ns())
    assert found is not None and found.causes == (2, 1) and found.details["waiting"] == [0]
    assert (found.text.startswith("worker 2 is stopped")
            and found.text.index("worker 1 ") < found.text.index("worker 0 "))
    assert hang.diagnose([_seen(0, "tensorflow"), _seen(1, "tensorflow")], time.time_ns()) is None


def test_where_names_the_innermost_frame_outside_the_standard_library() -> None:
    assert classify(threading.__file__) == "python" and classify(hang.__file__) == "perfkit"
    assert classify("/home/u/train.py") == "user"
    assert classify("/v/lib/python3.11/site-packages/tensorflow/python/eager/execute.py") == "tensorflow"
    here = where(sys._getframe())
    assert (here["kind"] == "user"
            and here["function"] == "test_where_names_the_innermost_frame_outside_the_standard_library")


def test_a_heartbeat_reports_progress_and_a_sleeping_thread_in_its_own_code(tmp_path: Path) -> None:
    got: dict = {}

    def sleeper() -> None:
        beat = Heartbeat(tmp_path / "heartbeat.json", lambda: {"progress": 7, "epoch": 1, "step": 4}, interval=0.05)
        got["hb"] = beat.start()
        time.sleep(0.5)  # the line a stuck script would be on

    t = threading.Thread(target=sleeper)
    t.start()
    time.sleep(0.3)
    beat = read_heartbeat(tmp_path)
    t.join()
    got["hb"].stop()
    assert beat is not None and beat["progress"] == 7 and beat["epoch"] == 1 and beat["step"] == 4
    assert beat["main"]["kind"] == "user" and beat["main"]["function"] == "sleeper", json.dumps(beat)
