"""The launcher's clock: monotonic time to judge waits by, wall time to stamp records with, and its sleep,
passed in so that its waits and hang limits can be tested without waiting."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time_ns(self) -> int: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The process's own clocks."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time_ns(self) -> int:
        return time.time_ns()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM = SystemClock()
