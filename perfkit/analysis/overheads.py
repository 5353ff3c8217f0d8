"""Two causes of lost speed that are no part of the training's own work (advice/ ranks them), and the
host whose CPU holds every step:

- oversubscribed threads: a host whose workers run more threads (the placement's thread cap per worker,
  1 when none is recorded) than the host has cores (its CPU budget, else its declared cores). A worker's
  busy time per traced step (compute and framework: ``busy_s``) is spent on a core only while it holds
  one; the CPU it got per step is its mean CPU (cores, from cpu.parquet over the training window) x its
  mean step time. The rest, ``busy - cpu``, is time it was ready to run and waited for a core held by
  another worker of its host. Assumes the busy time is CPU-bound when it runs (TF ops under a thread cap of
  one) and that the window's CPU average holds in the traced steps.
- the trace window: the traced steps' time over the median untraced step of the same epoch, plus the step
  right after the window, in which the profiler stops and writes its capture (measured, 4 local workers:
  0.43 s against 0.22 s), per worker from its step records; the steady epoch is the mean of the epochs
  after the first, so one window costs it its extra / their number. Steps are compared per sample, so that
  an execution of fewer batches (an epoch's last, with steps_per_execution) is held to its own share. A
  window that ends with its epoch's last step has no step after it: the capture is stopped when validation
  begins (profiler/tracewindow.py), so that epoch's validation over the median validation of the other
  epochs after the first is its stop (measured, 2 local workers at steps_per_execution 8: 3.86 s against
  0.67 s). ``traced_batches``: how many batches a run's window spec traces at K batches per execution (the
  window counts executions: at K = 8 ``auto`` traces 42 of the quick preset's 58 batches, not 10).
- the CPU-held host (``cpu_held``): the straggler's host, when its workers used at least ``HELD_SHARE`` of
  its cores (its budget, else its declared cores) over the training window. Its steps last as long as its
  workers' CPU per step takes on those cores, so CPU that any of its workers stops using shortens every
  step of the cluster, also CPU spent on threads the trace shows no op on (advice/causes.py: the metric reductions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfkit.analysis.cpu import host_budgets, training_cpu_seconds, worker_hosts
from perfkit.analysis.cpusamples import CpuSamples, training_window
from perfkit.analysis.stragglers import StepSplit, step_keys
from perfkit.analysis.summary import final_attempt, recompiled
from perfkit.errors import UsageError
from perfkit.profiler.tracewindow import executions_per_epoch, resolve
from perfkit.results import RunRecord

HELD_SHARE = 0.9  # of a host's cores: its workers that used this much over the training window were held by it


@dataclass(frozen=True)
class Oversubscription:
    """Per traced step, mean over the workers of oversubscribed hosts: busy time beyond the CPU it got."""

    waited_s: float
    busy_s: float
    hosts: str  # "localhost: 4 workers, 4 threads on 2 cores"


@dataclass(frozen=True)
class CpuHeld:
    """The straggler's host, whose workers used (nearly) all of its cores over the training window."""

    host: str
    cores: float  # its budget, else its declared cores
    used: float  # its workers' mean CPU over the training window, in cores
    workers: tuple[int, ...]
    slack_s: float  # the least mean wait per step of another host's worker (inf: no other host)


@dataclass(frozen=True)
class WindowCost:
    """Seconds the trace window adds to the epoch that holds it: median, least and most over the workers."""

    extra_s: float
    lo_s: float
    hi_s: float
    steps: int  # traced steps (executions)
    epoch: int  # the epoch that holds it (step records count from 0)
    # Of extra_s, the capture's stop in the validation after a window that ends its epoch (median over the
    # workers): time an epoch's account holds outside its steps.
    stop_s: float = 0.0
    # Seconds per sample of that epoch's untraced steps (median over the workers): the pace the traced steps'
    # extra is counted against, and the one the waterfall takes their split to (waterfall_parts.pace_factor).
    pace_s: float = math.nan


