"""Reading a running run into a ``Snapshot`` once an interval: run.json, each worker's status.json and
heartbeat.json (``trainer/worker/heartbeat.py``, rewritten each second), and, for a worker whose process is
on this machine, its CPU time and memory from /proc (psutil). Nothing is written into the run.

The slowest worker is found from CPU, not from step rates: in synchronous training every worker ends each
step together, but the one the others wait for computes the whole step while they sleep in the all-reduce:
its threads are always running or waiting for a core (a throttled budget, a busy host: the run delay the
kernel counts in ``schedstat``), so its demand is the largest share of its budget. The others' wait is how
much less of theirs they asked for. CPU used alone cannot tell when the slow host's budget is not the one
recorded (cut, or shared with another tenant): the waiting worker then uses as little as the slow one.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from perfkit._atomic import read_object
from perfkit.analysis.cpu import host_budgets, worker_hosts
from perfkit.errors import ResultsError, UsageError
from perfkit.live.snapshot import RunState, Slowest, Snapshot, WorkerRow, WorkerState
from perfkit.profiler.procinfo import PROC_FILE, ProcInfo, mirrored_proc, read_proc
from perfkit.results import LIVE_DIR, RUN_FILE, iter_run_dirs, load_meta
from perfkit.runmeta import RunMeta
from perfkit.trainer import hang
from perfkit.trainer.worker.heartbeat import HEARTBEAT_FILE

WINDOW_S = 10.0  # rates and the slowest worker over this much of the latest history
NOT_UPDATED_S = 30.0  # a running run in which nothing moved for this long is shown as not updated
STUCK_AFTER_S = 10.0  # no step for this long, idle in its own code: stuck
WAIT_FLAG = 0.2  # the others wait at least this share of a step: the slowest worker is named
# ... over at least this much history, and found in every reading for this long: an epoch's end or one
# worker's validation finishing first makes one reading lopsided, and a busy machine can hold one worker back
# for several seconds while the run keeps its pace (benchmarks/measurements, "perfkit watch"); a straggler
# worth naming persists, and the alarm's budget from a slowdown to its name is 30 s
MIN_SPAN_S = 5.0
NAMED_AFTER_S = 15.0
_STATES = {"starting": WorkerState.STARTING, "loading-data": WorkerState.STARTING,
           "connecting": WorkerState.CONNECTING, "joined": WorkerState.CONNECTING,
           "training": WorkerState.TRAINING, "calibrating": WorkerState.FINISHING, "finishing": WorkerState.FINISHING,
           "done": WorkerState.EXITED, "failed": WorkerState.EXITED, "interrupted": WorkerState.EXITED}


@dataclass(frozen=True)
class _Seen:
    t: float  # the watcher's clock
    samples: float | None
    batches: float | None
    cpu_s: float | None
    wait_s: float | None


class Watcher:
    """``poll()`` reads the run as it is now. ``clock`` (monotonic seconds) and ``wall_ns`` are passed in
    so a test can drive time; ``procs`` reads a process (``read_proc``)."""

    def __init__(self, run_dir: Path, *, baseline: tuple[str, float] | None = None, window_s: float = WINDOW_S,
                 clock: Callable[[], float] = time.monotonic, wall_ns: Callable[[], int] = time.time_ns,
                 procs: Callable[[int], ProcInfo | None] = read_proc) -> None:
        self.run_dir, self.baseline, self.window_s = run_dir, baseline, window_s
        self._clock, self._wall_ns, self._procs = clock, wall_ns, procs
        self._history: dict[int, deque[_Seen]] = {}
        self._moved: dict[int, tuple[float, Any]] = {}  # worker -> (when its step count last changed, it)
        self._local: dict[int, bool] = {}  # pid -> its process is on this machine
        self._streak: tuple[int | None, float] = (None, 0.0)  # the worker found slowest, and since when

    def poll(self) -> Snapshot:
        meta = _read_meta(self.run_dir)
        now, wall = self._clock(), self._wall_ns()
        budgets, hosts = host_budgets(meta), worker_hosts(meta)
        rows, statuses, newest = [], {}, _mtime(self.run_dir / RUN_FILE)
        for wdir in _worker_dirs(self.run_dir):
            status, beat = read_object(wdir / "status.json"), read_object(wdir / HEARTBEAT_FILE)
            if not status and not beat:  # nothing written yet
                continue
            newest = max(newest, _mtime(wdir / "status.json"), _mtime(wdir / HEARTBEAT_FILE))
            index = int(wdir.name)
            statuses[index] = status
            host = str(status.get("host") or hosts.get(index) or "?")
            cores = _share(budgets.get(host), hosts, host)
            rows.append(self._row(index, host, cores, status, beat, now, wall, read_object(wdir / PROC_FILE)))
        if meta.mode != "ps" and any(s.get("state") == "done" for s in statuses.values()):
            rows = _past_steps(rows)
        state = RunState.RUNNING if meta.status == "running" else RunState.FINISHED
        age = max(0.0, wall / 1e9 - newest)
        if state is RunState.RUNNING and age > NOT_UPDATED_S and not self._launcher_alive(meta):
            state = RunState.NOT_UPDATED
        return self._snapshot(meta, state, age, tuple(rows), statuses, wall)

    def _row(self, index: int, host: str, cores: float | None, status: dict[str, Any], beat: dict[str, Any],
             now: float, wall: int, mirrored: dict[str, Any]) -> WorkerRow:
        """``mirrored``: the worker's process as its own host read it (a run on SSH hosts), or {}."""
        pid = _int(beat.get("pid")) or _int(status.get("pid"))
        if mirrored:
            proc = mirrored_proc(mirrored)
            gone = proc is None
        else:
            proc = self._proc(pid, status) if pid else None
            gone = bool(pid and self._local.get(pid) and proc is None)
        position = beat if beat.get("step") is not None or not status else status
        seen = _Seen(now, _num(beat.get("samples")), _num(beat.get("batches")), proc.cpu_s if proc else None,
                     proc.wait_s if proc else None)
        history = self._history.setdefault(index, deque())
        if history and seen.batches is not None and (history[-1].batches or 0) > seen.batches:
            history.clear()  # a restarted worker counts from zero again
        history.append(seen)
        while len(history) > 2 and now - history[1].t >= self.window_s:
            history.popleft()
        if self._moved.get(index, (None, None))[1] != seen.batches:
            self._moved[index] = (now, seen.batches)
        first = history[0]
        span = now - first.t
        steps = _rate(first.batches, seen.batches, span)
        cpu, wait = _rate(first.cpu_s, seen.cpu_s, span), _rate(first.wait_s, seen.wait_s, span)
        age = (wall - int(beat["t_wall_ns"])) / 1e9 if _int(beat.get("t_wall_ns")) else None
        state, where = self._state(index, status, beat, proc, gone, (age, cpu, cores, now))
        return WorkerRow(index, host, pid, state, where, _int(position.get("epoch")), _int(position.get("step")),
                         steps, None if cpu is None else cpu * 100.0, None if wait is None else wait * 100.0, cores,
                         proc.rss_bytes if proc else None, age)

    def _proc(self, pid: int, status: dict[str, Any]) -> ProcInfo | None:
        """The worker's process when it is on this machine: the pid's process started with the worker (a pid on
        another host, or reused since, is not it)."""
        proc = self._procs(pid)
        if pid not in self._local:
            started = _int(status.get("started_wall_ns"))
            if proc is None or started is None:
                return None  # not known yet: asked again next time
            self._local[pid] = -5 <= started / 1e9 - proc.create_wall_s <= 60
        return proc if self._local[pid] else None

    def _state(self, index: int, status: dict[str, Any], beat: dict[str, Any], proc: ProcInfo | None, gone: bool,
               seen: tuple[float | None, float | None, float | None, float]) -> tuple[WorkerState, str | None]:
        """Its state and, for one that is stuck or silent, where its main thread was."""
        age, cpu, cores, now = seen
        said = _STATES.get(str(status.get("state") or "starting"), WorkerState.STARTING)
        main = beat.get("main") if isinstance(beat.get("main"), dict) else {}
        if said is WorkerState.EXITED or gone:
            return WorkerState.EXITED, None
        if proc is not None and proc.status == psutil.STATUS_STOPPED:
            return WorkerState.STOPPED, hang.place(main) if main else None
        if age is not None and age > max(hang.STALE_S, 5 * float(beat.get("interval_s") or 1.0)):
            return WorkerState.NOT_ANSWERING, hang.place(main) if main else None
        idle = cpu is not None and cpu < hang.BUSY_SHARE * max(cores or 1.0, 0.1)
        if (said is WorkerState.TRAINING and main.get("kind") in ("user", "perfkit", "python") and idle
                and now - self._moved.get(index, (now, None))[0] >= STUCK_AFTER_S):
            return WorkerState.STUCK, hang.place(main)
        if said is WorkerState.TRAINING and beat.get("validating"):
            return WorkerState.VALIDATING, None
        return said, None

    def _snapshot(self, meta: RunMeta, state: RunState, age: float, rows: tuple[WorkerRow, ...],
                  statuses: dict[int, dict[str, Any]], wall: int) -> Snapshot:
        """``statuses``: each row's status.json as this reading read it (each file read once a reading)."""
        status = next((statuses[r.index] for r in rows), {})
        epochs, per_epoch = _int(status.get("epochs")), _int(status.get("steps_per_epoch"))
        rates = [self._sample_rate(r.index) for r in rows]
        samples = sum(r for r in rates if r is not None) if any(r is not None for r in rates) else None
        speedup = samples / self.baseline[1] if samples and self.baseline and self.baseline[1] > 0 else None
        epoch = max((r.epoch for r in rows if r.epoch is not None), default=None)
        running = state is RunState.RUNNING
        # no epoch count (a custom loop): the length its first epoch had, once that epoch has ended
        seen = _int((status.get("plan") or {}).get("steps_per_epoch")) if not epochs else None
        return Snapshot(meta.run_id, state, meta.status, age, _elapsed(meta, wall), rows, epochs, per_epoch, epoch,
                        samples, self.baseline[0] if self.baseline else None, speedup,
                        self._steady(slowest(rows), self._clock()) if running else None,
                        _eta(rows, epochs, per_epoch, statuses, wall) if running else None,
                        _eta(rows, epoch + 1, seen, statuses, wall) if running and seen and epoch is not None else None)

    def _launcher_alive(self, meta: RunMeta) -> bool:
        """The process that launched the run (a --mode single run's trainer) lives on this machine: quiet
        files then mean a long epoch, not a run whose launcher is gone."""
        return launcher_alive(self.run_dir, meta, self._procs)

    def _steady(self, found: Slowest | None, now: float) -> Slowest | None:
        """``found`` once every reading for ``NAMED_AFTER_S`` (over ``MIN_SPAN_S`` of history) found it."""
        spans = [h[-1].t - h[0].t for h in self._history.values() if h]
        if found is None or not spans or min(spans) < MIN_SPAN_S:
            self._streak = (None, now)
            return None
        if self._streak[0] != found.worker:
            self._streak = (found.worker, now)
        return found if now - self._streak[1] >= NAMED_AFTER_S else None

    def _sample_rate(self, index: int) -> float | None:
        history = self._history.get(index)
        if not history:
            return None
        return _rate(history[0].samples, history[-1].samples, history[-1].t - history[0].t)


