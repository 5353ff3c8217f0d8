"""A process as ``/proc`` tells it, for ``perfkit watch``: its state, CPU time, memory and the time its
threads waited for a core. A worker on another host is read there (``perfkit launch --hosts``: its host's
agent relays it) and mirrored beside its status on the launching host (``PROC_FILE``)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

import psutil

PROC_FILE = "proc.json"  # a mirrored worker's process, as its own host read it; {"gone": true} once it is not


@dataclass(frozen=True)
class ProcInfo:
    """A process as /proc tells it."""

    status: str  # psutil's: "running", "sleeping", "stopped", ...
    cpu_s: float  # user + system
    rss_bytes: int
    create_wall_s: float
    wait_s: float | None = None  # its threads' time runnable but not running (schedstat run delay)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def mirrored_proc(d: dict[str, Any]) -> ProcInfo | None:
    """``PROC_FILE``'s content as read: the process, or None where its host found it gone (or wrote nothing
    readable)."""
    try:
        return ProcInfo(str(d["status"]), float(d["cpu_s"]), int(d["rss_bytes"]), float(d["create_wall_s"]),
                        None if d.get("wait_s") is None else float(d["wait_s"]))
    except (KeyError, TypeError, ValueError):
        return None


def read_proc(pid: int) -> ProcInfo | None:
    """The process ``pid`` on this machine, or None (gone, or not readable)."""
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            t = p.cpu_times()
            return ProcInfo(p.status(), t.user + t.system, p.memory_info().rss, p.create_time(), run_delay_s(pid))
    except (psutil.Error, OSError):
        return None


def run_delay_s(pid: int) -> float | None:
    """Seconds the process's threads spent runnable but not running, summed (each thread's
    ``/proc/<pid>/task/<tid>/schedstat``, second field: time on a run queue, a throttled cgroup's included);
    None where the kernel keeps no schedstat. psutil does not read it."""
    total, found = 0, False
    try:
        tasks = os.scandir(f"/proc/{pid}/task")
    except OSError:
        return None
    with tasks:
        for task in tasks:
            try:
                with open(f"{task.path}/schedstat", "rb") as fh:
                    total += int(fh.read().split()[1])
                found = True
            except (OSError, ValueError, IndexError):
                continue  # a thread that ended meanwhile
    return total / 1e9 if found else None


