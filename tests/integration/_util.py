"""Helpers for the integration tests: run the real `perfkit` command and find what it wrote."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

PERFKIT = [sys.executable, "-m", "perfkit"]
# The tiny preset on a local cluster: CPU samples often enough for a few seconds of training, and a connect
# timeout that a loaded 2-core machine meets.
TINY_MULTI = ("--preset", "tiny", "--sample-interval", "0.25", "--connect-timeout", "90")


BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def dump_dom(page: Path, profile: Path) -> str:
    """``page`` loaded from disk by headless Chromium (no network), plotly.js run: the DOM it drew."""
    # Missing, it fails (as a missing Slurm does): a skip would pass a report no browser ever drew.
    assert BROWSER is not None, "no Chromium: apt-get install chromium (.ci/run installs it)"
    proc = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                           "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def perfkit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PERFKIT, *args], capture_output=True, text=True, timeout=timeout)


def run_ok(results: Path, *args: str, timeout: float = 300) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``perfkit ARGS --results-dir RESULTS``, which must exit 0: the one run it wrote, and the process."""
    proc = perfkit(*args, "--results-dir", str(results), timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run(results), proc


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*PERFKIT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def only_run(results: Path) -> Path:
    runs = [p for p in results.iterdir() if (p / "run.json").is_file()]
    assert len(runs) == 1, runs
    return runs[0]


def meta(run: Path) -> dict[str, Any]:
    return json.loads((run / "run.json").read_text())


def wait_for_status(results: Path, worker: int, key: str, value: Any, proc: subprocess.Popen[str],
                    timeout: float = 240, where: Callable[[dict[str, Any]], bool] = lambda status: True
                    ) -> dict[str, Any]:
    """Poll a worker's status.json until ``key`` reaches ``value`` (>= for numbers) in a status that ``where``
    also accepts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in results.glob(f"*/workers/{worker}/status.json"):
            try:
                status = json.loads(path.read_text())
            except ValueError:
                continue
            got = status.get(key)
            if not where(status):
                continue
            if got == value or (isinstance(value, int) and isinstance(got, int) and got >= value):
                return status
        if proc.poll() is not None:
            raise AssertionError(f"perfkit ended early ({proc.returncode}): {proc.communicate()[1][-3000:]}")
        time.sleep(0.3)
    raise AssertionError(f"worker {worker} never reached {key}={value}")


def worker_processes(scope: Path) -> list[psutil.Process]:
    """perfkit's worker processes (worker, parameter server or chief) and fork servers of the runs under
    ``scope`` (a test's folder), found by what their output goes to: a ``worker.log`` or ``forkserver.log``
    under it. Not by command line: a forked worker has its fork server's. Tests that run side by side never
    count each other's workers."""
    out, root = [], scope.resolve()
    for p in psutil.process_iter():
        try:
            target = Path(os.readlink(f"/proc/{p.pid}/fd/1"))
        except OSError:  # gone, or no stdout
            continue
        if target.name in ("worker.log", "forkserver.log") and target.is_relative_to(root):
            out.append(p)
    return out


def assert_no_orphans(scope: Path, grace: float = 10) -> None:
    """No worker process of the runs under ``scope`` is left running after ``grace`` s."""
    deadline = time.monotonic() + grace
    while worker_processes(scope) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not worker_processes(scope), "worker processes were left running"


def traces(run: Path) -> Any:
    """The run's parsed traces, as ``perfkit analyze`` reads them (parsed now, or from the cache)."""
    from perfkit.analysis.tracetables import load_traces
    from perfkit.results import load_meta

    return load_traces(run, load_meta(run))


def require_every_trace(run: Path) -> Any:
    """Every worker's trace of ``run``, or a visible outcome: TF 2.21's profiler crash
    (docs/tf-profiler-crash.md) is retried by the run itself, so a lost trace is a failure, unless every
    retry the run had was spent on that crash, which is an xfail naming it."""
    import pytest

    m = meta(run)
    workers = (m.get("profile") or {}).get("workers") or {}
    lost = {k: w for k, w in workers.items() if w.get("status") != "captured"}
    crashes = [r for r in m.get("restarts") or [] if r.get("profiler_crash")]
    if lost and crashes and len(crashes) > int(m["config"]["profile_retries"]):
        pytest.xfail(f"TensorFlow's profiler crashed a worker in all {len(crashes)} capture attempts "
                     f"({crashes[-1]['after']}); docs/tf-profiler-crash.md")
    assert not lost, f"captures lost: {lost}; restarts: {m.get('restarts')}"
    tables = traces(run)
    assert tables.steps is not None and not tables.unreadable, tables.warnings
    return tables


def last_attempt(table: Any) -> Any:
    """A worker's step or epoch records of the run's last attempt: a run the launcher restarted (a worker
    killed inside TensorFlow's profiler, docs/tf-profiler-crash.md) keeps the earlier attempt's records too."""
    return table[table["attempt"] == table["attempt"].max()] if "attempt" in table and len(table) else table


def launch_retrying(results: Path, launch_args: tuple[str, ...], command: list[str], timeout: float = 400) -> Path:
    """``perfkit launch LAUNCH_ARGS -- COMMAND``, which must succeed; a run that TensorFlow's profiler crashed
    (docs/tf-profiler-crash.md: about 1 in 20 at 2 workers) is tried again once, visibly: a second crash
    fails the test."""
    for attempt in range(2):
        proc = perfkit("launch", *launch_args, "--results-dir", str(results), "--quiet", "--", *command,
                       timeout=timeout)
        if proc.returncode == 0:
            return Path(proc.stdout.strip().splitlines()[-1])
        failed = [p for p in results.iterdir() if (p / "run.json").is_file() and meta(p)["status"] == "failed"]
        crash = any(((meta(p).get("failure") or {}).get("profile") or {}).get("status") in
                    ("starting", "capturing", "stopping") and (meta(p).get("failure") or {}).get("signal")
                    for p in failed)
        assert crash and attempt == 0, proc.stderr[-3000:]
        print(f"TensorFlow's profiler crashed a worker; launching again: {proc.stderr[-500:]}")
    raise AssertionError("unreachable")
