"""perfkit on a host that ``perfkit launch --hosts`` reached over SSH: one part of the run, started as
``perfkit launch --host NAME`` is by hand, and tied to the launching host by its SSH session.

- ``handshake``: this host's answer (``host_info``: versions, cores, results directory, the command's program,
  its ports) as soon as the session opens, then the launching host's word, once every host answered: ``go``
  with the cluster, or ``abort`` (nothing starts on any host).
- ``Watchdog``: the launching host writes a line every ``BEAT_S`` to the agent's stdin. A remote process has
  no terminal to hang up, so silence for ``SILENT_S`` (a dropped link), end of file (the launcher or its ssh
  killed) or a ``stop`` line stops this host's workers as Ctrl-C does (they save what they recorded); a
  backstop kills whatever is left ``LOST_KILL_S`` after the launcher was lost.
- ``Relay``: what the launching host is told, one JSON object a line on stdout: the phases and warnings of
  this part, and each local worker's output lines (``worker.log``, followed as it grows).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import psutil

from perfkit._atomic import read_object
from perfkit.errors import UsageError
from perfkit.events import NullObserver
from perfkit.trainer.worker.heartbeat import HEARTBEAT_FILE

BEAT_S = 0.5
SILENT_S = 2.5  # five missed beats
LOST_KILL_S = 5.0  # after the launcher was lost: every worker gone by SILENT_S + LOST_KILL_S (+ polls) < 10 s
STOP, BEAT = "stop", "beat"
LIVE_S = 1.0  # each local worker's state relayed this often (the launching host mirrors it: perfkit watch)
EXIT_LOST = 130  # as an interrupted run: the launching host was lost


def host_info(results_dir: str, marker: str, program: str, ports: list[int]) -> dict[str, Any]:
    """This host as the launching host needs it: versions, cores, its results directory (and whether the
    launching host's marker is in it: one shared file system), the command's program, its ports."""
    from perfkit.machine import versions
    from perfkit.trainer.hosts.cpubudget import available_cores

    rdir = Path(results_dir).expanduser().resolve()
    error = None
    try:
        rdir.mkdir(parents=True, exist_ok=True)
        if not os.access(rdir, os.W_OK):
            error = "not writable"
    except OSError as exc:
        error = exc.strerror or str(exc)
    found = shutil.which(program) or (os.sep in program and Path(program).is_file())
    return {"versions": versions(),
            "cores": float(len(available_cores())), "hostname": socket.gethostname(), "results_dir": str(rdir),
            "results_error": error, "shared": bool(marker) and (rdir / marker).is_file(), "program": bool(found),
            "busy_ports": [p for p in ports if not _free(p)]}


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


class Lines:
    """Lines from a file descriptor, read with ``os.read``: a thread blocked in a buffered reader would hold
    its lock when the interpreter shuts down (a fatal error at exit), and a buffered header read would take
    the lines after it too."""

    def __init__(self, fd: int) -> None:
        self.fd, self._rest = fd, b""

    def next(self) -> bytes | None:
        """The next line without its newline; None at end of file."""
        while b"\n" not in self._rest:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                return None
            self._rest += chunk
        line, _, self._rest = self._rest.partition(b"\n")
        return line


class Watchdog:
    """Reads the launching host's lines; interrupts this process when told to stop or when the launcher is
    lost, and kills this process's children if they outlive the loss by ``LOST_KILL_S``."""

    def __init__(self, lines: Lines, relay: Relay | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.lines, self.relay, self.clock = lines, relay, clock
        self.last = clock()
        self.lost: str | None = None
        self._eof = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._read, name="perfkit-launcher-lines", daemon=True).start()
        threading.Thread(target=self._watch, name="perfkit-launcher-watchdog", daemon=True).start()

    def _read(self) -> None:
        while (line := self.lines.next()) is not None:
            self.last = self.clock()
            if line.strip() == STOP.encode():
                self._interrupt(None)
        self._eof.set()

    def verdict(self, now: float) -> str | None:
        """Why the launcher counts as lost now, or None."""
        if self._eof.is_set():
            return "the launching host closed the connection (perfkit there was stopped or killed)"
        if now - self.last > SILENT_S:
            return f"nothing from the launching host for {now - self.last:.0f} s (the link or SSH session dropped)"
        return None

    def _watch(self) -> None:
        while self.lost is None:
            why = self.verdict(self.clock())
            if why is not None:
                self.lost = why
                self._interrupt(why)
                break
            time.sleep(BEAT_S / 2)
        time.sleep(LOST_KILL_S)
        _kill_children()  # the graceful stop did not finish in time: nothing outlives the launcher
        time.sleep(LOST_KILL_S)
        os._exit(EXIT_LOST)  # this process itself is stuck (nothing it could still write would arrive)

    def _interrupt(self, why: str | None) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # first: nothing below may keep the stop from happening
        if why and self.relay is not None:
            self.relay.warning(f"stopping this host's workers: {why}")


def _kill_children() -> None:
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            pass


def read_header(lines: Lines) -> dict[str, Any]:
    """The first line the launching host sends (this run's id, what to check here), as JSON."""
    line = lines.next()
    try:
        return dict(json.loads(line or b""))
    except ValueError:
        raise UsageError("--agent: the first line on stdin is not the launching host's JSON (perfkit launch "
                         "--hosts starts agents; run perfkit launch --host NAME by hand instead)") from None


def handshake(lines: Lines, relay: Relay, results_dir: str, program: str) -> dict[str, Any]:
    """Say what this host has (``ready``), then wait for the launching host's word, which comes once every
    host answered: ``go`` with the cluster (every host's cores filled in), or ``abort`` (another host cannot
    run: nothing starts here either)."""
    header = read_header(lines)
    relay.emit({"ready": host_info(results_dir, str(header.get("marker") or ""), program,
                                   [int(p) for p in header.get("ports") or []])})
    while (line := lines.next()) is not None:
        if line.strip() == BEAT.encode():
            continue
        try:
            word = dict(json.loads(line))
        except ValueError:
            continue
        if "go" in word:
            return {**header, **dict(word["go"] or {})}
        if "abort" in word:
            raise UsageError(f"not started: {word['abort']}")
    raise UsageError("not started: the launching host went away before the run began")


class Relay(NullObserver):
    """The part's observer on a remote host: phases, warnings and worker output as JSON lines on stdout,
    written by a thread of their own: a stalled SSH channel (the launching host gone, its client not yet) can
    block that thread, never the run's own; lines beyond ``limit`` waiting are dropped and counted."""

    def __init__(self, out: IO[str] | None = None, limit: int = 10_000) -> None:
        self.out = out or sys.stdout
        self.dropped = 0
        self._lines: queue.Queue[str | None] = queue.Queue(maxsize=limit)
        self._writer = threading.Thread(target=self._write, name="perfkit-relay", daemon=True)
        self._writer.start()

    def emit(self, obj: Mapping[str, Any]) -> None:
        try:
            self._lines.put_nowait(json.dumps(obj))
        except queue.Full:
            self.dropped += 1

    def _write(self) -> None:
        while (line := self._lines.get()) is not None:
            try:
                self.out.write(line + "\n")
                self.out.flush()
            except (OSError, ValueError):  # the SSH session is gone: the watchdog stops the workers
                pass

    def close(self, timeout: float = 5.0) -> None:
        """Every line written (or ``timeout`` spent on them), then the writer ends."""
        try:
            self._lines.put(None, timeout=timeout)
        except queue.Full:
            return
        self._writer.join(timeout)

    def phase(self, text: str) -> None:
        self.emit({"phase": text})

    def warning(self, text: str) -> None:
        self.emit({"warning": text})

    def ended(self, run_dir: Path) -> None:
        """How this part ended, for the launching host to weigh before it stops the others: a hang or a death
        whose cause is on another host is left for that host to name."""
        meta = read_object(run_dir / "run.json")
        if not meta:
            return
        from perfkit.trainer.faultnaming import is_consequence

        failure = meta.get("failure") or {}
        # A worker that died of a peer's silence (UnavailableError...) did not cause the failure: where that peer
        # runs on another host, that host names the cause.
        peer = meta.get("status") == "failed" and not failure.get("signal") and is_consequence(meta.get("error"))
        self.emit({"end": {"status": meta.get("status"), "error": meta.get("error"), "hung": failure.get("hung"),
                           "signal": failure.get("signal"), "peer_lost": bool(peer)}})

    def follow(self, run_dir: Path, workers: list[int], stop: threading.Event) -> threading.Thread:
        """Each local worker's log, line by line as it is written, until ``stop`` (then to its end); and every
        ``LIVE_S`` its status, heartbeat and process, for the launching host's ``perfkit watch``."""
        def loop() -> None:
            offsets: dict[int, int] = {}
            shown = 0.0
            while True:
                done = stop.is_set()
                for i in workers:
                    self._more(run_dir / "workers" / str(i) / "worker.log", i, offsets)
                if time.monotonic() - shown >= LIVE_S or done:
                    shown = time.monotonic()
                    for i in workers:
                        self._live(run_dir / "workers" / str(i), i)
                if done:
                    return
                time.sleep(0.2)

        thread = threading.Thread(target=loop, name="perfkit-log-relay", daemon=True)
        thread.start()
        return thread

    def _live(self, wdir: Path, index: int) -> None:
        """One worker's status and heartbeat as written here, and its process as this host reads it."""
        from perfkit.profiler.procinfo import read_proc

        status, beat = read_object(wdir / "status.json"), read_object(wdir / HEARTBEAT_FILE)
        if not status and not beat:
            return
        pid = beat.get("pid") or status.get("pid")
        proc = read_proc(pid) if isinstance(pid, int) else None
        stamp = beat.get("t_wall_ns")
        age = (time.time_ns() - stamp) / 1e9 if isinstance(stamp, int) else None  # as this host's clock says
        self.emit({"live": {"worker": index, "status": status, "beat": beat, "beat_age_s": age,
                            "proc": proc.to_dict() if proc is not None else None}})

    def _more(self, path: Path, index: int, offsets: dict[int, int]) -> None:
        try:
            with open(path, "rb") as f:
                f.seek(offsets.get(index, 0))
                data = f.read(1 << 20)
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # whole lines only; the rest comes with the next read
        if not end:
            return
        offsets[index] = offsets.get(index, 0) + end
        for line in data[:end].decode("utf-8", "replace").splitlines():
            self.emit({"log": line, "worker": index})


