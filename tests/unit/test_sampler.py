"""The psutil sampler against child processes of known CPU share (no TensorFlow).

The machine may have two cores and other tests running beside these, so figures are medians over
several samples, and a child that reports it did not itself get the CPU it asked for skips the
exact-share assertion rather than failing it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
import psutil
import pytest

from perfkit.errors import UsageError
from perfkit.profiler.sampler import CPU_DTYPES, SYSTEM_DTYPES, Sampler, SamplerResult, Target

pytestmark = [pytest.mark.timeout(60), pytest.mark.solo]  # CPU shares of real spinners

HOST = "test-host"

# Holds its own CPU time at `share` of its wall time (spinning when behind, sleeping when ahead), so its
# CPU% is known even if another process briefly takes the core. Prints "ready", then its achieved share.
DUTY = r"""
import sys, time
share, secs = float(sys.argv[1]), float(sys.argv[2])
print("ready", flush=True)
w0, c0 = time.monotonic(), time.process_time()
while (now := time.monotonic()) - w0 < secs:
    if time.process_time() - c0 < share * (now - w0):
        end = now + 0.002
        while time.monotonic() < end:
            pass
    else:
        time.sleep(0.002)
print(f"{(time.process_time() - c0) / (time.monotonic() - w0) * 100:.1f}", flush=True)
"""

# A process tree `depth` levels deep whose leaf spins for `secs`; each process prints "<depth> <pid>".
TREE = r"""
import os, subprocess, sys, time
depth, secs, code = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
delay = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
print(depth, os.getpid(), flush=True)
if depth:
    time.sleep(delay)
    subprocess.Popen([sys.executable, "-c", code, str(depth - 1), str(secs), code]).wait()
else:
    end = time.monotonic() + secs
    while time.monotonic() < end:
        pass
"""


@contextlib.contextmanager
def spawned(code: str, *args: object) -> Iterator[subprocess.Popen[bytes]]:
    """A `python -c code args` child; it and all its descendants are killed and reaped on exit."""
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE, bufsize=0)
    try:
        yield proc
    finally:
        try:
            descendants = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            descendants = []
        # Deepest first, each waited for, so its parent (still alive, in wait()) reaps it at once.
        for p in reversed(descendants):
            with contextlib.suppress(psutil.Error):
                p.kill()
            psutil.wait_procs([p], timeout=10)
        proc.kill()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def read_lines(proc: subprocess.Popen[bytes], n: int, timeout: float = 15.0) -> list[str]:
    """The child's next `n` lines, without blocking past `timeout` if it never writes them."""
    assert proc.stdout is not None
    fd, buf, deadline = proc.stdout.fileno(), b"", time.monotonic() + timeout
    while buf.count(b"\n") < n:
        left = deadline - time.monotonic()
        assert left > 0 and select.select([fd], [], [], left)[0], f"child wrote {buf!r}, wanted {n} lines"
        chunk = os.read(fd, 4096)
        assert chunk, f"child exited after writing {buf!r}"
        buf += chunk
    return buf.decode().splitlines()[:n]


def skip_if_starved(reported_pct: float, nominal_pct: float) -> None:
    # The child measures its own CPU time; if it did not get its share the machine is overloaded, and
    # comparing the sampler with the nominal figure would test the machine, not the sampler.
    if reported_pct < nominal_pct - 10:
        pytest.skip(f"machine overloaded: the child got {reported_pct:.0f}% CPU, not {nominal_pct:.0f}%")


@dataclass(frozen=True)
class Run:
    result: SamplerResult
    pid: int
    reported_pct: float
    stop_s: float
    latest_mid: dict[int, float]