def _past_steps(rows: list[WorkerRow]) -> list[WorkerRow]:
    """A peer's steps ended (it said done): synchronous workers run the same steps, so every worker's are
    behind it and what is left is its exit, however long and idle, not a stuck worker (as the launcher
    judges it: ``trainer/teardown.py``). A custom loop never says when its last step ran; this is how a
    worker whose exit takes long (TensorFlow's teardown) is told from a stuck one."""
    past = (WorkerState.TRAINING, WorkerState.STUCK)
    return [replace(r, state=WorkerState.FINISHING, where=None) if r.state in past else r for r in rows]


def slowest(rows: tuple[WorkerRow, ...]) -> Slowest | None:
    """The worker that used the largest share of its CPU budget, when the others used at least ``WAIT_FLAG``
    less of theirs (they wait for it); None with fewer than two training workers or no clear one."""
    live = [r for r in rows if r.state in (WorkerState.TRAINING, WorkerState.VALIDATING) and r.busy is not None]
    if len(live) < 2:
        return None
    top = max(live, key=lambda r: r.busy or 0.0)
    if not (top.busy or 0.0) > 0:
        return None
    share = sum(max(0.0, 1.0 - (r.busy or 0.0) / (top.busy or 1.0)) for r in live if r is not top) / (len(live) - 1)
    if share < WAIT_FLAG:
        return None
    step_s = 1.0 / top.steps_per_s if top.steps_per_s else None
    return Slowest(top.index, top.host, share, share * step_s if step_s else None)


