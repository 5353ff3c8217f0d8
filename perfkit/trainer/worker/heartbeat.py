"""A worker's heartbeat: ``workers/<i>/heartbeat.json``, rewritten once a second by a daemon thread, with
the worker's progress (a count of its step, validation and epoch events) and where its main thread is.

The launcher reads it to tell a hung worker from the peers that only wait for it (``trainer/hang.py``):
- a heartbeat that stops while the process lives: the process is stopped (SIGSTOP, a debugger) or its
  Python is blocked in native code that holds the GIL;
- a fresh heartbeat whose main thread sits in the script's own code (a sleep, a lock, a C call that released
  the GIL) while no step ends: stuck in its own code;
- a fresh heartbeat whose main thread is inside TensorFlow: running or waiting in a step (a collective).

A thread rather than the step callback, because a stuck main thread calls no callback; and the stack is
read with ``sys._current_frames``, which costs microseconds, once a second.
"""

from __future__ import annotations

import logging
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from perfkit._atomic import read_object
from perfkit.results import write_json

log = logging.getLogger("perfkit.worker")

HEARTBEAT_FILE = "heartbeat.json"
INTERVAL_S = 1.0

# Where a frame's code lives, by path: TensorFlow and Keras run the steps and wait in their collectives.
_TF_PARTS = (f"{os.sep}tensorflow{os.sep}", f"{os.sep}tf_keras{os.sep}", f"{os.sep}keras{os.sep}",
             f"{os.sep}tensorboard_plugin_profile{os.sep}", f"{os.sep}absl{os.sep}")
_PERFKIT = str(Path(__file__).resolve().parents[2]) + os.sep
_STDLIB = tuple({sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "platstdlib")})


def classify(filename: str) -> str:
    """``tensorflow``, ``perfkit``, ``python`` (the standard library) or ``user`` for a frame's file."""
    path = os.path.abspath(filename)
    if any(part in path for part in _TF_PARTS):
        return "tensorflow"
    if path.startswith(_PERFKIT):
        # perfkit's workloads are the "user code" of perfkit's own workers
        return "user" if f"{os.sep}workloads{os.sep}" in path[len(_PERFKIT):] else "perfkit"
    if path.startswith(_STDLIB) and "site-packages" not in path:
        return "python"
    return "user"


def where(frame: FrameType | None) -> dict[str, Any]:
    """Where a thread is: its innermost frame outside the standard library (``time.sleep`` and a lock's
    acquire are C, so a sleeping or blocked script shows its own line), as kind, file, line, function."""
    inner = None
    while frame is not None:
        kind = classify(frame.f_code.co_filename)
        if kind != "python":
            inner = (kind, frame)
            break
        frame = frame.f_back
    if inner is None:
        return {"kind": "python"}
    kind, frame = inner
    return {"kind": kind, "file": frame.f_code.co_filename, "line": frame.f_lineno,
            "function": frame.f_code.co_name}


class Heartbeat:
    """The daemon thread; ``progress()`` is read each beat: the step log's event count, epoch and last step.
    It watches the thread that made it: the one that trains (a script may train outside its main thread)."""

    def __init__(self, path: Path, progress: Callable[[], dict[str, Any]], interval: float = INTERVAL_S) -> None:
        self.path, self.progress, self.interval = path, progress, interval
        self._main = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="perfkit-heartbeat", daemon=True)
        self._warned = False

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def beat(self) -> dict[str, Any]:
        frame = sys._current_frames().get(self._main) if self._main is not None else None
        return {"pid": os.getpid(), "t_wall_ns": time.time_ns(), "interval_s": self.interval,
                **self.progress(), "main": where(frame)}

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                write_json(self.path, self.beat())
            except OSError as exc:  # a full disk must not stop training: the launcher sees the beat go stale
                if not self._warned:
                    self._warned = True
                    log.warning("heartbeat: could not write %s: %s", self.path, exc)
            except Exception:  # noqa: BLE001 - profiling never breaks training
                log.exception("heartbeat failed; no more heartbeats from this worker")
                return
            self._stop.wait(self.interval)


def read_heartbeat(worker_dir: Path) -> dict[str, Any] | None:
    """The last heartbeat a worker wrote, or None (none yet, or being replaced this instant)."""
    return read_object(worker_dir / HEARTBEAT_FILE) or None
