"""Hangs of a formed cluster: when to call one, and which worker to blame.

Synchronous training hangs rather than crashes: one stuck worker and every peer waits in the all-reduce.
Progress is each worker's heartbeat count of step, validation and epoch events (``worker/heartbeat.py``),
never CPU use: a peer waiting in a collective polls gRPC and looks busy. A hang is called when no worker's
count moved for the limit:
- before every worker made its first step (TF traces and compiles the step, peers wait for the slowest):
  the connect timeout;
- after: ``--hang-timeout`` seconds, or by default ``FACTOR`` x the longest pause between two progress
  events seen so far in this attempt (an epoch's end, validation, a trace window), at least ``FLOOR_S``.
A worker whose main thread is busy computing outside a collective (its CPU at least ``BUSY_SHARE`` of its
cores) holds the call off: a slow worker is not a hung one, up to ``CEILING_S``. Once every worker is past
its last step, no hang is called: what is left is their exits, which ``teardown.py`` watches.

Blame (``diagnose``): the workers that stopped, first by when their progress stopped, are the cause -- a
stopped process (SIGSTOP), one whose heartbeat stopped (its Python blocked in native code), one whose main
thread sits idle in its own code (a sleep, a lock); the peers inside TensorFlow are only waiting for it.
With no such worker, every worker waits in TensorFlow: a collective that does not complete, and the
link between hosts is probed (``links.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLOOR_S = 30.0
FACTOR = 10.0
CEILING_S = 600.0  # a busy worker holds a hang call off at most this long (the old fixed stall timeout)
STALE_S = 5.0  # a heartbeat this old (five missed beats) is lost
BUSY_SHARE = 0.25  # of the worker's cores: computing, not waiting (a waiting peer polls at a few %)


@dataclass
class Progress:
    """The progress seen in one attempt: each worker's last count and when it moved, the longest pause."""

    fixed: float | None  # --hang-timeout seconds, or None: derived
    connect_timeout: float
    counts: dict[int, int] = field(default_factory=dict)
    moved: dict[int, float] = field(default_factory=dict)
    last: float = field(default_factory=time.monotonic)
    longest: float = 0.0
    started: bool = False

    def observe(self, index: int, count: int | None, now: float, watched: list[int]) -> None:
        if count is None or self.counts.get(index) == count:
            return
        first = index not in self.counts
        self.counts[index], self.moved[index] = count, now
        if self.started and not first:
            self.longest = max(self.longest, now - self.last)
        self.last = now
        # a step made by every worker: TF has traced and compiled it, and the cluster runs
        self.started = self.started or all(self.counts.get(i, 0) >= 3 for i in watched)  # epoch, step begin, end

    def heard(self, now: float) -> None:
        """Something other than a heartbeat showed progress (a status change of a command without one)."""
        self.last = max(self.last, now)

    def limit(self) -> tuple[float, str]:
        """The hang limit now, and how it was set (for the message)."""
        if not self.started:
            return self.connect_timeout, "before the first step: the connect timeout"
        if self.fixed is not None:
            return self.fixed, "--hang-timeout"
        derived = FACTOR * self.longest
        how = f"{FACTOR:g}x the longest pause between steps so far ({secs(self.longest)} s)"
        return (FLOOR_S, f"{how}, at least {FLOOR_S:g} s") if derived <= FLOOR_S else (derived, how)

    def quiet(self, now: float) -> float:
        return now - self.last


@dataclass(frozen=True)
class Seen:
    """One live worker as the launcher sees it when its cluster stopped."""

    index: int
    name: str  # "worker 1 (host endpoint)"
    state: str | None  # the process state (psutil): "stopped", "sleeping", ...
    beat: dict[str, Any] | None  # its last heartbeat
    cpu: float | None  # percent of one core
    cores: float  # its budget in cores
    epoch: Any = None
    step: Any = None
    moved_at: float | None = None  # monotonic time its progress last moved


def blame(seen: Seen, now_wall_ns: int) -> str | None:
    """Why this worker is a cause of the hang, in words, or None if it only waits (or cannot be told)."""
    at = f" (epoch {seen.epoch}, step {seen.step})" if seen.step is not None else ""
    if seen.state == "stopped":
        return f"is stopped{at}: its process state is 'stopped' (SIGSTOP or a debugger)"
    beat = seen.beat
    if beat is None:
        return None
    age = (now_wall_ns - int(beat.get("t_wall_ns", 0))) / 1e9
    main = beat.get("main") or {}
    if age > max(STALE_S, 5 * float(beat.get("interval_s", 1.0))):
        return (f"stopped answering{at}: no heartbeat for {age:.0f} s, its Python blocked in native code "
                f"(last seen {place(main)})")
    if main.get("kind") in ("user", "perfkit", "python") and not busy(seen):
        return f"is stuck in its own code{at}: {place(main)}, idle ({cpu_text(seen)})"
    return None


def busy(seen: Seen) -> bool:
    """Computing rather than waiting: its CPU use is at least BUSY_SHARE of its cores."""
    return seen.cpu is not None and seen.cpu >= 100.0 * BUSY_SHARE * max(seen.cores, 0.1)


def waiting(seen: Seen) -> str:
    main = (seen.beat or {}).get("main") or {}
    if main.get("kind") == "tensorflow":
        return f"{seen.name} waits for it inside TensorFlow ({place(main)}, {cpu_text(seen)})"
    return f"{seen.name} waits for it"


@dataclass(frozen=True)
class Diagnosis:
    causes: tuple[int, ...]
    text: str  # the causes first, then who waits
    details: dict[str, Any]


def diagnose(live: list[Seen], now_wall_ns: int) -> Diagnosis | None:
    """The workers that stopped first and why, the others as waiting for them; None when no live worker
    is a cause (every one waits inside TensorFlow, or none can be told)."""
    reasons = {s.index: blame(s, now_wall_ns) for s in live}
    causes = sorted((s for s in live if reasons[s.index]), key=lambda s: (s.moved_at or 0.0, s.index))
    if not causes:
        return None
    others = [s for s in live if not reasons[s.index]]
    parts = [f"{s.name} {reasons[s.index]}" for s in causes] + [waiting(s) for s in others]
    return Diagnosis(tuple(s.index for s in causes), "; ".join(parts),
                     {"hung": [s.index for s in causes], "waiting": [s.index for s in others],
                      "why": {str(s.index): reasons[s.index] for s in causes}})


def lost_text(lost: list[tuple[str, str]]) -> str:
    pairs = ", ".join(f"{a} and {b}" for a, b in lost)
    return f"hosts {pairs} lost each other (no TCP answer between them in the run's network)"


def nobody_stuck(seen: list[Seen], elsewhere: list[str]) -> str:
    """Every live worker waits inside TensorFlow (or cannot be told), no link found cut."""
    where = f"; the cause may be a worker this launcher does not run: {', '.join(elsewhere)}" if elsewhere else ""
    return (f"every worker waits inside TensorFlow and none is stuck in its own code "
            f"({', '.join(s.name for s in seen)}): a collective that does not complete{where}")


def place(main: dict[str, Any]) -> str:
    if not main.get("file"):
        return "in Python's standard library" if main.get("kind") == "python" else "at an unknown place"
    return f"at {Path(str(main['file'])).name}:{main.get('line')} in {main.get('function')}"


def cpu_text(seen: Seen) -> str:
    return f"CPU {seen.cpu:.0f}%" if seen.cpu is not None else "CPU unknown"


def secs(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"