def _eta(rows: tuple[WorkerRow, ...], epochs: int | None, per_epoch: int | None,
         statuses: dict[int, dict[str, Any]], wall: int) -> float | None:
    """Seconds to the end of epoch ``epochs`` (the plan's, or the one in progress) at the slowest-progressing
    worker's pace since its training began."""
    if not epochs or not per_epoch:
        return None
    out = []
    for r in rows:
        status = statuses[r.index]
        started = next((_int(p.get("t_wall_ns")) for p in status.get("phases") or []
                        if isinstance(p, dict) and p.get("state") == "training"), None)
        done = (r.epoch or 0) * per_epoch + (r.step + 1 if r.step is not None else 0)
        first = (_int(status.get("epoch")) or 0) * per_epoch if status.get("attempt") else 0
        if started and done > first and r.state not in (WorkerState.EXITED, WorkerState.FINISHING):
            out.append((epochs * per_epoch - done) * (wall - started) / 1e9 / (done - first))
    return max(out) if out else None


def launcher_alive(run_dir: Path, meta: RunMeta, procs: Callable[[int], ProcInfo | None] = read_proc) -> bool:
    """Whether the run's launcher (launch.json's ``launcher_pid``; a --mode single run's trainer) is a live
    process here that started no later than the run."""
    pid = _int(read_object(run_dir / "launch.json").get("launcher_pid"))
    if pid is None and meta.mode == "single" and meta.workers:
        pid = meta.workers[0].pid
    proc = procs(pid) if pid else None
    started = _started_s(meta)
    return bool(proc and proc.status not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
                and (started is None or proc.create_wall_s <= started + 5))


