"""The trace window: which steps it covers and how a capture starts, stops and fails (no TensorFlow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.errors import UsageError
from perfkit.profiler.tracewindow import CaptureTarget, TraceCapture, Window, check_spec, later_window, resolve


def test_auto_window_is_ten_steps_early_in_the_second_epoch() -> None:
    assert resolve("auto", 100, 3) == Window(103, 112)
    assert resolve("auto", 8, 2) == Window(11, 16)  # clipped to the epoch's end
    assert resolve("auto", 100, 1) == Window(3, 12)
    assert resolve("auto", 1, 2) == Window(2, 2)
    assert resolve("off", 100, 3) is None
    assert resolve(" 5 - 9 ", 100, 3) == Window(5, 9)


@pytest.mark.parametrize("spec", ["5-x", "0-3", "9-5", "", "1..3"])
def test_bad_window_specs_name_the_flag(spec: str) -> None:
    with pytest.raises(UsageError, match="--profile-steps"):
        check_spec(spec)


def test_window_past_the_last_step_is_refused() -> None:
    with pytest.raises(UsageError, match=r"ends after the last training step \(16 = 2 epochs x 8 steps\)"):
        resolve("10-17", 8, 2)


class FakeProfiler:
    def __init__(self, fail_start: bool = False, write: bool = True) -> None:
        self.calls: list[str] = []
        self.fail_start, self.write, self.logdir = fail_start, write, ""

    def start(self, logdir: str) -> None:
        self.calls.append("start")
        if self.fail_start:
            raise RuntimeError("another profiler session is active")
        self.logdir = logdir

    def stop(self) -> None:
        self.calls.append("stop")
        if self.write:
            out = Path(self.logdir) / "plugins/profile/2026_11_30_12_00_00/vm.xplane.pb"
            out.parent.mkdir(parents=True)
            out.write_bytes(b"xplane")


def _drive(capture: TraceCapture, steps_per_epoch: int, epochs: int, trace: list[str], prof: FakeProfiler,
           stop_after: int | None = None) -> None:
    for e in range(epochs):
        for b in range(steps_per_epoch):
            g = e * steps_per_epoch + b + 1
            capture.step_begin(g)
            trace.append(f"{g}:{'on' if prof.calls[-1:] == ['start'] else 'off'}")
            capture.step_end(g, last_of_epoch=b + 1 == steps_per_epoch)
            if stop_after == g:
                capture.finish()
                return
        capture.epoch_boundary()
    capture.finish()


def _capture(tmp_path: Path, window: Window, prof: FakeProfiler) -> TraceCapture:
    return TraceCapture(window, CaptureTarget(tmp_path, "sess", "hostA-w1"), prof.start, prof.stop)


def test_capture_covers_exactly_the_window_and_lands_under_the_worker_name(tmp_path: Path) -> None:
    prof, seen = FakeProfiler(), []
    capture = _capture(tmp_path, Window(4, 6), prof)
    _drive(capture, 5, 2, seen, prof)
    assert [s for s in seen if s.endswith(":on")] == ["4:on", "5:on", "6:on"]
    assert prof.calls == ["start", "stop"]
    assert capture.result["status"] == "captured"
    assert capture.result["file"] == "tensorboard/plugins/profile/sess/hostA-w1.xplane.pb"
    assert (tmp_path / capture.result["file"]).read_bytes() == b"xplane"
    assert not capture.target.private_dir.exists()


def test_window_at_an_epoch_start_does_not_trace_the_previous_validation(tmp_path: Path) -> None:
    prof, seen = FakeProfiler(), []
    _drive(_capture(tmp_path, Window(6, 10), prof), 5, 2, seen, prof)
    assert [s for s in seen if s.endswith(":on")] == ["6:on", "7:on", "8:on", "9:on", "10:on"]
    assert prof.calls == ["start", "stop"]


def test_a_failing_profiler_is_recorded_not_raised_and_never_stopped(tmp_path: Path) -> None:
    prof = FakeProfiler(fail_start=True)
    capture = _capture(tmp_path, Window(2, 3), prof)
    _drive(capture, 5, 1, [], prof)
    assert prof.calls == ["start"], "a capture stops only what it started"
    assert capture.result["status"] == "failed" and "another profiler session" in capture.result["error"]


def test_no_file_written_is_a_failed_capture(tmp_path: Path) -> None:
    prof = FakeProfiler(write=False)
    capture = _capture(tmp_path, Window(2, 3), prof)
    _drive(capture, 5, 1, [], prof)
    assert capture.result["status"] == "failed" and "no .xplane.pb" in capture.result["error"]


def test_training_ending_inside_the_window_still_stops_and_keeps_the_capture(tmp_path: Path) -> None:
    prof = FakeProfiler()
    capture = _capture(tmp_path, Window(2, 9), prof)
    _drive(capture, 5, 2, [], prof, stop_after=4)
    assert prof.calls == ["start", "stop"] and capture.result["status"] == "captured"


def test_training_ending_before_the_window_is_skipped(tmp_path: Path) -> None:
    prof = FakeProfiler()
    capture = _capture(tmp_path, Window(8, 9), prof)
    _drive(capture, 5, 2, [], prof, stop_after=3)
    assert prof.calls == [] and capture.result["status"] == "skipped"


def test_a_later_window_moves_by_whole_epochs_past_the_steps_done() -> None:
    assert later_window(Window(19, 28), 16, 16, 3) == Window(19, 28)  # not reached yet: unchanged
    assert later_window(Window(19, 28), 20, 16, 3) == Window(35, 44)
    assert later_window(Window(19, 28), 32, 16, 3) == Window(35, 44)
    assert later_window(Window(19, 28), 40, 16, 3) is None  # no epoch left for it


def test_a_failed_capture_is_tried_again_in_the_next_epoch(tmp_path: Path) -> None:
    prof = FakeProfiler(write=False)
    cap = TraceCapture(Window(3, 4), CaptureTarget(tmp_path, "s", "h-w0"), prof.start, prof.stop,
                       retries=1, steps_per_epoch=8, epochs=3)
    for step in range(1, 25):
        if step == 9:
            prof.write = True  # the second attempt succeeds
        cap.step_begin(step)
        cap.step_end(step, last_of_epoch=step % 8 == 0)
        if step % 8 == 0:
            cap.epoch_boundary()
    cap.finish()
    assert cap.result["status"] == "captured" and cap.result["window"] == {"first": 11, "last": 12}
    assert [a["status"] for a in cap.result["attempts"]] == ["failed"]
    assert prof.calls == ["start", "stop", "start", "stop"]


class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


def test_freed_memory_is_poisoned_only_while_the_profiler_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfkit import _libc
    from perfkit.profiler import tracewindow

    libc = FakeLibc()
    monkeypatch.setattr(_libc, "libc", lambda: libc)
    monkeypatch.delenv(tracewindow.POISON_ENV, raising=False)
    with pytest.raises(RuntimeError), tracewindow.freed_memory_poisoned():
        assert libc.calls == [(_libc.M_PERTURB, 0xA5)]
        raise RuntimeError("TF's stop failed")
    assert libc.calls == [(_libc.M_PERTURB, 0xA5), (_libc.M_PERTURB, 0)]  # reset on every way out
    monkeypatch.setenv(tracewindow.POISON_ENV, "0")
    with tracewindow.freed_memory_poisoned():
        pass
    assert len(libc.calls) == 2


def test_poisoning_really_reaches_this_process_malloc() -> None:
    """glibc's M_PERTURB as perfkit sets it: a fresh block comes back filled with the complement."""
    import ctypes

    from perfkit import _libc
    from perfkit.profiler import tracewindow

    libc = _libc.libc()
    if libc is None or not hasattr(libc, "mallopt"):
        pytest.skip("no mallopt in this C library (not glibc): the guard is off here")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    with tracewindow.freed_memory_poisoned():
        p = libc.malloc(4096)  # past the per-thread cache's sizes for a fresh block
        first = ctypes.string_at(p, 16)
        libc.free(p)
    assert first == bytes([0xA5 ^ 0xFF]) * 16