def sample_duty_child(share: float, sample_s: float, interval: float = 0.2) -> Run:
    with spawned(DUTY, share, sample_s + 0.3) as proc:
        read_lines(proc, 1)
        sampler = Sampler(interval, [Target(proc.pid, 0, "worker", HOST)])
        sampler.start()
        time.sleep(sample_s / 2)
        latest_mid = sampler.latest()
        time.sleep(sample_s / 2)
        t = time.monotonic()
        result = sampler.stop()
        stop_s = time.monotonic() - t
        reported = float(read_lines(proc, 1)[0])
    return Run(result, proc.pid, reported, stop_s, latest_mid)


@pytest.fixture(scope="module")
def spinner_run() -> Run:
    return sample_duty_child(share=1.0, sample_s=2.4)


@pytest.fixture(scope="module")
def half_run() -> Run:
    return sample_duty_child(share=0.5, sample_s=3.0)


def rows_of(result: SamplerResult, pid: int) -> pd.DataFrame:
    return result.cpu[result.cpu.pid == pid].sort_values("t_ns")


# ---------------------------------------------------------------------- known CPU shares


def test_single_thread_spinner_reads_about_100(spinner_run: Run) -> None:
    rows = rows_of(spinner_run.result, spinner_run.pid)
    assert len(rows) >= 6
    skip_if_starved(spinner_run.reported_pct, 100)
    assert abs(statistics.median(rows.cpu_percent) - 100) <= 15, rows.cpu_percent.tolist()


def test_half_duty_child_reads_about_50(half_run: Run) -> None:
    rows = rows_of(half_run.result, half_run.pid)
    assert len(rows) >= 8
    skip_if_starved(half_run.reported_pct, 50)
    assert abs(statistics.median(rows.cpu_percent) - 50) <= 15, rows.cpu_percent.tolist()


def test_rows_carry_the_target_labels_and_process_figures(spinner_run: Run) -> None:
    rows = rows_of(spinner_run.result, spinner_run.pid)
    assert set(rows.worker) == {0} and set(rows.role) == {"worker"} and set(rows.host) == {HOST}
    assert (rows.rss_bytes > 1_000_000).all() and (rows.num_threads >= 1).all()
    assert spinner_run.latest_mid.keys() == {0} and spinner_run.latest_mid[0] > 0


def test_priming_observation_is_not_a_row(spinner_run: Run) -> None:
    rows = rows_of(spinner_run.result, spinner_run.pid)
    # The priming call reads 0.0 whatever the process does; a busy process's rows, the first included,
    # must not (even a spinner starved by a loaded machine reads well above 0).
    assert rows.cpu_percent.iloc[0] > 10
    assert (rows.cpu_percent > 0).all()
    # One row per recorded tick: the priming tick contributes none.
    assert len(rows) == spinner_run.result.stats["samples"]


# ---------------------------------------------------------------------- system, stats, timing


def test_system_frame_has_one_row_per_core_per_tick(spinner_run: Run) -> None:
    system, stats = spinner_run.result.system, spinner_run.result.stats
    cores = psutil.cpu_count(logical=True)
    per_tick = system.groupby("t_ns").core.apply(list)
    assert len(per_tick) == stats["samples"] > 0
    assert all(c == list(range(cores)) for c in per_tick)
    assert system.busy_percent.between(0, 100).all()
    # The spinner keeps at least one core busy.
    assert statistics.median(system.groupby("t_ns").busy_percent.max()) > 50


def test_stats_and_overhead(spinner_run: Run) -> None:
    stats = spinner_run.result.stats
    assert set(stats) == {"interval_s", "samples", "wall_s", "cpu_s", "overhead_pct", "missed_ticks"}
    assert stats["interval_s"] == 0.2
    assert stats["samples"] >= 8
    assert 2.3 <= stats["wall_s"] <= 4.0
    assert stats["cpu_s"] >= 0 and stats["missed_ticks"] >= 0
    assert stats["overhead_pct"] == pytest.approx(stats["cpu_s"] / stats["wall_s"] * 100)
    # Its cost against training is measured side by side in `python -m benchmarks overhead`; here only that the
    # thread sleeps between ticks (one spinning between them reads ~100 on a loaded machine as on a quiet one).
    assert stats["overhead_pct"] < 25