def oversubscription(split: StepSplit, record: RunRecord, cores: pd.Series | None) -> Oversubscription | None:
    """None when no host has more threads than cores, or its CPU was not sampled. ``cores``: the record's
    ``worker_cores``, taken once for every cause that needs them."""
    meta = record.run
    budgets, hosts = host_budgets(meta), worker_hosts(meta)
    threads = _threads(meta.cluster.cpu_budget.get("placements"), hosts)
    over = {h for h in set(hosts.values()) if budgets.get(str(h), 0) > 0
            and sum(threads[w] for w, hw in hosts.items() if hw == h) > budgets[str(h)]}
    if not over or cores is None:
        return None
    per = split.steps.groupby("worker")[["busy_s", "step_s"]].mean()
    mine = [w for w in per.index if hosts.get(int(w)) in over and int(w) in cores.index]
    if not mine:
        return None
    waited = [max(0.0, per.loc[w, "busy_s"] - cores[int(w)] * per.loc[w, "step_s"]) for w in mine]
    text = "; ".join(f"{h}: {_count(sum(1 for hw in hosts.values() if hw == h), 'worker')}, "
                     f"{_count(sum(threads[w] for w, hw in hosts.items() if hw == h), 'thread')} on "
                     f"{budgets[str(h)]:g} cores" for h in sorted(over, key=str))
    return Oversubscription(float(pd.Series(waited).mean()), float(per.loc[mine, "busy_s"].mean()), text)


def worker_cores(record: RunRecord, cpu: CpuSamples | None = None) -> pd.Series | None:
    """Worker -> its mean CPU over the training window, in cores; None where its CPU was not sampled."""
    window = training_window(record)
    if window is None:
        return None
    cpu = CpuSamples.of(record) if cpu is None else cpu
    if cpu.worker_cpu_s.empty or not math.isfinite(training_cpu_seconds(cpu)):
        return None
    return cpu.worker_cpu_s / ((window[1] - window[0]) / 1e9)


def cpu_held(split: StepSplit, record: RunRecord, used_by: pd.Series | None) -> CpuHeld | None:
    """The straggler's host when its workers used at least ``HELD_SHARE`` of its cores; else None (also
    without a budget or declared cores, or CPU samples). ``used_by``: the record's ``worker_cores``."""
    hosts = worker_hosts(record.run)
    wait = split.steps.groupby("worker")["wait_s"].mean()
    if wait.empty:
        return None
    host = hosts.get(int(wait.idxmin()))  # the straggler: the worker the others wait for waits least
    cores = host_budgets(record.run).get(str(host), 0.0)
    if used_by is None or not cores > 0:
        return None
    mine = tuple(sorted(w for w, h in hosts.items() if h == host))
    used = float(sum(used_by.get(w, 0.0) for w in mine))
    if used < HELD_SHARE * cores:
        return None
    others = wait[[hosts.get(int(w)) != host for w in wait.index]]
    return CpuHeld(str(host), cores, used, mine, float(others.min()) if len(others) else math.inf)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _threads(placements: object, hosts: dict[int, str]) -> dict[int, int]:
    """Worker -> its thread cap from the placement (1 where none is recorded)."""
    out = {w: 1 for w in hosts}
    for p in placements if isinstance(placements, list) else []:
        if isinstance(p, dict) and isinstance(p.get("worker"), int) and isinstance(p.get("threads"), int):
            out[p["worker"]] = max(1, p["threads"])
    return out


