"""One host's SSH session as the launching host holds it: the ``perfkit launch --agent`` it started there,
the lines it reads back (the host's answer, phases, warnings, worker output, how its part ended), the beats
it writes, and the handshake that lets every host answer before any of them starts a worker."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from perfkit.errors import UsageError
from perfkit.events import Observer
from perfkit.trainer.remote.agent import BEAT, BEAT_S
from perfkit.trainer.remote.hosts import READY_S, Host, Remote, answered, failed_early, same_versions
from perfkit.trainer.remote.ssh import Target, remote_command

Events = queue.Queue  # of (Session, "out" | "err", line)


@dataclass
class Session:
    target: Target
    results_dir: str  # on the host
    dir_name: str  # its part of the run under its results directory
    proc: subprocess.Popen[bytes]
    stderr: list[str] = field(default_factory=list)
    info: dict[str, Any] | None = None  # what the host answered when its session opened
    host: Host | None = None  # that answer, checked
    ended_at: float | None = None
    end: dict[str, Any] = field(default_factory=dict)  # how its part ended, as its host said
    live: Callable[[dict[str, Any]], None] | None = None  # where its workers' relayed state goes (mirror.py)

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def shared(self) -> bool:
        return bool(self.host and self.host.shared)

    def waits_elsewhere(self) -> bool:
        """Its part failed with no culprit among its own workers (a hang where they only wait, or a worker that
        died of a peer's silence): the cause runs on another host."""
        return self.end.get("status") == "failed" and (self.end.get("hung") == [] or bool(self.end.get("peer_lost")))

    def send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):  # that session ended: its exit says why
            pass


def open_session(target: Target, results_dir: str, dir_name: str, argv: list[str], remote: Remote,
                 header: dict[str, Any]) -> Session:
    """``argv`` (the host's ``perfkit launch --agent ...``) started on the host over SSH, told ``header``."""
    # ssh behind perfkit's guard: the kernel kills it if this process dies (even by SIGKILL), so the host sees
    # its session end at once (its watchdog stops the workers) rather than an orphaned client holding it open.
    guard = [sys.executable, "-m", "perfkit.trainer.worker.guard", str(os.getpid()), "-", "--"]
    proc = subprocess.Popen([*guard, *target.argv(remote_command(argv, remote.cwd))],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # Ctrl-C reaches this process alone: it stops the hosts
    s = Session(target, results_dir, dir_name, proc)
    s.send(json.dumps(header))
    return s


def beat(sessions: list[Session], done: threading.Event) -> None:
    while not done.wait(BEAT_S):
        for s in sessions:
            if s.proc.poll() is None:
                s.send(BEAT)


def reader(s: Session, stream: IO[bytes] | None, kind: str, events: Events) -> threading.Thread:
    def read() -> None:
        assert stream is not None
        for raw in iter(stream.readline, b""):
            events.put((s, kind, raw.decode("utf-8", "replace").rstrip("\n")))

    t = threading.Thread(target=read, name=f"perfkit-ssh-{kind}-{s.name}", daemon=True)
    t.start()
    return t


def drain(events: Events, observer: Observer, timeout: float = 0.0) -> None:
    """Show every line read so far (waiting up to ``timeout`` for the first)."""
    try:
        s, kind, line = events.get(timeout=timeout) if timeout else events.get_nowait()
    except queue.Empty:
        return
    while True:
        _show(s, kind, line, observer)
        try:
            s, kind, line = events.get_nowait()
        except queue.Empty:
            return


def _show(s: Session, kind: str, line: str, observer: Observer) -> None:
    if kind == "err":
        s.stderr = [*s.stderr[-19:], line]
        if line.strip() and s.info is not None:  # before its answer: ssh's own words, said in the error
            observer.output(f"[{s.name}]", line)
        return
    try:
        obj = json.loads(line)
    except ValueError:
        obj = {"log": line}
    if "live" in obj:
        if s.live is not None and isinstance(obj["live"], dict):
            s.live(obj["live"])
    elif "ready" in obj:
        s.info = dict(obj["ready"] or {})
    elif "end" in obj:
        s.end = dict(obj["end"] or {})
    elif "log" in obj:
        worker = obj.get("worker")
        observer.output(f"[w{worker}@{s.name}]" if worker is not None else f"[{s.name}]", str(obj["log"]))
    elif "warning" in obj:
        observer.warning(f"{s.name}: {obj['warning']}")
    elif "phase" in obj:
        observer.phase(f"{s.name}: {obj['phase']}")


def ready(sessions: list[Session], events: Events, observer: Observer, remote: Remote, program: str) -> list[Host]:
    """Every host's answer, checked, once all answered; else every session is told to stop and the first
    host that cannot run is the one-line error."""
    deadline = time.monotonic() + READY_S
    try:
        while not all(s.info is not None for s in sessions):
            drain(events, observer, timeout=0.1)
            gone = next((s for s in sessions if s.info is None and s.proc.poll() is not None), None)
            if gone is not None:
                time.sleep(0.2)  # its last words
                drain(events, observer)
                raise UsageError(failed_early(gone.target, gone.proc.returncode, "\n".join(gone.stderr), remote))
            if time.monotonic() > deadline:
                late = next(s for s in sessions if s.info is None)
                raise UsageError(f"host {late.name} ({late.target.ssh}): no answer over SSH within {READY_S} s")
        hosts = [answered(s.target, s.info or {}, program) for s in sessions]
        same_versions(hosts)
    except (UsageError, KeyboardInterrupt) as exc:
        abort(sessions, str(exc) if isinstance(exc, UsageError) else "interrupted on the launching host")
        raise
    for s, h in zip(sessions, hosts):
        s.host = h
    return hosts


def abort(sessions: list[Session], why: str) -> None:
    """Nothing started anywhere: each host is told so and its session closed."""
    for s in sessions:
        s.send(json.dumps({"abort": why}))
    deadline = time.monotonic() + 10
    for s in sessions:
        try:
            s.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait()