def test_ticks_keep_to_fixed_deadlines(spinner_run: Run) -> None:
    ticks = sorted(set(spinner_run.result.system.t_ns))
    # Every tick lands near first + k * interval: the schedule does not drift by a tick's own duration.
    offsets = [(t - ticks[0]) / 0.2e9 for t in ticks]
    assert all(abs(x - round(x)) < 0.25 for x in offsets), offsets


def test_stop_is_prompt(spinner_run: Run) -> None:
    assert spinner_run.stop_s < 0.2 + 1.0
    sampler = Sampler(interval=3.0, include_children=False)
    sampler.start()
    time.sleep(0.3)
    t = time.monotonic()
    sampler.stop()
    assert time.monotonic() - t < 1.0  # well before the next 3 s deadline


# ---------------------------------------------------------------------- children


def test_children_of_a_watched_process_are_labelled_after_it() -> None:
    # The parent starts its busy child 0.5 s after the first scan, so the periodic re-scan must find it.
    with spawned(TREE, 1, 6.0, TREE, 0.5) as parent:
        read_lines(parent, 1)
        with Sampler(0.2, [Target(parent.pid, 5, "worker", HOST)]) as sampler:
            time.sleep(3.3)
        result = sampler.stop()
    children = result.cpu[result.cpu.pid != parent.pid]
    assert len(children) >= 2, result.cpu
    assert children.pid.nunique() == 1
    assert set(children.role) == {"worker-child"}
    assert set(children.worker) == {5} and set(children.host) == {HOST}
    parent_rows = result.cpu[result.cpu.pid == parent.pid]
    # The busy child's figures, not its idle parent's (medians apart even on a loaded machine).
    assert statistics.median(children.cpu_percent) > statistics.median(parent_rows.cpu_percent) + 10
    assert (children.cpu_percent > 0).all()  # its priming observation left no row
    assert set(parent_rows.role) == {"worker"}


def test_descendants_belong_to_their_nearest_watched_ancestor() -> None:
    # launcher -> worker -> busy grandchild; both launcher and worker are watched.
    with spawned(TREE, 2, 6.0, TREE) as launcher:
        pids = {int(d): int(p) for d, p in (line.split() for line in read_lines(launcher, 3))}
        targets = [Target(pids[2], -1, "launcher", "host-a"), Target(pids[1], 0, "worker", "host-b")]
        with Sampler(0.2, targets) as sampler:
            time.sleep(1.3)
        result = sampler.stop()
    labels = result.cpu.groupby("pid")[["worker", "role", "host"]].agg(set)
    assert set(labels.index) == set(pids.values())
    assert labels.loc[pids[2]].tolist() == [{-1}, {"launcher"}, {"host-a"}]
    assert labels.loc[pids[1]].tolist() == [{0}, {"worker"}, {"host-b"}]  # watched: not "launcher-child"
    assert labels.loc[pids[0]].tolist() == [{0}, {"worker-child"}, {"host-b"}]


