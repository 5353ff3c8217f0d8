"""perfkit: how much faster is a multi-worker TensorFlow run than the single-machine baseline, and why not more."""

from __future__ import annotations

import time as _time

__version__ = "0.1.0"

# When this process first imported perfkit (for `perfkit run`, within milliseconds of the command's
# start): the origin of "command to first step". psutil's process create_time is not used because it is
# derived from the kernel's boot time and drifted by minutes from the wall clock on a VM here.
STARTED_WALL_NS = _time.time_ns()


def record(global_batch: int, **options: object) -> object:
    """Record your own script's ``model.fit`` (``perfkit.recorder``): ``with perfkit.record(global_batch=N)
    as rec: model.fit(..., callbacks=rec.callbacks)``."""
    from perfkit.recorder import record as _record

    return _record(global_batch, **options)  # type: ignore[arg-type]
