"""What the scaling forecast fits and is checked against, per run: the training as it runs when perfkit is
not looking at it (docs/scaling.md, "What the forecast measures").

- **step**: the mean duration of the steady steps (the final attempt's, epochs after the run's first), left
  out: the steps during perfkit's trace captures (placed by each capture's start and end) and the step
  after each (the capture is stopped and written there), and the first step of an attempt after a restart
  (its graph is built again). Where fewer than three steps are left, the captured ones are kept (without
  a restart's first step): a short epoch traced whole. These are costs of
  perfkit's own looking, or of a fault, and a forecast of them at another count would be a forecast of
  the fault. Worker 0's steps: in synchronous training every worker's step lasts as long.
- **validation**: the median validation seconds of the steady epochs, without an attempt's first epoch
  after a restart (it builds its evaluation graph again); NaN where none is left.
- **the machine**: its logical cores (run.json), the cores its workers used (mean over the training
  window, summed over workers), and the cores busy with anything else (the machine's busy cores from
  system.parquet, less the workers'): the launcher, the kernel's share of their traffic, anything else
  running. The forecast gives the workers what is left of the machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfkit.analysis.cpusamples import CpuSamples, training_window
from perfkit.analysis.summary import final_attempt
from perfkit.results import RunMeta, RunRecord
from perfkit.runmeta import WorkerRecord

MIN_STEPS = 3  # fewer clean steps than this: the steady steps are taken as they are


@dataclass(frozen=True)
class SteadyRun:
    """One run's steady step and validation without perfkit's own costs, and the machine it ran on."""

    step_s: float
    step_cv: float  # the relative spread (sd / mean) of the steps used
    steps_used: int
    steps_left_out: int  # trace window and restarts' first steps
    val_s: float
    machine_cores: float  # NaN: not recorded
    worker_cores: float  # the workers' mean CPU over the training window, summed, in cores
    other_cores: float  # the machine's busy cores less the workers', over the same window

    @classmethod
    def unknown(cls) -> SteadyRun:
        nan = math.nan
        return cls(nan, nan, 0, 0, nan, nan, nan, nan)


def steady_run(record: RunRecord) -> SteadyRun:
    """The run's SteadyRun (NaN figures where the records do not hold them)."""
    steps = final_attempt(record.steps)
    if steps.empty:
        return SteadyRun.unknown()
    first_epoch = int(steps["epoch"].min())
    own = steps[steps["worker"] == steps["worker"].min()]
    steady = own[own["epoch"] > first_epoch] if own["epoch"].nunique() > 1 else own
    captured, rebuilt = _looked_at(steady, record.run)
    used = next((steady[~m] for m in (captured | rebuilt, rebuilt) if int((~m).sum()) >= MIN_STEPS), steady)
    d = used["duration_s"].astype(float)
    step = float(d.mean()) if len(d) else math.nan
    cv = float(d.std() / step) if len(d) > 1 and step > 0 else math.nan
    worker, other, machine = _machine(record)
    return SteadyRun(step, cv, int(len(d)), int(len(steady) - len(d)), _validation(record, first_epoch),
                     machine, worker, other)


def _looked_at(steps: pd.DataFrame, meta: RunMeta) -> tuple[np.ndarray, np.ndarray]:
    """(captured, rebuilt): steps during a trace capture of this worker (any attempt's, placed by its
    wall-clock start and end on the steps' clock) and the step after each; each attempt's first step after
    a restart."""
    captured, rebuilt = np.zeros(len(steps), dtype=bool), np.zeros(len(steps), dtype=bool)
    start, end = steps["t_start_ns"].to_numpy(), steps["t_end_ns"].to_numpy()
    worker = meta.worker(int(steps["worker"].min())) if len(steps) else None
    for t0, t1 in _captures(meta, worker):
        captured |= (end >= t0) & (start <= t1)
        later = np.flatnonzero(start >= t1)
        if len(later):  # the step in which the capture is stopped and written
            captured[later[np.argmin(start[later])]] = True
    if "attempt" in steps and meta.restarts:
        attempt = steps["attempt"].to_numpy()
        for a in set(attempt[attempt > 0].tolist()):
            mine = np.flatnonzero(attempt == a)
            rebuilt[mine[np.argmin(start[mine])]] = True
    return captured, rebuilt


def _captures(meta: RunMeta, worker: WorkerRecord | None) -> list[tuple[int, int]]:
    """(start, end) of each capture this worker began, in any attempt, on its monotonic clock (the host's:
    every attempt of a worker runs on the same host)."""
    if worker is None or worker.clock_offset_ns is None:
        return []
    found = [worker.profile] if isinstance(worker.profile, dict) else []
    for restart in meta.restarts:
        profiles = restart.get("profiles") if isinstance(restart, dict) else None
        found.append((profiles or {}).get(str(worker.index)))
    shift = worker.clock_offset_ns
    return [(int(p["t_start_wall_ns"]) - shift, int(p["t_end_wall_ns"]) - shift) for p in found
            if isinstance(p, dict) and isinstance(p.get("t_start_wall_ns"), int)
            and isinstance(p.get("t_end_wall_ns"), int)]


def _validation(record: RunRecord, first_epoch: int) -> float:
    ep = final_attempt(record.epochs)
    if ep.empty:
        return math.nan
    own = ep[ep["worker"] == ep["worker"].min()]
    steady = own[own["epoch"] > first_epoch] if own["epoch"].nunique() > 1 else own
    if "attempt" in steady:  # an attempt's first epoch builds its evaluation graph again
        restarted = steady["attempt"] > 0
        firsts = steady.groupby("attempt")["epoch"].transform("min") == steady["epoch"]
        steady = steady[~(restarted & firsts)]
    return float(steady["val_s"].astype(float).median()) if len(steady) else math.nan


def _machine(record: RunRecord) -> tuple[float, float, float]:
    """(workers' cores, other cores, the machine's logical cores) over the training window."""
    machine = record.run.extra.get("machine") or {}
    cores = float(machine.get("logical_cores") or math.nan)
    window = training_window(record)
    if window is None:
        return math.nan, math.nan, cores
    seconds = (window[1] - window[0]) / 1e9
    cpu = CpuSamples.of(record)
    workers = float(cpu.worker_cpu_s.sum()) / seconds if seconds > 0 and not cpu.worker_cpu_s.empty else math.nan
    system = record.system
    if system.empty or not seconds > 0:
        return workers, math.nan, cores
    inside = system[(system["t_ns"] >= window[0]) & (system["t_ns"] <= window[1])]
    if inside.empty:
        return workers, math.nan, cores
    busy = float(inside.groupby("t_ns")["busy_percent"].sum().mean()) / 100
    return workers, max(0.0, busy - workers), cores
