"""The launcher's side of the fork server (``trainer/worker/zygote.py``): start it, ask it for workers, and
wait for them as children (``Adopted``), the way ``subprocess.Popen`` waits for a worker it started.

Why not ``multiprocessing``'s forkserver: its children stay the server's, so the launcher could neither
reap them (exit code, rusage) nor be the parent whose death their parent-death signal follows; and it
runs Python callables, where a worker here is a command line with its own log, session and network
namespace.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from perfkit._libc import become_subreaper
from perfkit.errors import PerfkitError, UsageError

START_VAR = "PERFKIT_WORKER_START"  # fork (the default) or exec: each worker a new interpreter
WORKER_MODULE = "perfkit.trainer.worker.main"
READY_TIMEOUT_S = 120.0  # TensorFlow's import: ~6 s here, minutes on a machine that swaps
REPLY_TIMEOUT_S = 30.0


class ForkServerError(PerfkitError):
    """The fork server could not start, or could not fork a worker."""


class Adopted:
    """A worker forked by the fork server and adopted by this process (its subreaper): ``Popen``'s ``pid``,
    ``returncode``, ``poll``, ``wait`` and ``send_signal``, by ``waitpid`` on the pid."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (never by perfkit): its code is lost
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(f"worker pid {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never signal a pid that was reaped: it may be another process's now
            os.kill(self.pid, sig)


class ForkServer:
    """One per launcher, started before the run's workers and kept for its restarts."""

    def __init__(self, log: Path, env: dict[str, str]) -> None:
        if not become_subreaper():
            raise ForkServerError("this system cannot make the launcher a child subreaper (prctl)")
        req_r, self._req = os.pipe()
        self._rep, rep_w = os.pipe()
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "perfkit.trainer.worker.zygote", str(req_r), str(rep_w)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, pass_fds=(req_r, rep_w),
                start_new_session=True, env=env)
        os.close(req_r)
        os.close(rep_w)
        self.log = log
        self.info: dict[str, Any] = {}
        self._reader: IO[str] = os.fdopen(self._rep, "r", encoding="utf-8")

    def ready(self) -> dict[str, Any]:
        """Wait for its imports; what they cost. Raises ForkServerError naming its log if it did not start."""
        if not self.info:
            reply = self._read(READY_TIMEOUT_S, "import TensorFlow")
            if not reply.get("ready"):
                raise ForkServerError(f"the worker fork server could not import TensorFlow: {reply.get('error')} "
                                      f"(see {self.log})")
            self.info = reply
        return self.info

    def spawn(self, argv: list[str], env: dict[str, str], log: Path, netns: str | None = None) -> Adopted:
        if argv[1:3] != ["-m", WORKER_MODULE]:
            raise ForkServerError(f"the fork server starts only perfkit's own worker, not {argv[1:3]}")
        self.ready()
        request = {"args": argv[3:], "env": env, "log": str(log), "netns": netns, "cwd": os.getcwd()}
        try:
            os.write(self._req, (json.dumps(request) + "\n").encode())
        except OSError as exc:
            raise ForkServerError(f"the worker fork server is gone ({exc}; see {self.log})") from None
        reply = self._read(REPLY_TIMEOUT_S, "fork a worker")
        if "pid" not in reply:
            raise ForkServerError(f"the worker fork server could not fork a worker: {reply.get('error')}")
        return Adopted(int(reply["pid"]))

    def _read(self, timeout: float, doing: str) -> dict[str, Any]:
        ready, _, _ = select.select([self._reader], [], [], timeout)
        line = self._reader.readline() if ready else ""
        if line:
            return json.loads(line)
        why = f"did not {doing} within {timeout:g} s"
        if ready:  # its end of the pipe closed: it exited (its exit status follows the close within moments)
            try:
                why = f"exited with code {self.proc.wait(timeout=10)}"
            except subprocess.TimeoutExpired:
                why = "closed its pipe without exiting"
        raise ForkServerError(f"the worker fork server (pid {self.proc.pid}) {why}; see {self.log}")

    def move_log(self, path: Path) -> None:
        os.replace(self.log, path)  # the server keeps writing to it: same file, same descriptor
        self.log = path

    def close(self) -> None:
        """EOF ends it; SIGKILL if it does not end at once (it holds no state worth saving)."""
        for fd in (self._req,):
            try:
                os.close(fd)
            except OSError:
                pass
        self._reader.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)  # each worker sets its own
    env.pop(START_VAR, None)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a crash inside TensorFlow leaves every thread's Python stack in worker.log
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # the worker log keeps TF's warnings
    return env


@dataclass
class WorkerStart:
    """How a run's own workers start, as applied: ``fork`` (from the fork server) or ``exec``, and why."""

    method: str
    why: str
    server: ForkServer | None = None

    def move_log(self, path: Path) -> None:
        if self.server is not None:
            self.server.move_log(path)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            if self.server.log.name.startswith("."):  # never moved into a run: the run was not made
                self.server.log.unlink(missing_ok=True)

    def record(self) -> dict[str, Any]:
        """run.json's ``worker_start``: the method, why, and what the server's imports cost."""
        info = self.server.info if self.server is not None else {}
        keep = ("import_s", "import_cpu_s", "threads", "started_wall_ns", "ready_wall_ns")
        return {"method": self.method, "why": self.why, **{k: info[k] for k in keep if k in info}}


def start_fork_server(log: Path, environ: Any = None) -> WorkerStart:
    """The fork server, importing TensorFlow from now on; exec where the user asked for it (``START_VAR``)
    or this system cannot adopt forked workers (said in run.json)."""
    method = (environ if environ is not None else os.environ).get(START_VAR, "fork")
    if method not in ("fork", "exec"):
        raise UsageError(f"environment variable {START_VAR}={method!r}: valid values are fork, exec")
    if method == "exec":
        return WorkerStart("exec", f"{START_VAR}=exec")
    try:
        log.parent.mkdir(parents=True, exist_ok=True)  # the results folder: the run will be made in it
        return WorkerStart("fork", "one TensorFlow import, forked for each local worker", ForkServer(log, worker_env()))
    except (ForkServerError, OSError) as exc:
        return WorkerStart("exec", f"no fork server: {exc}")
