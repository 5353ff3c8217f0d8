"""perfkit: how much faster is a multi-worker TensorFlow run than the single-machine baseline, and why not more."""

from __future__ import annotations

import time as _time

__version__ = "0.1.0"

# When this process first imported perfkit (for `perfkit run`, within milliseconds of the command's
# start): the origin of "command to first step". psutil's process create_time is not used because it is
# derived from the kernel's boot time and drifted by minutes from the wall clock on a VM here.
STARTED_WALL_NS = _time.time_ns()
