"""The fork server's launcher side: the start method chosen and recorded, and forked workers waited for as
children (``Adopted``). A real fork server imports TensorFlow: every multi-worker integration test uses one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfkit.errors import UsageError
from perfkit.trainer.forkserver import (
    START_VAR,
    Adopted,
    ForkServer,
    ForkServerError,
    WorkerStart,
    start_fork_server,
    worker_env,
)


def _child(code: int | None, sleep: float = 0.0) -> int:
    """A real child of this process that exits with ``code`` after ``sleep`` (None: sleeps until signalled)."""
    pid = os.fork()
    if pid == 0:
        try:
            if code is None:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not a handler another test left in this process
                signal.pause()
            time.sleep(sleep)
        finally:
            os._exit(code or 0)
    return pid


def test_adopted_reads_an_exit_code_once_the_process_ended() -> None:
    proc = Adopted(_child(3, sleep=0.3))
    assert proc.poll() is None and proc.returncode is None
    assert proc.wait(timeout=10) == 3 and proc.returncode == 3 and proc.poll() == 3


def test_adopted_reports_a_signal_as_popen_does_and_never_signals_a_reaped_pid() -> None:
    proc = Adopted(_child(None))
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM
    proc.send_signal(signal.SIGKILL)  # reaped: the pid may be another process's now, so nothing is sent


def test_the_start_method_comes_from_the_environment_and_a_bad_value_names_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=f"{START_VAR}='spawn': valid values are fork, exec"):
        start_fork_server(tmp_path / "results" / "fs.log", {START_VAR: "spawn"})
    assert not (tmp_path / "results").exists(), "refused before anything is made"
    chosen = start_fork_server(tmp_path / "fs.log", {START_VAR: "exec"})
    assert chosen.server is None and chosen.record() == {"method": "exec", "why": f"{START_VAR}=exec"}
    assert not (tmp_path / "fs.log").exists()


def test_the_record_keeps_what_the_imports_cost() -> None:
    class Served:
        info = {"ready": True, "pid": 7, "import_s": 4.2, "import_cpu_s": 4.0, "threads": 3,
                "started_wall_ns": 10, "ready_wall_ns": 20}

    start = WorkerStart("fork", "one import", Served())  # type: ignore[arg-type]
    assert start.record() == {"method": "fork", "why": "one import", "import_s": 4.2, "import_cpu_s": 4.0,
                              "threads": 3, "started_wall_ns": 10, "ready_wall_ns": 20}


def test_workers_environment_carries_neither_tf_config_nor_the_start_method(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CONFIG", "{}")
    monkeypatch.setenv(START_VAR, "exec")
    env = worker_env()
    assert "TF_CONFIG" not in env and START_VAR not in env and env["PYTHONFAULTHANDLER"] == "1"


def test_a_server_that_cannot_start_is_named_with_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's own failure (here: it exits at once) is a one-line error naming its pid and log, within
    the wait's limit, never a hang."""
    monkeypatch.setattr(sys, "executable", "/bin/false")
    server = ForkServer(tmp_path / "fs.log", dict(os.environ))
    try:
        with pytest.raises(ForkServerError, match=r"fork server \(pid \d+\) exited with code 1; see .*fs.log"):
            server.ready()
    finally:
        server.close()


def test_only_perfkits_own_worker_is_forked(tmp_path: Path) -> None:
    server = ForkServer.__new__(ForkServer)
    with pytest.raises(ForkServerError, match="only perfkit's own worker"):
        server.spawn([sys.executable, "train.py"], {}, tmp_path / "w.log")
