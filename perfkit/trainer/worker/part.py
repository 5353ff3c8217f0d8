"""A worker's part of a run, the same for perfkit's own workers (``main``, ``ps``) and for a user's script
under ``perfkit.record``: ``workers/<i>/status.json`` (state, epoch, step, clock anchor; what the launcher
watches), the step and epoch tables saved after every epoch, and how the part ended. The launcher and a
launched command agree on where the part goes through ``RUN_DIR_VAR`` and ``INDEX_VAR``.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from perfkit._atomic import is_disk_error, write_error
from perfkit.profiler.steps import StepLog
from perfkit.results import write_json, write_parquet
from perfkit.trainer.worker import checkpoints
from perfkit.trainer.worker.env import INDEX_VAR, RUN_DIR_VAR
from perfkit.trainer.worker.heartbeat import HEARTBEAT_FILE, Heartbeat

log = logging.getLogger("perfkit.worker")

THROTTLE_S = 0.5  # step updates of status.json at most this often

__all__ = ["INDEX_VAR", "RUN_DIR_VAR"]  # defined in env.py, which the start-up hook can import cheaply


class Status:
    """``workers/<i>/status.json``, rewritten atomically; step updates are throttled."""

    def __init__(self, path: Path, index: int) -> None:
        self.index = index
        # checkpoints: from the start, so that a run without saves says 0 rather than "not timed"
        self.path, self._state = path, {"index": index, "pid": os.getpid(), "started_wall_ns": process_started_ns(),
                                        "state": "", "phases": [], "checkpoints": {"saves": 0, "s": 0.0}}
        self._last = 0.0
        self._lock = threading.Lock()  # a ps chief's progress thread writes too
        self.write(state="starting")
        checkpoints.set_sink(self.checkpoint_saved)

    def checkpoint_saved(self, seconds: float) -> None:
        """One checkpoint save of this process (worker/checkpoints.py): saves and seconds, written with the
        next write (the last one, at the end, is forced)."""
        with self._lock:
            done = self._state["checkpoints"]
            self._state["checkpoints"] = {"saves": done["saves"] + 1, "s": round(done["s"] + seconds, 6)}
        self.write(force=False)

    def reported(self) -> dict[str, Any]:
        """What this worker has reported so far (status.json's content, whether or not written yet)."""
        with self._lock:
            return dict(self._state)

    def due(self) -> bool:
        """A throttled write would be written now."""
        return time.monotonic() - self._last >= THROTTLE_S

    def write(self, force: bool = True, **fields: Any) -> None:
        with self._lock:
            now_ns = time.time_ns()
            if fields.get("state", self._state["state"]) != self._state["state"]:
                # Where start-up goes (analysis/startup.py): when each state began, and this process's CPU
                # seconds by then, every thread's (TensorFlow's import and graph building run in threads too).
                self._state["phases"].append({"state": fields["state"], "t_wall_ns": now_ns,
                                              "cpu_s": round(time.process_time(), 4)})
            self._state.update(fields, t_wall_ns=now_ns)
            now = time.monotonic()
            if force or now - self._last >= THROTTLE_S:
                self._last = now
                try:
                    write_json(self.path, self._state)
                except OSError as exc:  # a status file is a courtesy; training goes on without it
                    log.warning("could not write %s: %s", self.path, exc)


def process_started_ns() -> int | None:
    """When this process started, on the wall clock (to 10 ms): the kernel's start time, in clock ticks since
    boot, carried over from the boot-time clock. None where /proc is not Linux's."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22; the name in () may hold spaces
        ago_s = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.time_ns() - int(ago_s * 1e9)


class StatusObserver:
    """Forwards progress into status.json and saves the tables after every epoch."""

    def __init__(self, status: Status, save: Callable[[], None]) -> None:
        self.status, self.save = status, save

    def run_opened(self, path: Path) -> None:
        pass

    def phase(self, text: str) -> None:
        self.status.write(phase=text)

    def warning(self, text: str) -> None:
        self.status.write(warning=text)

    def training_started(self, epochs: int, steps_per_epoch: int, cpu: Callable[[], float | None]) -> None:
        self.status.write(state="training", epochs=epochs, steps_per_epoch=steps_per_epoch)

    def step(self, epoch: int, step: int, logs: Mapping[str, Any]) -> None:
        if not self.status.due():  # reading a logged tensor's value costs a step its overlap: only when shown
            return
        self.status.write(force=False, epoch=epoch, step=step, loss=_float(logs.get("loss")),
                          accuracy=_float(logs.get("accuracy")))

    def epoch(self, epoch: int, row: Mapping[str, Any]) -> None:
        self.save()
        self.status.write(epochs_done=epoch + 1, last_epoch={k: _float(v) for k, v in row.items()})

    def training_finished(self) -> None:
        pass

    def output(self, source: str, line: str) -> None:
        pass


def _float(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def tables_saver(wdir: Path, steplog: StepLog, attempt: int) -> Callable[[], None]:
    """Save this attempt's rows beside those of earlier attempts (a restarted cluster resumes an epoch)."""
    import pandas as pd

    earlier = {}
    for name in ("steps", "epochs"):
        path = wdir / f"{name}.parquet"
        if path.is_file():
            df = pd.read_parquet(path)
            earlier[name] = df[df["attempt"] < attempt] if "attempt" in df else df.assign(attempt=0)

    def save() -> None:
        for name, frame in (("steps", steplog.steps_frame()), ("epochs", steplog.epochs_frame())):
            frame = frame.assign(attempt=attempt)
            if name in earlier and not earlier[name].empty:
                frame = pd.concat([earlier[name], frame], ignore_index=True)
            write_parquet(wdir / f"{name}.parquet", frame)

    return save


def open_part(status: Status, wdir: Path, steplog: StepLog, host: str, attempt: int,
              progress: Callable[[], dict[str, Any]] | None = None) -> Callable[[], None]:
    """``announce`` it; the saver of its step and epoch tables. The same for perfkit's own worker and for a
    user's script under perfkit.record. ``progress``: what its heartbeat reports, when more than its own
    step log (a ParameterServerStrategy chief: its workers' steps)."""
    announce(status, wdir, steplog, host, attempt, progress)  # its heartbeat lives as long as the process
    return tables_saver(wdir, steplog, attempt)


def announce(status: Status, wdir: Path, steplog: StepLog, host: str, attempt: int,
             progress: Callable[[], dict[str, Any]] | None = None) -> Heartbeat:
    """This worker's clock anchor and host in status.json, and its heartbeat, started (returned for whoever
    must stop it before the process ends: a --mode single run inside perfkit compare)."""
    status.write(anchor_wall_ns=steplog.anchor.wall_ns, anchor_mono_ns=steplog.anchor.mono_ns, host=host,
                 attempt=attempt)
    # What lets the launcher tell a stuck worker from the peers waiting for it (trainer/hang.py).
    return Heartbeat(wdir / HEARTBEAT_FILE, progress or steplog.position).start()


def close_part(status: Status, save: Callable[[], None], exc: BaseException | None) -> str:
    """Save what was recorded and say in status.json how the worker ended: done, interrupted or failed.

    A save the disk refuses (full, read-only) fails the part with that as its reason, unless it already
    failed of something else; the tables saved at earlier epochs stay as they were (atomic writes)."""
    with _sigint_held():
        try:
            save()
        except OSError as err:
            log.error("%s", write_error(err))
            if exc is None or isinstance(exc, KeyboardInterrupt):
                exc = err
        if exc is None:
            status.write(state="done")
            return "done"
        if isinstance(exc, KeyboardInterrupt):
            status.write(state="interrupted")
            return "interrupted"
        status.write(state="failed", error=write_error(exc) if is_disk_error(exc) else error_line(exc))
        return "failed"


@contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT ignored while the part is saved: a second one would lose what the first was for. It comes:
    the kernel sends the parent-death signal again for every launcher thread that exits when the launcher
    is killed, and Ctrl-C reaches a worker from the terminal and from its launcher. Whoever sent it
    SIGKILLs after a grace period, so a save that hangs is still ended."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers are set, and run, only in the main thread
        return
    came: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
        if came:
            log.info("%d SIGINT held while the worker's tables were saved", len(came))


def error_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"


def command_identity(argv: list[str]) -> dict[str, Any]:
    """A user's command as a workload identity: a single and a multi run of the same command match."""
    return {"spec": "command", "name": "command", "version": "", "params": {"command": shlex.join(argv)}}


def plan_config(plan: dict[str, Any] | None) -> dict[str, Any]:
    """What the analysis reads of a run's config, from what fit said (epochs) and the recorder was told."""
    if not plan:
        return {}
    return {"epochs": plan["epochs"], "batch_size": plan["global_batch"], "steps_per_epoch": plan["steps_per_epoch"]}
