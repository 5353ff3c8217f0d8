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

import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from perfkit._atomic import read_object
from perfkit.cluster import ClusterSpec
from perfkit.events import Observer
from perfkit.profiler.sampler import Sampler, Target
from perfkit.results import RunDir, write_json
from perfkit.runmeta import WorkerRecord
from perfkit.trainer import hang, teardown
from perfkit.trainer.clock import SYSTEM, Clock
from perfkit.trainer.faultnaming import Failure, FaultNaming
from perfkit.trainer.forkserver import Adopted, ForkServer, worker_env
from perfkit.trainer.hosts.cpubudget import Placement
from perfkit.trainer.lostworkers import LostWorkers
from perfkit.trainer.probe import connected, listening, unreachable
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


class Launcher(FaultNaming):
    def __init__(self, run: RunDir, cluster: ClusterSpec, placements: list[Placement], env: HostEnv | None,
                 sampler: Sampler, observer: Observer, connect_timeout: float, hang_timeout: float | None = None,
                 spawn: Any = None, forks: ForkServer | None = None, clock: Clock = SYSTEM) -> None:
        self.run, self.cluster, self.env, self.clock = run, cluster, env, clock
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
        self.lost = LostWorkers(cluster, clock)  # ParameterServerStrategy workers that died while the run went on

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
            return hang.Progress(self.hang_timeout, self.connect_timeout, last=self.clock.monotonic())
        # One process alone keeps no peer waiting: a pause of its own is not called a hang before the ceiling.
        return hang.Progress(self.hang_timeout or hang.CEILING_S, hang.CEILING_S, last=self.clock.monotonic())

    def wait(self) -> Failure | None:
        """Until every worker exited 0 (None) or something went wrong (the Failure)."""
        # One process alone forms no cluster: nothing to wait for but its exit (and its progress).
        deadline = self.clock.monotonic() + self.connect_timeout if self.spawn.forms_cluster else 0.0
        while True:
            self._read_statuses()
            failure = self._dead_worker()
            if failure is not None:
                return failure
            if self._finished():
                return self._chief_alone() if deadline else None
            if deadline and all(self._joined(w) for w in self.workers) and self._chief_up():
                deadline = 0.0
            if deadline and self.clock.monotonic() > deadline:
                return self._not_formed()
            if not deadline and self._past_steps():
                if self._overdue():
                    return None  # every step ran: the run is complete, its slow exits said as warnings
            elif not deadline:
                hung = self._hung()
                if hung is not None:
                    return hung
            self.clock.sleep(POLL_S)

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
        now_mono, now_wall = self.clock.monotonic(), self.clock.time_ns()
        for w in running:  # their last step: when their progress last moved
            moved = self.progress.moved.get(w.index, now_mono)
            self.ends.assume_ended(w.index, now_wall - int((now_mono - moved) * 1e9))
        return True

    def _overdue(self) -> bool:
        """Workers past their steps that did not exit in time are stopped (the run stays complete)."""
        now = self.clock.time_ns()
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
        # A host of a ps cluster that runs only servers: done once the chief, seen up, is gone. A peer connected
        # to one of its servers also says the chief is at work: a quick chief's whole life can fall between
        # two probes, and the host would then wait for it until the connect timeout and fail a healthy job.
        chief = self.cluster.chief
        if chief is None:
            return False
        self._chief_seen = self._chief_seen or any(  # a connection to one of this host's running servers
            w.proc is not None and w.proc.poll() is None and connected(w.proc.pid, self.cluster.tasks[w.index].port)
            for w in self.workers)
        if self.clock.monotonic() - self._probed < 2.0:
            return False
        self._probed = self.clock.monotonic()
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
                              self.clock.time_ns())

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
        end, left = self.clock.monotonic() + grace, []
        for proc in running:
            try:
                proc.wait(timeout=max(0.1, end - self.clock.monotonic()))
            except subprocess.TimeoutExpired:
                left.append(proc)
        return left

    # -- observation ---------------------------------------------------------------------------------
    def _read_statuses(self) -> None:
        now = self.clock.monotonic()
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
            self.ends.observe(w.index, w.status, self._beats.get(w.index), code, self.clock.time_ns())
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
        return read_object(self.run.worker_dir(index) / "status.json") or None

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

    def _name(self, w: Worker) -> str:
        """``worker 1 (host endpoint)``; a parameter server or the chief by its role: ``ps 0 (...)``."""
        return f"worker {self._short(w.index)}" if not self.cluster.is_ps else self._short(w.index)

    def _short(self, index: int) -> str:
        spec = self.cluster.tasks[index]
        where = f"({spec.host} {spec.endpoint})"
        return f"{index} {where}" if not self.cluster.is_ps else f"{spec.name} {where}"

    def worker_records(self) -> list[WorkerRecord]:
        out = []
        for w in self.workers:
            task = self.cluster.tasks[w.index]
            out.append(WorkerRecord.reported(
                w.index, w.status, host=w.placement.host, pid=w.proc.pid if w.proc else None, role=task.role,
                endpoint=task.endpoint, exit_code=w.proc.returncode if w.proc else None,
                teardown=self.ends.record(w.index), died=self.lost.of(w.index), task=task.task_index,
                cores=w.placement.cores, threads=w.placement.threads))
        return out

    def end_notes(self) -> list[str]:
        """Warnings about the workers' exits after their last step (slow, stopped, killed)."""
        return self.ends.notes({w.index: self._name(w) for w in self.workers})




def _signal(proc: subprocess.Popen[bytes] | Adopted, sig: signal.Signals) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass




def write_launch_file(run: RunDir, payload: dict[str, Any]) -> None:
    write_json(run.path / "launch.json", payload)
