"""When this process first imported perfkit (for `perfkit run`, within milliseconds of the command's start):
the origin of "command to first step". ``perfkit/__init__`` imports this module first, so the time is taken
at the package's first import. psutil's process create_time is not used because it is derived from the
kernel's boot time and drifted by minutes from the wall clock on a VM here.

One command may start several runs (`perfkit compare`: the baseline, the multi run, a verification). Only
the first counts from the command's start; each later one from its own start (``begin_run``), or its
"command to first step" would include the runs before it."""

from __future__ import annotations

import time

WALL_NS = time.time_ns()
_origin = {"ns": WALL_NS, "runs": 0}


def begin_run() -> int:
    """A run of this process starts: returns (and keeps, for ``run_origin_ns``) the origin of its start-up."""
    if _origin["runs"]:
        _origin["ns"] = time.time_ns()
    _origin["runs"] += 1
    return _origin["ns"]


def run_origin_ns() -> int:
    """The origin of the current run's "command to first step" (the command's start before any run)."""
    return _origin["ns"]


def adopt_origin(ns: int) -> None:
    """This process's run was started by a command on another host (``perfkit launch --hosts``): its
    "command to first step" counts from that command's start, SSH and the hosts' preflight included."""
    _origin["ns"], _origin["runs"] = int(ns), 0  # the run begun next keeps it
