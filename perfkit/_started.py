"""When this process first imported perfkit (for `perfkit run`, within milliseconds of the command's start):
the origin of "command to first step". ``perfkit/__init__`` imports this module first, so the time is taken
at the package's first import. psutil's process create_time is not used because it is derived from the
kernel's boot time and drifted by minutes from the wall clock on a VM here."""

from __future__ import annotations

import time

WALL_NS = time.time_ns()
