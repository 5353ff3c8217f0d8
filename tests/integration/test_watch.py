"""`perfkit watch` on a real 2-worker run while it trains: a SIGSTOPped worker named within 3 s, the live view
in a pseudo-terminal left with `q` while the run goes on, `--trace-now` giving both workers a trace window;
then Ctrl-C stops the run (every worker, marked interrupted) and the watcher says it finished, in one line.
One run serves the module, in that order."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.integration._util import (
    PERFKIT,
    TINY_MULTI,
    assert_no_orphans,
    meta,
    only_run,
    perfkit,
    start,
    wait_for_status,
    worker_processes,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A 2-worker run of 100 epochs, past its first epoch; killed at the end if a test left it running. One
    restart allowed: TensorFlow's profiler can crash a worker at a capture's stop (docs/tf-profiler-crash.md),
    and the restarted cluster takes a fresh --trace-now request again."""
    results = tmp_path_factory.mktemp("watched") / "results"
    proc = start("run", "--mode", "multi", "--workers", "2", *TINY_MULTI, "--epochs", "100", "--max-restarts", "1",
                 "--results-dir", str(results), "--quiet")
    try:
        wait_for_status(results, 0, "epochs_done", 1, proc)
        yield results, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)


def _lines(proc: subprocess.Popen[str], deadline: float) -> Iterator[dict]:  # type: ignore[type-arg]
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return
        line = proc.stdout.readline()
        if not line:
            return
        yield json.loads(line)


def test_a_stopped_worker_is_named_within_3_s(training: tuple[Path, subprocess.Popen[str]]) -> None:
    results, _ = training
    run = only_run(results)
    watch = subprocess.Popen([*PERFKIT, "watch", str(run), "--format", "json", "--interval", "0.5"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = next(s for s in _lines(watch, time.monotonic() + 60)
                    if [w["state"] for w in s["workers"]] == ["training", "training"] and s["samples_per_s"])
        assert seen["state"] == "running" and seen["epochs"] == 100 and seen["workers"][1]["cpu_percent"] is not None
        pid = seen["workers"][1]["pid"]
        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            named = next((s for s in _lines(watch, stopped_at + 10) if s["workers"][1]["state"] == "stopped"), None)
            took = time.monotonic() - stopped_at
        finally:
            os.kill(pid, signal.SIGCONT)
        assert named is not None, "worker 1 was never shown stopped"
        assert took <= 3.0, f"worker 1 shown stopped after {took:.1f} s"
        assert named["workers"][0]["state"] != "stopped"
    finally:
        watch.terminate()
        watch.communicate(timeout=30)
    assert meta(run)["status"] == "running", "the watcher left the run as it was"


def test_the_live_view_in_a_terminal_leaves_on_q(training: tuple[Path, subprocess.Popen[str]]) -> None:
    results, proc = training
    primary, secondary = os.openpty()
    watch = subprocess.Popen([*PERFKIT, "watch", "--results-dir", str(results)], stdin=secondary,
                             stdout=secondary, stderr=secondary, env={**os.environ, "COLUMNS": "140"})
    os.close(secondary)
    screen = b""
    try:
        deadline = time.monotonic() + 60
        while b"training" not in screen or b"steps/s" not in screen:
            assert time.monotonic() < deadline, screen.decode(errors="replace")[-2000:]
            if select.select([primary], [], [], 1.0)[0]:
                screen += os.read(primary, 65536)
        os.write(primary, b"q")
        assert watch.wait(timeout=15) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
        os.close(primary)
    text = screen.decode(errors="replace")
    assert "worker" in text and "localhost" in text and "q or Ctrl-C leaves" in text, text[-2000:]
    assert proc.poll() is None and meta(only_run(results))["status"] == "running"


def test_trace_now_gives_every_worker_a_trace_window(training: tuple[Path, subprocess.Popen[str]]) -> None:
    results, _ = training
    run = only_run(results)
    proc = perfkit("watch", str(run), "--trace-now", "--trace-steps", "2", timeout=200)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    lines = [line for line in proc.stdout.splitlines() if line.startswith("worker ")]
    assert len(lines) == 2 and all(": captured steps " in line for line in lines), proc.stdout
    for w in (0, 1):
        taken = json.loads((run / "workers" / str(w) / "status.json").read_text())["traces_now"]
        [(rid, got)] = taken.items()
        assert got["status"] == "captured" and got["window"]["last"] - got["window"]["first"] == 1
        assert (run / got["file"]).stat().st_size > 0 and f"-now{rid}/" in got["file"]
    assert meta(run)["status"] == "running"


@pytest.mark.slow
def test_ctrl_c_stops_every_worker_and_marks_interrupted(training: tuple[Path, subprocess.Popen[str]]) -> None:
    results, proc = training
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    run = only_run(results)
    m = meta(run)
    assert m["status"] == "interrupted"
    assert psutil.pid_exists(m["workers"][0]["pid"]) is False or not worker_processes(results.parent)
    assert_no_orphans(results.parent)
    said = perfkit("watch", "--results-dir", str(results), run.name, timeout=60)
    assert said.returncode == 0 and said.stdout.strip() == f"{run.name} has finished (interrupted): perfkit " \
        f"analyze {run.name}", said
