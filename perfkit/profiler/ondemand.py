"""Trace windows asked for while a run trains (``perfkit watch --trace-now``): the request is a small file in
the run directory (``trace-now.json``: an id and a number of steps) that each worker reads at most once a
second, at a step's start. A new request starts a capture at that step, under its own TensorBoard session
(``<run id>-now<id>``), guarded as the scheduled window is (``tracewindow.TraceCapture``); it waits while the
scheduled window runs. Each request's outcome goes into the worker's status (``traces_now``).

``Captures`` puts the scheduled window and the asked-for ones behind the one interface the step hooks use.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfkit.profiler.tracewindow import CaptureTarget, TraceCapture, Window, tf_capture

log = logging.getLogger(__name__)

REQUEST_FILE = "trace-now.json"
POLL_S = 1.0
MAX_STEPS = 100  # a window asked for is this many steps at most
_DONE = ("captured", "failed", "skipped")


FRESH_S = 60.0  # a worker starting takes a request asked at most this long before (a restart retries it)


def read_request(run_dir: Path) -> tuple[int, int, int] | None:
    """The latest request in ``run_dir``: (id, steps, asked at wall ns), or None (none, or not readable)."""
    try:
        d = json.loads((run_dir / REQUEST_FILE).read_text())
        rid, steps, asked = int(d["id"]), int(d["steps"]), int(d.get("asked_wall_ns") or 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (rid, min(max(steps, 1), MAX_STEPS), asked) if rid > 0 else None


class OnDemand:
    """The windows asked for in one worker. A request already there when the worker starts is taken only if
    it is fresh (``FRESH_S``): a worker restarted after the profiler crashed in that window takes it again,
    one started long after does not trace what was asked of another run's attempt."""

    def __init__(self, target: CaptureTarget, report: Callable[[dict[str, Any]], None],
                 make: Callable[[Window, CaptureTarget, Callable[[dict[str, Any]], None]], TraceCapture] = tf_capture,
                 clock: Callable[[], float] = time.monotonic, wall_ns: Callable[[], int] = time.time_ns) -> None:
        self.target, self._report, self._make, self._clock = target, report, make, clock
        first = read_request(target.run_dir)
        stale = first is not None and wall_ns() - first[2] > FRESH_S * 1e9
        self._served = first[0] if first and stale else (first[0] - 1 if first else 0)
        self._next_poll = 0.0
        self.capture: TraceCapture | None = None
        self.results: dict[str, dict[str, Any]] = {}

    def step_begin(self, global_step: int, busy: bool) -> None:
        """``busy``: the scheduled window runs or starts now, so a new one waits."""
        if self.capture is None and not busy and self._clock() >= self._next_poll:
            self._next_poll = self._clock() + POLL_S
            request = read_request(self.target.run_dir)
            if request is not None and request[0] > self._served:
                self._start(request[0], Window(global_step, global_step + request[1] - 1))
        if self.capture is not None:
            self.capture.step_begin(global_step)
            self._forget_done()

    def _start(self, rid: int, window: Window) -> None:
        self._served = rid
        target = CaptureTarget(self.target.run_dir, f"{self.target.session}-now{rid}", self.target.host_name)

        def changed(result: dict[str, Any]) -> None:
            self.results[str(rid)] = result
            self._report({k: dict(v) for k, v in self.results.items()})

        self.capture = self._make(window, target, changed)
        log.info("trace window asked for (request %d): steps %d-%d", rid, window.first, window.last)

    def _forget_done(self) -> None:
        if self.capture is not None and self.capture.result.get("status") in _DONE:
            self.capture = None


class Captures:
    """The scheduled window (or none) and the windows asked for, driven by one set of step hooks."""

    def __init__(self, scheduled: TraceCapture | None, on_demand: OnDemand | None) -> None:
        self.scheduled, self.on_demand = scheduled, on_demand

    def _all(self) -> list[TraceCapture]:
        extra = [self.on_demand.capture] if self.on_demand is not None and self.on_demand.capture else []
        return ([self.scheduled] if self.scheduled is not None else []) + extra

    @property
    def active(self) -> bool:
        return any(c.active for c in self._all())

    def step_begin(self, global_step: int) -> None:
        if self.scheduled is not None:
            self.scheduled.step_begin(global_step)
        if self.on_demand is not None:
            s = self.scheduled
            busy = s is not None and (s.active or (s.result.get("status") == "pending"
                                                   and s.window.first <= global_step + MAX_STEPS))
            self.on_demand.step_begin(global_step, busy)

    def step_end(self, global_step: int, last_of_epoch: bool = False) -> None:
        for c in self._all():
            c.step_end(global_step, last_of_epoch)

    def epoch_boundary(self) -> None:
        for c in self._all():
            c.epoch_boundary()
        if self.on_demand is not None:
            self.on_demand._forget_done()

    def finish(self) -> None:
        for c in self._all():
            c.finish()