def window_cost(split: StepSplit, record: RunRecord) -> WindowCost | None:
    """None without a traced window in a steady epoch (after the first) or untraced steps to compare with."""
    if split.source != "trace" or split.steps.empty or record.steps.empty:
        return None
    steps = final_attempt(record.steps)
    again = recompiled(steps)  # a restart's first step: no measure of the untraced pace
    steps = steps.assign(_again=again) if again.any() else steps
    # (epoch, step) as one integer, so membership is np.isin and not a Python set of tuples (800k rows: 0.6 s)
    width = int(max(split.steps["step"].max(), steps["step"].max())) + 1
    traced = pd.unique(step_keys(split.steps, width))  # hashed: np.unique sorts 800k keys
    first = int(steps["epoch"].min())
    val = _validations(record, first)
    extras = []
    for worker, own in steps[steps["epoch"] > first].groupby("worker"):
        extra = _worker_extra(own, np.isin(step_keys(own, width), traced), val.get(int(worker)))
        if extra is not None:
            extras.append(extra)
    if not extras:
        return None
    per, stop, pace = (pd.Series([e[i] for e in extras]) for i in range(3))
    return WindowCost(float(per.median()), float(per.min()), float(per.max()), len(traced), extras[0][3],
                      float(stop.median()), float(pace.median()))


def window_seconds(w: WindowCost | None) -> float:
    """Seconds the trace window added to the epoch that held it (NaN: no trace, or no untraced steps of a
    steady epoch to compare with)."""
    return max(0.0, w.extra_s) if w is not None else math.nan


def _worker_extra(own: pd.DataFrame, traced: np.ndarray, val: pd.Series | None = None
                  ) -> tuple[float, float, float, int] | None:
    """One worker's traced steps (``traced``: which of its rows) and the step after them, over the median
    untraced step of their epoch, per sample; a window that ends its epoch: that epoch's validation over the
    others' (``val``: this worker's validation seconds by epoch after the first). (extra, of it the stop in
    validation, the untraced seconds per sample, epoch). On arrays: label lookups on 200k-row indexes cost
    more than the figure."""
    if not traced.any():
        return None
    epochs = own["epoch"].to_numpy()
    epoch = int(epochs[traced][0])
    pick = epochs == epoch
    order = np.argsort(own["step"].to_numpy()[pick], kind="quicksort")  # as sort_values("step")
    duration = own["duration_s"].to_numpy()[pick][order]
    samples = (own["samples"].to_numpy(dtype="float64")[pick][order] if "samples" in own
               else np.ones(len(duration)))
    inside = traced[pick][order]
    after = np.concatenate([[False], inside[:-1]]) & ~inside  # the step in which the capture is stopped and written
    clean = ~inside & ~after & (samples > 0)
    if "_again" in own:
        clean &= ~own["_again"].to_numpy()[pick][order]
    if not clean.any():
        return None
    rate = float(pd.Series(duration[clean] / samples[clean]).median())  # seconds per sample, untraced
    extra = float(pd.Series(duration[inside | after] - rate * samples[inside | after]).sum())
    stop = 0.0
    if inside[-1] and val is not None and epoch in val.index and len(val.drop(epoch)):
        stop = max(0.0, float(val[epoch]) - float(val.drop(epoch).median()))  # stopped as validation began
    return extra + stop, stop, rate, epoch


def _validations(record: RunRecord, first: int) -> dict[int, pd.Series]:
    """Each worker's validation seconds by epoch, the epochs after ``first`` (final attempts)."""
    ep = final_attempt(record.epochs)
    if ep.empty or not {"worker", "epoch", "val_s"} <= set(ep.columns):
        return {}
    ep = ep[ep["epoch"] > first].dropna(subset=["val_s"])
    return {int(w): own.set_index("epoch")["val_s"].astype(float) for w, own in ep.groupby("worker")}


def traced_batches(spec: str, steps_per_epoch: int, epochs: int, steps_per_execution: int = 1) -> int | None:
    """Batches the trace window ``spec`` ("auto", "A-B", "off") covers in a run of ``epochs`` epochs of
    ``steps_per_epoch`` batches, ``steps_per_execution`` K a call: the window counts executions, the last
    one of an epoch runs what is left. None: a window the run would refuse (past its last execution)."""
    k = max(1, int(steps_per_execution))
    per = executions_per_epoch(steps_per_epoch, k)
    try:
        window = resolve(spec, per, epochs, k)
    except UsageError:
        return None
    if window is None:
        return 0
    return sum(min(k, steps_per_epoch - ((g - 1) % per) * k) for g in range(window.first, window.last + 1))
