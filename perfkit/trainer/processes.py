"""Multi mode: start this machine's workers of a cluster, watch them, and never hang silently.

The launcher starts one ``perfkit.trainer.worker.main`` process per local worker (its own session, so
the launcher alone decides when they stop), samples their CPU, follows their status files, and:
- fails with the names of the workers that never joined when the cluster does not form in time;
- notices a dead worker within a second, stops the others (SIGTERM, then SIGKILL: TF's preemption
  handler swallows SIGTERM) and records which worker died, how, and its last log lines;
- notices a hung cluster (no step ends on any worker for the hang limit) and names the worker that stopped
  first, the peers as waiting for it (``hang.py``, from each worker's heartbeat);
- once every worker is past its last step, times each one's exit instead, never calling that a hang
  (``teardown.py``);
- with ``max_restarts``, restarts the whole cluster and lets BackupAndRestore resume the last epoch;
- on Ctrl-C, stops every worker and marks the run ``interrupted``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from perfkit.cluster import ClusterSpec, is_loopback
from perfkit.events import Observer
from perfkit.profiler.sampler import Sampler, Target
from perfkit.results import RunDir, write_json
from perfkit.trainer import hang, teardown
from perfkit.trainer.lostworkers import LostWorkers
from perfkit.trainer.forkserver import Adopted, ForkServer, worker_env
from perfkit.trainer.hosts.cpubudget import Placement
from perfkit.trainer.probe import listening, lost_links, unreachable
from perfkit.trainer.worker.heartbeat import HEARTBEAT_FILE, read_heartbeat
from perfkit.trainer.worker.session import CLAIM_FILE

if TYPE_CHECKING:
    from perfkit.trainer.hosts.hostenv import HostEnv

log = logging.getLogger(__name__)

POLL_S = 0.25
# A worker past its imports: its host's deferred budget applies.
LIMITED_FROM = ("training", "finishing", "done", "serving")
STOP_GRACE_S = 3.0


@dataclass
class Worker:
    placement: Placement
    proc: subprocess.Popen[bytes] | Adopted | None = None
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def index(self) -> int:
        return self.placement.index


@dataclass(frozen=True)
class Failure:
    status: str  # failed | interrupted
    message: str
    details: dict[str, Any]


class PerfkitWorker:
    """What the launcher starts by default: perfkit's own worker (``perfkit.trainer.worker.main``), which
    reads launch.json, applies its CPU limits itself and reports every state in status.json."""

    reports = True  # writes status.json from its first instant: the launcher can rely on its states
    forms_cluster = True
    forkable = True  # the fork server (forkserver.py) can start it with TensorFlow already imported

    def command(self, run: RunDir, placement: Placement) -> list[str]:
        return [sys.executable, "-m", "perfkit.trainer.worker.main", str(run.path), str(placement.index)]

    def environment(self, run: RunDir, cluster: ClusterSpec, placement: Placement) -> dict[str, str]:
        return worker_env()


class Launcher:
    def __init__(self, run: RunDir, cluster: ClusterSpec, placements: list[Placement], env: HostEnv | None,
                 sampler: Sampler, observer: Observer, connect_timeout: float, hang_timeout: float | None = None,
                 spawn: Any = None, forks: ForkServer | None = None) -> None:
        self.run, self.cluster, self.env = run, cluster, env
        self.spawn = spawn or PerfkitWorker()  # or a user's command (perfkit.trainer.command.UserCommand)
        self.forks = forks if getattr(self.spawn, "forkable", False) else None
        self.sampler, self.observer, self.connect_timeout = sampler, observer, connect_timeout
        self.hang_timeout = hang_timeout  # None: derived from the run's own pauses (hang.Progress)
        self.progress = self._new_progress()
        self._beats: dict[int, dict[str, Any]] = {}
        self._last_seen: dict[int, Any] = {}
        self.workers = [Worker(p) for p in placements]
        self._shown: dict[int, str] = {}
        self._progress_started = False
        self._epochs_shown = 0
        self._chief_seen, self._probed = False, 0.0  # a part of a ps cluster without its chief
        self.ends = teardown.Ends()  # each worker's last step to its exit (trainer/teardown.py)
        self.lost = LostWorkers(cluster)  # ParameterServerStrategy workers that died while the run went on

    # -- one attempt -------------------------------------------------------------------------------
    def start(self) -> None:
        if self.env:
            self.env.hold()
        for w in self.workers:
            wdir = self.run.worker_dir(w.index)
            (wdir / "status.json").unlink(missing_ok=True)
            (wdir / CLAIM_FILE).unlink(missing_ok=True)  # this attempt's recording process claims it anew
            (wdir / HEARTBEAT_FILE).unlink(missing_ok=True)
            w.proc = self._spawn(w, wdir / "worker.log")
            if self.env:
                self.env.started(w.index, w.proc.pid)
            self.sampler.watch(Target(w.proc.pid, w.index, self.cluster.tasks[w.index].role, w.placement.host))
            w.status = {}
        self.progress, self._beats, self.ends = self._new_progress(), {}, teardown.Ends()

    def _spawn(self, w: Worker, log_path: Path) -> subprocess.Popen[bytes] | Adopted:
        """Forked with TensorFlow imported where the fork server runs; else a new process in its own session."""
        argv = self.spawn.command(self.run, w.placement)
        env = self.spawn.environment(self.run, self.cluster, w.placement)
        if self.forks is not None:
            return self.forks.spawn(argv, env, log_path, self.env.netns(w.index) if self.env else None)
        prefix = self.env.wrap(w.index) if self.env else []  # its host's network namespace
        with open(log_path, "ab") as out:
            return subprocess.Popen([*prefix, *argv], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=env)

    def _new_progress(self) -> hang.Progress:
        if self.spawn.forms_cluster:
            return hang.Progress(self.hang_timeout, self.connect_timeout)
        # One process alone keeps no peer waiting: a pause of its own is not called a hang before the ceiling.
        return hang.Progress(self.hang_timeout or hang.CEILING_S, hang.CEILING_S)

    def wait(self) -> Failure | None:
        """Until every worker exited 0 (None) or something went wrong (the Failure)."""
        # One process alone forms no cluster: nothing to wait for but its exit (and its progress).
        deadline = time.monotonic() + self.connect_timeout if self.spawn.forms_cluster else 0.0
        while True:
            self._read_statuses()
            failure = self._dead_worker()
            if failure is not None:
                return failure
            if self._finished():
                return self._chief_alone() if deadline else None
            if deadline and all(self._joined(w) for w in self.workers) and self._chief_up():
                deadline = 0.0
            if deadline and time.monotonic() > deadline:
                return self._not_formed()
            if not deadline and self._past_steps():
                if self._overdue():
                    return None  # every step ran: the run is complete, its slow exits said as warnings
            elif not deadline:
                hung = self._hung()
                if hung is not None:
                    return hung
            time.sleep(POLL_S)

    def _past_steps(self) -> bool:
        """Every running watched worker ran its last step: only their exits are left (teardown.py), which
        the hang limit, made for steps, must not judge. A worker says so itself (``finishing``, ``done``);
        or, the cluster having stepped, a peer whose exit ends the run exited 0: synchronous workers run the
        same steps, so the others' are behind them too (a custom loop, whose length is not known ahead,
        tears its iterators down before it can say it is done)."""
        running = self._watched()
        if not running:
            return False
        if all(teardown.past_steps(w.status) for w in running):
            return True
        if not (self.progress.started and any(w.proc is not None and w.proc.poll() == 0 for w in self._finishing())):
            return False
        now_mono, now_wall = time.monotonic(), time.time_ns()
        for w in running:  # their last step: when their progress last moved
            moved = self.progress.moved.get(w.index, now_mono)
            self.ends.assume_ended(w.index, now_wall - int((now_mono - moved) * 1e9))
        return True

    def _overdue(self) -> bool:
        """Workers past their steps that did not exit in time are stopped (the run stays complete)."""
        now = time.time_ns()
        late = self.ends.overdue([self._seen(w) for w in self._watched()], now)
        if not late:
            return False
        self.ends.stop(late, now)
        self.stop()
        return True

    def _finishing(self) -> list[Worker]:
        """The processes whose exit ends the run: every worker, or under ParameterServerStrategy the chief
        (workers and parameter servers serve until they are stopped)."""
        if not self.cluster.is_ps:
            return self.workers
        return [w for w in self.workers if self.cluster.tasks[w.index].role == "chief"]

    def _chief_up(self) -> bool:
        """A host that runs only servers of a ps cluster has formed once its remote chief answered
        (``_finished`` probes it); any other has nothing more to wait for."""
        return not self.cluster.is_ps or bool(self._finishing()) or self._chief_seen

    def _finished(self) -> bool:
        mine = self._finishing()
        if mine:
            return all(self._ended_well(w) for w in mine)
        # A host of a ps cluster that runs only servers: done once the chief, seen up, is gone.
        chief = self.cluster.chief
        if chief is None or time.monotonic() - self._probed < 2.0:
            return False
        self._probed = time.monotonic()
        up = not unreachable([chief], timeout=1.0)
        self._chief_seen = self._chief_seen or up
        return self._chief_seen and not up

    def _ended_well(self, w: Worker) -> bool:
        """Exited 0, or killed by a signal after its last step (a teardown crash: teardown.py)."""
        code = w.proc.poll() if w.proc is not None else None
        return code == 0 or (code is not None and self.ends.excused(w.index))

    def _lead(self) -> Worker:
        """Whose status shows the run's progress: the chief of a ParameterServerStrategy cluster, else
        the first local worker."""
        return next((w for w in self.workers if self.cluster.tasks[w.index].role == "chief"), self.workers[0])

    def _watched(self) -> list[Worker]:
        """The running workers whose progress counts: under ParameterServerStrategy only the chief (servers
        make no steps)."""
        running = [w for w in self.workers if w.proc is not None and w.proc.poll() is None]
        if self.cluster.is_ps:
            running = [w for w in running if self.cluster.tasks[w.index].role == "chief"]
        return running

    def _hung(self) -> Failure | None:
        """A formed cluster whose workers all stopped making progress (the processes live, so nothing else
        would end the wait): the worker that stopped first named as the cause, the others as waiting."""
        running = self._watched()
        if not running:
            return None
        quiet = self.progress.quiet(time.monotonic())
        limit, how = self.progress.limit()
        if quiet <= limit:
            return None
        seen = [self._seen(w) for w in running]
        found = hang.diagnose(seen, time.time_ns())
        ceiling = self.hang_timeout if self.hang_timeout is not None else hang.CEILING_S
        if found is None and any(hang.busy(x) for x in seen) and quiet <= max(limit, ceiling):
            return None  # a worker computes outside a collective: slow, not hung
        why = f"no step ended on any worker for {hang.secs(quiet)} s (limit {hang.secs(limit)} s: {how})"
        details = {"quiet_s": round(quiet, 1), "limit_s": round(limit, 1), "limit": how}
        if found is not None:
            return Failure("failed", f"{found.text}; {why}", {**found.details, **details})
        text, more = self._nobody_stuck(seen)
        return Failure("failed", f"{text}; {why}", {"hung": [], "waiting": [x.index for x in seen], **more, **details})

    def _nobody_stuck(self, seen: list[hang.Seen]) -> tuple[str, dict[str, Any]]:
        """Every live worker waits inside TensorFlow (or cannot be told): a link lost between hosts, where the
        run's network can be probed, or a collective that does not complete."""
        lost = lost_links(self.env, self.cluster) if self.env is not None else []
        if lost:
            text = f"{hang.lost_text(lost)}; their workers are alive and wait in a collective"
            return text, {"lost_links": [list(p) for p in lost]}
        mine = {w.index for w in self.workers}
        return hang.nobody_stuck(seen, [self._short(t.index) for t in self.cluster.tasks if t.index not in mine]), {}

    def _seen(self, w: Worker) -> hang.Seen:
        try:
            state = psutil.Process(w.proc.pid).status() if w.proc is not None else None
        except psutil.Error:
            state = None
        beat = self._beats.get(w.index)
        where = beat if beat is not None and beat.get("step") is not None else w.status  # the freshest: its heartbeat
        return hang.Seen(w.index, self._name(w), state, beat, self.sampler.latest().get(w.index), self._cores(w),
                         where.get("epoch"), where.get("step"), self.progress.moved.get(w.index))

    def _cores(self, w: Worker) -> float:
        """The cores a worker may use: its share of its host's budget, else its pinned cores, else the machine."""
        p = w.placement
        if p.host_budget:
            return p.host_budget / max(1, sum(1 for o in self.workers if o.placement.host == p.host))
        return float(len(p.cores)) if p.cores else float(os.cpu_count() or 1)

    def _joined(self, w: Worker) -> bool:
        """Its status says it joined; or, for a command that may write no status (a user's script without
        perfkit.record), its TF server listens on its port: every server up means the cluster forms."""
        if w.status.get("state") in ("joined", "training", "finishing", "done", "serving"):
            return True
        return (not self.spawn.reports and w.proc is not None
                and listening(w.proc.pid, self.cluster.tasks[w.index].port))

    def _not_formed(self) -> Failure:
        """Name the workers that never joined: local ones that never reached 'connecting', and every
        other worker of the cluster whose port accepts no connection (its process was never started)."""
        local = {w.index: w for w in self.workers}
        stuck = [i for i, w in local.items() if not self._joined(w) and w.status.get("state") != "connecting"]
        others = [spec for spec in self.cluster.tasks if spec.index not in local]
        # TF binds 0.0.0.0:port, so a local peer on one of our own ports would be answered by our worker:
        # such a peer cannot be running here, and is never joined.
        ours = {self.cluster.tasks[i].port for i in local}
        shadowed = {s.index for s in others if is_loopback(s.address) and s.port in ours}
        probed = unreachable([s for s in others if s.index not in shadowed])
        missing = sorted(set(stuck) | shadowed | {spec.index for spec in probed})
        names = ", ".join(self._short(i) for i in missing)
        if not names:
            names = "none: every port answers, yet the cluster did not form (do all hosts use the same cluster file?)"
        what = "tasks" if self.cluster.is_ps else "workers"
        chief = self.cluster.chief
        hint = ("; a parameter-server script's chief joins when it builds tf.distribute.ParameterServerStrategy"
                if chief is not None and chief.index in missing else "")
        return Failure("failed", f"the cluster did not form within {self.connect_timeout:g} s; {what} that never "
                       f"joined: {names}{hint}", {"missing": missing})

    def _chief_alone(self) -> Failure | None:
        """A ParameterServerStrategy chief that exited 0 before the cluster formed, having scheduled no step
        for perfkit's start-up hook to see: the script never trained through the strategy (it ran alone)."""
        chief = next((w for w in self._finishing() if self.cluster.tasks[w.index].role == "chief"), None)
        if chief is None or not getattr(self.spawn, "auto_record", False) or chief.status.get("state"):
            return None
        return Failure("failed", f"{self._short(chief.index)} exited before the cluster formed, having scheduled no "
                       f"step on a worker: the script's chief never trained through "
                       f"tf.distribute.ParameterServerStrategy (--mode ps needs one)", {"missing": [chief.index]})

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Stop every worker still running: SIGTERM, then SIGKILL after ``grace``; reap them all."""
        for proc in self._signal_running(signal.SIGTERM, grace):
            _signal(proc, signal.SIGKILL)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # stuck in the kernel (D state): say so, never hang
                log.error("worker pid %d did not exit 30 s after SIGKILL", proc.pid)
        for w in self.workers:  # their last word (a server's "stopped") for run.json
            w.status = self._status_file(w.index) or w.status
            self.ends.observe(w.index, w.status, self._beats.get(w.index), w.proc.poll() if w.proc else None,
                              time.time_ns())

    def interrupt(self, grace: float = STOP_GRACE_S + 2) -> None:
        """Stop every worker so that it saves what it recorded: SIGINT (a worker turns it into
        KeyboardInterrupt; a stopped one is continued to receive it), then ``stop`` after ``grace``. A peer
        waiting in a collective saves too, once the others are gone and its collective fails."""
        self._signal_running(signal.SIGINT, grace, also=signal.SIGCONT)
        self.stop()

    def _signal_running(self, sig: signal.Signals, grace: float,
                        also: signal.Signals | None = None) -> list[subprocess.Popen[bytes] | Adopted]:
        """Send ``sig`` (and ``also``) to every running worker; those still running after ``grace``."""
        running = [w.proc for w in self.workers if w.proc is not None and w.proc.poll() is None]
        for proc in running:
            _signal(proc, sig)
            if also is not None:
                _signal(proc, also)
        end, left = time.monotonic() + grace, []
        for proc in running:
            try:
                proc.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                left.append(proc)
        return left

    # -- observation ---------------------------------------------------------------------------------
    def _read_statuses(self) -> None:
        now = time.monotonic()
        cpu = self.sampler.latest() if not self.spawn.reports else {}
        watched = [w.index for w in self._watched()]
        for w in self.workers:
            beat = read_heartbeat(self.run.worker_dir(w.index))
            if beat is not None:
                self._beats[w.index] = beat
                self.progress.observe(w.index, beat.get("progress"), now, watched)
            elif cpu.get(w.index, 0.0) > 1.0:  # a command that records nothing shows progress only by computing
                self.progress.heard(now)
            status = self._status_file(w.index)
            if status is not None:
                w.status = status
            code = w.proc.poll() if w.proc is not None else None
            self.ends.observe(w.index, w.status, self._beats.get(w.index), code, time.time_ns())
            if status is None:
                continue  # not written yet, or being replaced this instant
            if w.status.get("t_wall_ns") != self._last_seen.get(w.index):
                self._last_seen[w.index] = w.status.get("t_wall_ns")
                # A state change before the first step, or a worker without heartbeat (a ps chief counts
                # its workers' steps in status.json): progress. After it, only heartbeats count.
                if not self.progress.started or w.index not in self._beats or self.cluster.is_ps:
                    self.progress.heard(now)
            state = str(w.status.get("state"))
            if self._shown.get(w.index) != state:
                self._shown[w.index] = state
                if state in LIMITED_FROM and self.env:
                    self.env.limit(w.index)  # a deferred budget: from its host's first worker training
                if state == "training" and self.env and w.proc is not None and w.proc.poll() is None:
                    self.env.read_back(w.index, w.proc.pid)  # after the worker applied its own limits
                self.observer.phase(f"{self._name(w)}: {state}")
        if self.env and self.env.quota.held and self.progress.started:  # a step was taken: no host stays unlimited
            for w in self.workers:
                self.env.limit(w.index)
        self._report_progress()

    def _status_file(self, index: int) -> dict[str, Any] | None:
        try:
            return json.loads((self.run.worker_dir(index) / "status.json").read_text())
        except (OSError, ValueError):
            return None

    def _report_progress(self) -> None:
        lead = self._lead().status
        if not self._progress_started and lead.get("state") == "training" and "steps_per_epoch" in lead:
            self._progress_started = True
            self.observer.training_started(int(lead["epochs"]), int(lead["steps_per_epoch"]), self._total_cpu)
        if not self._progress_started:
            return
        done = int(lead.get("epochs_done", 0))
        while self._epochs_shown < done and lead.get("last_epoch"):
            self._epochs_shown += 1
            self.observer.epoch(self._epochs_shown - 1, lead["last_epoch"])
        if "step" in lead:
            self.observer.step(int(lead.get("epoch", 0)), int(lead["step"]), lead)

    def _total_cpu(self) -> float | None:
        latest = self.sampler.latest()
        values = [v for k, v in latest.items() if k >= 0]
        return sum(values) if values else None

    def _dead_worker(self) -> Failure | None:
        dead = [w for w in self.workers if w.proc is not None and w.proc.poll() not in (None, 0)]
        if not dead:
            return None
        self._read_statuses()  # what each wrote just before dying (e.g. that it was stopping the profiler)
        dead = [w for w in dead if not self.ends.excused(w.index)]  # a crash after its last step: a warning
        dead = [w for w in dead if w.index not in self.lost.died and not self._survived(w)]
        if not dead:
            return None
        # A peer's death makes the survivors fail within a second with UnavailableError, so several can
        # be found dead in one poll: blame the one that died first, by a signal or of its own error.
        first = min(dead, key=lambda w: (w.proc.returncode >= 0, is_consequence(w.status.get("error")), w.index))
        code, error = first.proc.returncode, first.status.get("error")
        if not error and not self.spawn.reports:  # a user's command: its own last words (a traceback's last line)
            error = next(iter(self._tail(first.index, 1)), None)
        details = {"worker": first.index, "host": first.placement.host, "pid": first.proc.pid, "exit_code": code,
                   "signal": signal.Signals(-code).name if code < 0 else None, "state": first.status.get("state"),
                   "last_log_lines": self._tail(first.index), "profile": first.status.get("profile"),
                   "also_exited": [w.index for w in dead if w is not first]}
        text = f"{self._name(first)} {_exit_text(code)}" + (f": {error}" if error else "")
        if self.lost.died and self.cluster.tasks[first.index].role == "worker":
            text += f"; every other worker had died before it ({', '.join(self._short(i) for i in self.lost.died)})"
        if code > 0 and (not error or is_consequence(error)):
            waited = f"{self._name(first)} {_exit_text(code)} waiting for it" + (f" ({error})" if error else "")
            return self._cause_of_death(waited, text, details) or Failure("failed", text, details)
        return Failure("failed", text, details)

    def _survived(self, w: Worker) -> bool:
        """A ParameterServerStrategy worker whose death the run survives (lostworkers.py): named, kept, not a
        failure."""
        if not self.lost.survivable(w.index):
            return False
        code = w.proc.returncode
        # a signal's victim wrote nothing of it: its last log line would be noise
        error = w.status.get("error") or (next(iter(self._tail(w.index, 1)), None) if code > 0 else None)
        self.observer.warning(self.lost.record(w.index, self._name(w), code, error))
        return True

    def _cause_of_death(self, waited: str, text: str, details: dict[str, Any]) -> Failure | None:
        """A worker that died of a peer's silence (TF's coordination service gives up on a stopped peer in
        ~13 s): the live peer that stopped or is stuck is the cause; or, every worker alive until then and
        waiting, the link between their hosts."""
        live = [self._seen(w) for w in self.workers if w.proc is not None and w.proc.poll() is None]
        found = hang.diagnose(live, time.time_ns())
        if found is not None:
            return Failure("failed", f"{found.text}; {waited}", {**details, **found.details})
        lost = lost_links(self.env, self.cluster) if self.env is not None else []
        if not lost:
            return None
        return Failure("failed", f"{hang.lost_text(lost)}; {text}", {**details, "lost_links": [list(p) for p in lost]})

    def _tail(self, index: int, lines: int = 15) -> list[str]:
        try:
            text = (self.run.worker_dir(index) / "worker.log").read_bytes()[-20000:].decode("utf-8", "replace")
        except OSError:
            return []
        return [ln for ln in text.splitlines() if ln.strip()][-lines:]

    def _name(self, w: Worker) -> str:
        """``worker 1 (host endpoint)``; a parameter server or the chief by its role: ``ps 0 (...)``."""
        return f"worker {self._short(w.index)}" if not self.cluster.is_ps else self._short(w.index)

    def _short(self, index: int) -> str:
        spec = self.cluster.tasks[index]
        where = f"({spec.host} {spec.endpoint})"
        return f"{index} {where}" if not self.cluster.is_ps else f"{spec.name} {where}"

    def worker_records(self) -> list[dict[str, Any]]:
        return [{"index": w.index, "host": w.placement.host, "pid": w.proc.pid if w.proc else None,
                 "role": self.cluster.tasks[w.index].role, "task": self.cluster.tasks[w.index].task_index,
                 "endpoint": self.cluster.tasks[w.index].endpoint,
                 "cores": w.placement.cores, "threads": w.placement.threads,
                 "anchor_wall_ns": w.status.get("anchor_wall_ns"), "anchor_mono_ns": w.status.get("anchor_mono_ns"),
                 "exit_code": w.proc.returncode if w.proc else None, "state": w.status.get("state"),
                 "profile": w.status.get("profile"), "calibration": w.status.get("calibration"),
                 "plan": w.status.get("plan"), "started_wall_ns": w.status.get("started_wall_ns"),
                 "phases": w.status.get("phases"), "teardown": self.ends.record(w.index),
                 "died": self.lost.of(w.index)}
                for w in self.workers]

    def end_notes(self) -> list[str]:
        """Warnings about the workers' exits after their last step (slow, stopped, killed)."""
        return self.ends.notes({w.index: self._name(w) for w in self.workers})


def is_consequence(error: str | None) -> bool:
    """An error that a worker gets because a peer went away, not a cause of its own. DeadlineExceededError:
    the coordination service's heartbeat to a peer timed out (a cut link: "Collective ops is aborted by:
    Deadline Exceeded", whose first line status.json keeps is only "Graph execution error"). AbortedError: the
    coordination service aborted the collectives, e.g. a survivor starved of CPU beside a stuck peer (CI
    2026-12-04: a survivor's "AbortedError" was named instead of the peer stuck on a lock)."""
    low = (error or "").lower()
    return any(k in low for k in ("unavailableerror", "deadlineexceedederror", "aborted"))


def _signal(proc: subprocess.Popen[bytes] | Adopted, sig: signal.Signals) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass


def _exit_text(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def write_launch_file(run: RunDir, payload: dict[str, Any]) -> None:
    write_json(run.path / "launch.json", payload)
