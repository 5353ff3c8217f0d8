"""Two causes of lost speed that are no part of the training's own work (advice.py ranks them):

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
  after the first, so one window costs it its extra / their number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from perfkit.analysis.cpu import CpuSamples, host_budgets, training_cpu_seconds, worker_hosts
from perfkit.analysis.stragglers import StepSplit
from perfkit.analysis.summary import final_attempt, training_window
from perfkit.results import RunRecord


@dataclass(frozen=True)
class Oversubscription:
    """Per traced step, mean over the workers of oversubscribed hosts: busy time beyond the CPU it got."""

    waited_s: float
    busy_s: float
    hosts: str  # "localhost: 4 workers, 4 threads on 2 cores"


@dataclass(frozen=True)
class WindowCost:
    """Seconds the trace window adds to the epoch that holds it: median, least and most over the workers."""

    extra_s: float
    lo_s: float
    hi_s: float
    steps: int  # traced steps (executions)
    epoch: int  # the epoch that holds it (step records count from 0)


def oversubscription(split: StepSplit, record: RunRecord) -> Oversubscription | None:
    """None when no host has more threads than cores, or its CPU was not sampled."""
    meta = record.run
    budgets, hosts = host_budgets(meta), worker_hosts(meta)
    threads = _threads(meta.cluster.cpu_budget.get("placements"), hosts)
    over = {h for h in set(hosts.values()) if budgets.get(str(h), 0) > 0
            and sum(threads[w] for w, hw in hosts.items() if hw == h) > budgets[str(h)]}
    window = training_window(record)
    if not over or window is None:
        return None
    cpu = CpuSamples.of(record)
    if cpu.workers.empty or not math.isfinite(training_cpu_seconds(cpu)):
        return None
    length = (window[1] - window[0]) / 1e9
    cores = cpu.workers.groupby("worker")["cpu_s"].sum() / length  # each worker's mean CPU, in cores
    per = split.steps.groupby("worker")[["busy_s", "step_s"]].mean()
    mine = [w for w in per.index if hosts.get(int(w)) in over and int(w) in cores.index]
    if not mine:
        return None
    waited = [max(0.0, per.loc[w, "busy_s"] - cores[int(w)] * per.loc[w, "step_s"]) for w in mine]
    text = "; ".join(f"{h}: {_count(sum(1 for hw in hosts.values() if hw == h), 'worker')}, "
                     f"{_count(sum(threads[w] for w, hw in hosts.items() if hw == h), 'thread')} on "
                     f"{budgets[str(h)]:g} cores" for h in sorted(over, key=str))
    return Oversubscription(float(pd.Series(waited).mean()), float(per.loc[mine, "busy_s"].mean()), text)


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
    traced = set(zip(split.steps["epoch"].astype(int), split.steps["step"].astype(int)))
    first = int(steps["epoch"].min())
    extras = []
    for _, own in steps[steps["epoch"] > first].groupby("worker"):
        extra = _worker_extra(own, traced)
        if extra is not None:
            extras.append(extra)
    if not extras:
        return None
    per = pd.Series([e for e, _ in extras])
    return WindowCost(float(per.median()), float(per.min()), float(per.max()), len(traced), extras[0][1])


def _worker_extra(own: pd.DataFrame, traced: set[tuple[int, int]]) -> tuple[float, int] | None:
    """One worker's traced steps and the step after them, over the median untraced step of their epoch."""
    key = list(zip(own["epoch"].astype(int), own["step"].astype(int)))
    mask = pd.Series([k in traced for k in key], index=own.index)
    if not mask.any():
        return None
    epoch = int(own.loc[mask, "epoch"].iloc[0])
    same = own[own["epoch"] == epoch].sort_values("step")
    inside = mask[same.index]
    after = inside.shift(1, fill_value=False) & ~inside  # the step in which the capture is stopped and written
    clean = same[~inside & ~after]
    if clean.empty:
        return None
    median = float(clean["duration_s"].median())
    cost = same.loc[inside | after, "duration_s"] - median
    return float(cost.sum()), epoch
