"""Per-process CPU% of the training processes, sampled by a background thread with psutil.

``cpu_percent`` is psutil's ``Process.cpu_percent(interval=None)``: CPU time used since the previous tick
over the wall time between ticks, so 100 is one full core (as ``top`` shows) and a process running on
eight cores reads ~800. That is the figure the article's "~800% single-machine vs ~300% per worker"
compares, so the sampler keeps one ``psutil.Process`` per process for its whole life (a fresh object would
lose the baseline) and never records the priming call, whose 0.0 means nothing.

The thread must be cheap and must never disturb training: ticks read three small /proc files per process
(inside ``oneshot``), rows go into typed arrays and become DataFrames once in ``stop()``, the expensive
child-process scan runs at most every ``CHILDREN_REFRESH_S``, and every failure is logged, not raised.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import pandas as pd
import psutil

from perfkit.errors import UsageError
from perfkit.profiler.columns import Columns

logger = logging.getLogger(__name__)

CPU_DTYPES: dict[str, str] = {
    "t_ns": "int64",
    "worker": "int32",
    "host": "str",
    "pid": "int64",
    "role": "str",
    "cpu_percent": "float64",
    "rss_bytes": "int64",
    "num_threads": "int32",
}
SYSTEM_DTYPES: dict[str, str] = {"t_ns": "int64", "core": "int32", "busy_percent": "float64"}

# Listing descendants reads /proc/<pid>/stat of every process on the machine; worker processes rarely
# fork, so a few seconds' delay in noticing a new child costs less than scanning /proc at every tick.
CHILDREN_REFRESH_S = 2.0
# stop() waits one interval (a tick in progress) plus this for the thread before giving up on it.
JOIN_GRACE_S = 5.0

@dataclass(frozen=True)
class Target:
    """A process to sample and how its rows are labelled."""

    pid: int
    worker: int  # worker index; -1 for the launcher/other
    role: str  # e.g. "trainer", "worker", "launcher"
    host: str  # host name the process runs on


@dataclass(frozen=True)
class SamplerResult:
    """What a sampler recorded. Column names and dtypes are ``CPU_DTYPES`` and ``SYSTEM_DTYPES``.

    ``stats``: interval_s, samples (ticks recorded after the priming one), wall_s (start to stop),
    cpu_s (the sampler thread's own CPU time), overhead_pct (cpu_s / wall_s * 100, in percent of one
    core) and missed_ticks (deadlines skipped because a tick ran late).
    """

    cpu: pd.DataFrame
    system: pd.DataFrame
    stats: dict[str, Any]


@dataclass
class _Tracked:
    proc: psutil.Process
    target: Target  # the label its rows carry
    owner: int  # pid of the watched target it belongs to (its own pid for a watched target)
    primed: bool = False


class Sampler:
    """Samples CPU%, RSS and thread count of watched processes (and their children) every ``interval`` s.

    Thread-safe: ``watch``/``unwatch``/``latest`` may be called from any thread while it runs. Runs once:
    ``start``, then ``stop``; ``stop`` again returns the same result (so does it after a ``with`` block).
    """

    def __init__(
        self,
        interval: float = 0.5,
        targets: Sequence[Target] = (),
        *,
        include_children: bool = True,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if not (isinstance(interval, (int, float)) and math.isfinite(interval) and interval > 0):
            raise UsageError("--sample-interval: must be > 0 seconds")
        self.interval = float(interval)
        self.include_children = include_children
        self._clock = clock
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at: float | None = None
        self._result: SamplerResult | None = None
        # Shared with the thread, guarded by _lock.
        self._targets: dict[int, Target] = {t.pid: t for t in targets}
        self._cpu_rows = Columns(CPU_DTYPES)
        self._system_rows = Columns(SYSTEM_DTYPES)
        self._latest: dict[int, float] = {}
        self._samples = 0
        self._missed = 0
        self._cpu_s = 0.0
        # Owned by the sampler thread alone, so psutil objects are never used from two threads.
        self._procs: dict[int, _Tracked] = {}
        self._children: dict[int, _Tracked] = {}
        self._children_at = -math.inf
        self._system_primed = False
        self._skip: set[tuple[int, float]] = set()  # (pid, create_time) of children not to rediscover
        self._warned: set[str] = set()

    # ------------------------------------------------------------------ public API

    def watch(self, target: Target) -> None:
        """Sample ``target`` from the next tick on (its first row one tick later: priming)."""
        with self._lock:
            self._targets[target.pid] = target

    def unwatch(self, pid: int) -> None:
        """Stop sampling ``pid`` and the children labelled after it. Unknown pids are ignored."""
        with self._lock:
            self._targets.pop(pid, None)

    def start(self) -> None:
        with self._lock:
            if self._thread is not None or self._stop_event.is_set():
                logger.warning("sampler: a Sampler runs once; start() after start() or stop() is ignored")
                return
            self._started_at = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="perfkit-sampler", daemon=True)
        try:
            self._thread.start()
        except RuntimeError as exc:  # e.g. "can't start new thread": lose the figures, not the run
            logger.warning("sampler: could not start its thread (%s); CPU will not be recorded", exc)

    def stop(self) -> SamplerResult:
        with self._lock:
            if self._result is not None:
                return self._result
            thread = self._thread
        self._stop_event.set()
        if thread is not None and thread.ident is not None:
            thread.join(timeout=self.interval + JOIN_GRACE_S)
            if thread.is_alive():
                logger.warning("sampler: thread did not stop within %.1f s; returning what it recorded",
                               self.interval + JOIN_GRACE_S)
        wall_s = time.monotonic() - self._started_at if self._started_at is not None else 0.0
        with self._lock:
            cpu, system = self._cpu_rows.copy(), self._system_rows.copy()
            stats = {
                "interval_s": self.interval,
                "samples": self._samples,
                "wall_s": wall_s,
                "cpu_s": self._cpu_s,
                "overhead_pct": self._cpu_s / wall_s * 100 if wall_s > 0 else 0.0,
                "missed_ticks": self._missed,
            }
        result = SamplerResult(cpu=cpu.to_frame(), system=system.to_frame(), stats=stats)
        with self._lock:
            self._result = result
        return result

    def latest(self) -> dict[int, float]:
        """Worker index -> summed cpu_percent of its processes at the last tick (for a live display)."""
        with self._lock:
            return dict(self._latest)

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ the thread

    def _run(self) -> None:
        cpu0 = time.thread_time()
        try:
            t0 = time.monotonic()
            self._tick()  # primes every process and the per-core baseline; nothing is recorded
            k = 1
            # Deadlines are t0 + k * interval, not "interval after the last tick", so ticks do not drift.
            while not self._stop_event.wait(max(0.0, t0 + k * self.interval - time.monotonic())):
                recorded = self._tick()
                passed = int((time.monotonic() - t0) / self.interval)  # last deadline already behind us
                with self._lock:
                    self._samples += recorded
                    self._missed += max(0, passed - k)
                    self._cpu_s = time.thread_time() - cpu0
                k = max(k, passed) + 1
        except Exception:  # never let threading's excepthook print over the training output
            logger.warning("sampler: thread failed; CPU recorded so far is kept", exc_info=True)
        finally:
            with self._lock:
                self._cpu_s = time.thread_time() - cpu0

    def _tick(self) -> bool:
        """One observation of every process and core; True if it recorded rows."""
        try:
            t_ns = self._clock()
            self._reconcile_targets()
            if self.include_children and time.monotonic() - self._children_at >= CHILDREN_REFRESH_S:
                self._refresh_children()
            rows = self._sample_processes(t_ns)
            system_rows = self._sample_system(t_ns)
        except Exception:
            self._warn_once("tick", "sampler: a tick failed; skipping it", exc_info=True)
            return False
        latest: dict[int, float] = {}
        for row in rows:
            latest[row[1]] = latest.get(row[1], 0.0) + row[5]
        with self._lock:
            self._cpu_rows.extend(rows)
            self._system_rows.extend(system_rows)
            self._latest = latest
        return bool(system_rows)

    def _reconcile_targets(self) -> None:
        """Bring the thread's Process objects in line with watch()/unwatch() calls since the last tick."""
        with self._lock:
            targets = dict(self._targets)
        for pid in [pid for pid in self._procs if pid not in targets]:
            del self._procs[pid]
            self._children = {c: t for c, t in self._children.items() if t.owner != pid}
        for pid, target in targets.items():
            tracked = self._procs.get(pid)
            if tracked is not None:
                tracked.target = target  # watch() of a known pid relabels it
                continue
            child = self._children.pop(pid, None)
            if child is not None:  # already sampled as a child: keep its Process, and so its baseline
                self._procs[pid] = _Tracked(child.proc, target, pid, child.primed)
                continue
            try:
                self._procs[pid] = _Tracked(psutil.Process(pid), target, pid)
            except psutil.Error as exc:
                self._log_drop(target, exc)
                self._forget(target)

    def _refresh_children(self) -> None:
        """Re-list the watched processes' descendants; label each after its nearest watched ancestor."""
        self._children_at = time.monotonic()
        found: dict[int, psutil.Process] = {}
        # Oldest first, so a launcher is listed before its workers, whose subtrees it already covers.
        for tracked in sorted(self._procs.values(), key=lambda t: _create_time(t.proc)):
            if tracked.proc.pid in found:
                continue
            try:
                descendants = tracked.proc.children(recursive=True)
            except psutil.Error:
                continue  # gone or denied: the sampling pass that follows drops it and says why
            for proc in descendants:
                found.setdefault(proc.pid, proc)
        ppids: dict[int, int] = {}
        children: dict[int, _Tracked] = {}
        for pid, proc in found.items():
            if pid in self._procs or (pid, _create_time(proc)) in self._skip:
                continue
            owner = self._nearest_watched(pid, found, ppids)
            if owner is None:
                continue
            parent = self._procs[owner].target
            label = Target(pid, parent.worker, f"{parent.role}-child", parent.host)
            old = self._children.get(pid)
            if old is not None and old.proc == proc:  # same pid and start time: keep the baseline
                old.target, old.owner = label, owner
                children[pid] = old
            else:
                children[pid] = _Tracked(proc, label, owner)
        self._children = children

    def _nearest_watched(
        self, pid: int, found: Mapping[int, psutil.Process], ppids: dict[int, int]
    ) -> int | None:
        seen: set[int] = set()
        while pid not in self._procs:
            if pid in seen or pid not in found:
                return None  # the chain broke (a process in between exited) or pids were reused
            seen.add(pid)
            if pid not in ppids:
                try:
                    ppids[pid] = found[pid].ppid()
                except psutil.Error:
                    return None
            pid = ppids[pid]
        return pid

    def _sample_processes(self, t_ns: int) -> list[tuple[Any, ...]]:
        rows = []
        for table in (self._procs, self._children):
            for tracked in list(table.values()):
                try:
                    row = _sample_one(tracked, t_ns)
                except Exception as exc:  # one unreadable process must not cost the others their tick
                    self._drop(table, tracked, exc)
                    continue
                if row is not None:
                    rows.append(row)
        return rows

    def _sample_system(self, t_ns: int) -> list[tuple[int, int, float]]:
        # psutil 7 keeps this baseline per calling thread, so other callers in the process do not
        # disturb it (older psutil shares one baseline per process).
        busy = psutil.cpu_percent(interval=None, percpu=True)
        if not self._system_primed:
            self._system_primed = True
            return []
        return [(t_ns, core, min(100.0, max(0.0, float(value)))) for core, value in enumerate(busy)]

    def _drop(self, table: dict[int, _Tracked], tracked: _Tracked, exc: BaseException) -> None:
        table.pop(tracked.target.pid, None)
        self._log_drop(tracked.target, exc)
        if table is self._procs:
            self._forget(tracked.target)
        else:  # the next scan would find it again; a reused pid has another start time
            self._skip.add((tracked.target.pid, _create_time(tracked.proc)))

    def _forget(self, target: Target) -> None:
        """Stop retrying a gone watched process, unless watch() has since given its pid a new target."""
        with self._lock:
            if self._targets.get(target.pid) == target:
                del self._targets[target.pid]

    def _log_drop(self, target: Target, exc: BaseException) -> None:
        what = f"pid {target.pid} ({target.role}, worker {target.worker})"
        if isinstance(exc, psutil.NoSuchProcess):  # ZombieProcess included
            logger.debug("sampler: %s exited; no longer sampled", what)
        elif isinstance(exc, psutil.AccessDenied):
            self._warn_once("denied", "sampler: access denied to %s; it is not sampled", what)
        else:
            self._warn_once("error", "sampler: cannot read %s (%s); it is not sampled", what, exc)

    def _warn_once(self, key: str, msg: str, *args: Any, exc_info: bool = False) -> None:
        level = logging.DEBUG if key in self._warned else logging.WARNING
        self._warned.add(key)
        logger.log(level, msg, *args, exc_info=exc_info)


def _sample_one(tracked: _Tracked, t_ns: int) -> tuple[Any, ...] | None:
    """One row for ``tracked``, or None for its priming observation. Raises psutil errors."""
    proc = tracked.proc
    with proc.oneshot():  # status and cpu_times share one /proc/<pid>/stat read
        if proc.status() == psutil.STATUS_ZOMBIE:  # exited but not yet reaped: still readable, all zeros
            raise psutil.ZombieProcess(proc.pid)
        cpu = proc.cpu_percent(interval=None)
        if not tracked.primed:
            tracked.primed = True
            return None
        rss = proc.memory_info().rss
        threads = proc.num_threads()
    t = tracked.target
    return (t_ns, t.worker, t.host, proc.pid, t.role, float(cpu), rss, threads)


def _create_time(proc: psutil.Process) -> float:
    try:
        return proc.create_time()  # cached by psutil.Process at construction
    except psutil.Error:
        return 0.0