def test_children_are_rescanned_at_most_every_couple_of_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = itertools.count()
    real = psutil.Process.children

    def counting(self: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
        next(calls)
        return real(self, recursive=recursive)

    monkeypatch.setattr(psutil.Process, "children", counting)
    with Sampler(0.05, [Target(os.getpid(), 0, "trainer", HOST)]) as sampler:
        time.sleep(1.0)
    assert sampler.stop().stats["samples"] >= 10
    assert next(calls) == 1  # the first tick's scan only


# ---------------------------------------------------------------------- processes coming and going


def test_target_that_exits_is_dropped_quietly(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="perfkit.profiler.sampler")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with spawned(DUTY, 1.0, 0.8) as short:
        read_lines(short, 1)
        targets = [
            Target(short.pid, 0, "worker", HOST),
            Target(os.getpid(), 1, "trainer", HOST),
            Target(gone.pid, 2, "worker", HOST),  # already gone when the sampler starts
        ]
        # `short` is not reaped while sampling: after exiting it is a zombie, which must not read as 0%.
        with Sampler(0.2, targets, include_children=False) as sampler:
            time.sleep(2.0)
            latest = sampler.latest()
        result = sampler.stop()
    short_rows = rows_of(result, short.pid)
    assert 2 <= len(short_rows) <= 6  # its rows until it exited are kept
    assert (short_rows.cpu_percent > 0).all()
    assert result.cpu[result.cpu.pid == os.getpid()].t_ns.max() > short_rows.t_ns.max() + 0.5e9
    assert gone.pid not in set(result.cpu.pid)
    assert set(latest) == {1}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("exited" in r.getMessage() for r in caplog.records)


def test_watch_and_unwatch_while_running() -> None:
    sampler = Sampler(0.1, include_children=False)
    sampler.start()
    try:
        time.sleep(0.25)
        watched_at = time.monotonic_ns()
        sampler.watch(Target(os.getpid(), 3, "trainer", HOST))
        time.sleep(0.6)
        sampler.unwatch(os.getpid())
        unwatched_at = time.monotonic_ns()
        time.sleep(0.35)
    finally:
        result = sampler.stop()
    rows = result.cpu
    assert len(rows) >= 3 and set(rows.worker) == {3}
    assert rows.t_ns.min() > watched_at and rows.t_ns.max() < unwatched_at


# ---------------------------------------------------------------------- edges


def test_stop_without_start_returns_typed_empty_frames() -> None:
    result = Sampler().stop()
    assert list(result.cpu.columns) == [
        "t_ns", "worker", "host", "pid", "role", "cpu_percent", "rss_bytes", "num_threads"
    ]
    assert list(result.system.columns) == ["t_ns", "core", "busy_percent"]
    for frame, dtypes in ((result.cpu, CPU_DTYPES), (result.system, SYSTEM_DTYPES)):
        assert len(frame) == 0
        for column, dtype in dtypes.items():
            assert frame[column].dtype == pd.Series([], dtype=dtype).dtype, column
    assert result.cpu.t_ns.dtype == "int64" and result.cpu.worker.dtype == "int32"
    assert pd.api.types.is_string_dtype(result.cpu.host) and pd.api.types.is_string_dtype(result.cpu.role)
    assert result.stats["samples"] == 0 and result.stats["overhead_pct"] == 0.0


@pytest.mark.parametrize("interval", [0, -0.5, float("nan"), float("inf")])
def test_interval_must_be_positive(interval: float) -> None:
    with pytest.raises(UsageError, match="--sample-interval: must be > 0 seconds"):
        Sampler(interval)


def test_injected_clock_stamps_rows_and_stop_is_repeatable() -> None:
    ticks = itertools.count(1_000)
    with Sampler(0.05, [Target(os.getpid(), 0, "trainer", HOST)], clock=lambda: next(ticks)) as sampler:
        time.sleep(0.4)
    first = sampler.stop()
    assert sampler.stop() is first
    assert len(first.cpu) >= 3
    assert first.cpu.t_ns.between(1_001, 1_100).all() and first.cpu.t_ns.is_monotonic_increasing
    sampler.start()  # a sampler runs once: a second start is ignored, not an error
    assert sampler.stop() is first


def test_a_failing_tick_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def broken_clock() -> int:
        raise RuntimeError("clock broke")

    with Sampler(0.05, [Target(os.getpid(), 0, "trainer", HOST)], clock=broken_clock) as sampler:
        time.sleep(0.3)
    result = sampler.stop()
    assert len(result.cpu) == 0 and result.stats["samples"] == 0
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("perfkit")]
    assert len(warnings) == 1  # once, then quiet