def find_running(results_dir: Path, now_wall_s: float | None = None) -> Path:
    """The one running run under ``results_dir``: its directory; a one-line error when none or several."""
    now = time.time() if now_wall_s is None else now_wall_s
    running = []
    for path in [*iter_run_dirs(Path(results_dir) / LIVE_DIR), *iter_run_dirs(results_dir)]:
        try:
            meta = load_meta(path)
        except ResultsError:
            continue
        if meta.status == "running" and (now - _newest(path) <= NOT_UPDATED_S or launcher_alive(path, meta)):
            running.append(path)
    mirrored = {p.name for p in running if p.parent.name == LIVE_DIR}  # a run on SSH hosts: all its workers
    running = [p for p in running if p.parent.name == LIVE_DIR or p.name.split("--")[0] not in mirrored]
    if not running:
        raise UsageError(f"RUN: no run is running under {results_dir} (--results-dir); name one: perfkit watch "
                         f"RUN_DIR (perfkit runs lists them)")
    if len(running) > 1:
        names = ", ".join(p.name for p in running)
        raise UsageError(f"RUN: {len(running)} runs are running under {results_dir} ({names}); name one: "
                         f"perfkit watch RUN")
    return running[0]


def _read_meta(run_dir: Path) -> RunMeta:
    try:
        return load_meta(run_dir)
    except ResultsError as exc:
        raise ResultsError(f"{run_dir / RUN_FILE}: {exc}") from None


def _worker_dirs(run_dir: Path) -> list[Path]:
    root = run_dir / "workers"
    try:
        return sorted((p for p in root.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    except OSError:
        return []


def _newest(run_dir: Path) -> float:
    paths = [run_dir / RUN_FILE] + [w / n for w in _worker_dirs(run_dir) for n in ("status.json", HEARTBEAT_FILE)]
    return max(_mtime(p) for p in paths)




def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _share(budget: float | None, hosts: dict[int, str], host: str) -> float | None:
    """A worker's share of its host's cores (its host's budget over the workers there)."""
    n = sum(1 for h in hosts.values() if h == host)
    return budget / n if budget and n else None


def _rate(a: float | None, b: float | None, span: float) -> float | None:
    if a is None or b is None or span <= 0 or b < a:
        return None
    return (b - a) / span


def _started_s(meta: RunMeta) -> float | None:
    """When the run started, in wall seconds (run.json's ``started``)."""
    try:
        return datetime.fromisoformat(str(meta.started).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _elapsed(meta: RunMeta, wall: int) -> float | None:
    started = _started_s(meta)
    return None if started is None else max(0.0, wall / 1e9 - started)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def _num(value: Any) -> float | None:
    return float(value) if _int(value) is not None else None
