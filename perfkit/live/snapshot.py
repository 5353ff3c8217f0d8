"""What a watcher saw of a run at one moment: frozen records, written as ``--format json`` prints them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any


class WorkerState(Enum):
    """Where a worker is, as its status file, its heartbeat and its process tell."""

    STARTING = "starting"  # importing, loading data, building the model
    CONNECTING = "connecting"  # forming the cluster with its peers
    TRAINING = "training"
    VALIDATING = "validating"
    FINISHING = "finishing"  # past its last step: fit's end, perfkit's calibration, saving records, its exit
    STOPPED = "stopped"  # its process is stopped (SIGSTOP, a debugger)
    NOT_ANSWERING = "not answering"  # alive, but no heartbeat: its Python blocked in native code
    STUCK = "stuck"  # its main thread idle in the script's own code while no step ends
    EXITED = "exited"

    @property
    def alarming(self) -> bool:
        return self in (WorkerState.STOPPED, WorkerState.NOT_ANSWERING, WorkerState.STUCK)


class RunState(Enum):
    RUNNING = "running"
    NOT_UPDATED = "not updated"  # says running, but nothing in it moved for a while (its launcher gone?)
    FINISHED = "finished"


@dataclass(frozen=True)
class WorkerRow:
    """One worker. Rates are over the watcher's window; None where not known yet (or not on this host)."""

    index: int
    host: str
    pid: int | None
    state: WorkerState
    where: str | None  # FILE:LINE in function, for a stuck or silent worker
    epoch: int | None
    step: int | None
    steps_per_s: float | None
    cpu_percent: float | None  # 100 = one core
    # its threads' time runnable but not running (waiting for a core: a throttled budget, a busy host)
    cpu_wait_percent: float | None
    budget_cores: float | None  # its share of its host's cores
    rss_bytes: int | None
    beat_age_s: float | None  # how old its last heartbeat is

    @property
    def busy(self) -> float | None:
        """Its demand for CPU (running, or runnable and waiting for a core) over its budget: a worker that
        computes the whole step never idles; one that waits for a peer sleeps in the all-reduce."""
        if self.cpu_percent is None or not self.budget_cores:
            return None
        return (self.cpu_percent + (self.cpu_wait_percent or 0.0)) / 100.0 / self.budget_cores


@dataclass(frozen=True)
class Slowest:
    """The worker the others wait for over the window: the one whose demand for CPU (used, or waited for) was
    the largest share of its budget (in synchronous training every worker's step rate is the same, so the
    step rates cannot tell)."""

    worker: int
    host: str
    others_wait_share: float  # the others' mean share of a step spent waiting for it
    wait_s_per_step: float | None  # that share of the window's step time


@dataclass(frozen=True)
class Snapshot:
    run_id: str
    state: RunState
    status: str  # run.json's status
    age_s: float  # since anything in the run last moved
    elapsed_s: float | None  # since the run started
    workers: tuple[WorkerRow, ...]
    epochs: int | None  # the plan
    steps_per_epoch: int | None
    epoch: int | None  # the furthest worker's
    samples_per_s: float | None  # every worker's samples over the window
    baseline_id: str | None
    speedup: float | None  # samples_per_s over the baseline's steady samples/s
    slowest: Slowest | None
    eta_s: float | None  # to the end of the plan, at the pace so far
    # A custom loop declares no epoch count, so its plan has no end: to the end of the epoch in progress, once
    # the first epoch's length is known (None where the plan's end is, or nothing is known)
    epoch_eta_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["state"] = self.state.value
        d["workers"] = [{**asdict(w), "state": w.state.value, "busy": w.busy} for w in self.workers]
        return d
