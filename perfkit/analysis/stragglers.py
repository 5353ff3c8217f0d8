"""Where a synchronous step's time goes, per worker: compute, transfer, wait; stragglers; what-if.

Definitions (docs/figures.md), for step s and worker w:

- from traces (trace_steps.parquet): busy(w,s) = compute_s + other_s (= step_s - collective_s - input_s),
  collective(w,s) = collective_s, the exposed communication: collective ops running while no compute op
  of the worker runs (the part of an all-reduce hidden under the backward pass is compute time, not
  time the step pays for), input(w,s) = input_s;
- overlap share(w) = sum over s of overlap_s / sum over s of collective_total_s (a ratio of sums over the
  compared steps): the share of the worker's collective time hidden under compute; unknown (NaN) for an
  estimate or a trace parsed before the parser recorded it;
- estimated, when there is no usable trace: busy(w,s) = CPU-seconds the worker used during the step /
  its core allowance (its host's CPU budget shared by the host's workers, or more if it measurably used
  more: its p95 CPU%), collective(w,s) = step_s - busy(w,s) (input and framework time are folded in).
  Estimates use the steady epochs (after the first) when there are several;
- transfer(s) = min over w of collective(w,s); wait(w,s) = collective(w,s) - transfer(s);
- the straggler of step s is the worker with the largest busy time; straggler share = fraction of steps
  each worker was the straggler; speed score(w) = median over s of min-over-workers busy / median over s
  of busy(w); flagged when < 0.75; straggler cost = total wait / total worker step time;
- what-if "equal workers" (the old step model, kept as equal_step_ratio): step(s) = median over w of busy
  + transfer(s) + median over w of input; the epoch what-if is analysis/whatif.py;
- what-if "placement": workers are placed one by one on the host where the slowest worker's compute stays
  smallest (``_host_costs``: on emulated hosts from the work per step and each host's budget, on real hosts
  from the host's measured throughput, sum over its workers of 1 / median busy, shared by its workers).

Only steps recorded for every worker are compared. Analysers only compute; rendering is elsewhere.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perfkit.analysis.cpu import host_budgets, worker_hosts
from perfkit.analysis.cpusamples import CpuSamples
from perfkit.analysis.tracetables import V2_COLUMNS, overlap_share
from perfkit.results import RunRecord

FLAG_BELOW = 0.75
TRACE_NOTE = "from traces"
ESTIMATE_NOTE = "estimated from CPU-seconds per step"
STEP_KEY = "key"  # one integer per (epoch, step): a single-column group-by is several times cheaper
WORKER_COLUMNS = ["worker", "steps_compared", "step_s", "compute_s", "transfer_s", "wait_s", "input_s",
                  "collective_total_s", "overlap_s", "overlap_share", "compute_median_s", "wait_share",
                  "straggler_share", "speed_score", "flagged"]
PLACEMENT_COLUMNS = ["host", "capacity_share", "workers_now", "workers_proportional", "workers_proposed"]


@dataclass(frozen=True)
class StepSplit:
    """Per (worker, epoch, step): key, step_s, busy_s, collective_s, input_s, collective_total_s, overlap_s,
    transfer_s, wait_s."""

    source: str  # "trace" or "estimate"
    steps: pd.DataFrame
    workers: int
    why: str = ""  # why an estimate: the run had no usable trace, in words

    @functools.cached_property
    def blocks(self) -> StepBlocks:
        """The steps as a (steps x workers) matrix order, found once for the figures that read it."""
        return StepBlocks.of(self.steps, self.workers)

    @property
    def note(self) -> str:
        if self.source == "trace":
            return TRACE_NOTE
        return f"{ESTIMATE_NOTE} ({self.why})" if self.why else ESTIMATE_NOTE


@dataclass(frozen=True)
class StragglerFigures:
    source: str
    note: str
    steps_compared: int
    workers: pd.DataFrame  # WORKER_COLUMNS
    cost: float  # total wait / total worker step time
    step_s: float  # median actual step time (median over workers, then over steps)
    equal_step_ratio: float  # sum of what-if step times / sum of actual step times
    placement: pd.DataFrame  # PLACEMENT_COLUMNS; empty with one host
    compute_now_s: float  # slowest worker's busy time per step under the placement model, now
    compute_proposed_s: float  # ... with the proposed placement
    slowest: int  # the worker that was the straggler most often
    others_wait_share: float  # the other workers' total wait / their total step time


def step_keys(df: pd.DataFrame, width: int) -> np.ndarray:
    """(epoch, step) of each row as one integer, ``width`` more than any step: membership and grouping are
    then integer operations, not tuples or a MultiIndex (800k-1M rows)."""
    return df["epoch"].to_numpy().astype("int64") * width + df["step"].to_numpy().astype("int64")


def trace_split(trace: pd.DataFrame | None, workers: int) -> StepSplit | None:
    if trace is None or trace.empty:
        return None
    df = pd.DataFrame({
        "worker": trace["worker"].astype("int64"), "epoch": trace["epoch"].astype("int64"),
        "step": trace["step"].astype("int64"), "step_s": trace["step_s"].astype(float),
        "busy_s": (trace["compute_s"] + trace["other_s"]).astype(float),
        "collective_s": trace["collective_s"].astype(float), "input_s": trace["input_s"].astype(float),
        **{c: (trace[c].astype(float) if c in trace.columns else np.nan) for c in V2_COLUMNS},
    })
    return _finish(df, "trace", workers)


def estimate_split(record: RunRecord, cpu: CpuSamples, workers: int, why: str = "") -> StepSplit | None:
    """Per-step busy time from CPU-seconds per step (cumulative CPU interpolated at step bounds)."""
    steps = _steady_steps(record.steps)
    if steps.empty or cpu.worker_cpu_s.empty:
        return None
    allowance = _allowance(record, cpu.per_worker)
    frames = []
    for w, s in steps.groupby("worker", sort=True):
        t = cpu.ticks_of(int(w))  # one worker's samples at a time: a long run's are tens of millions
        if t.empty or not allowance.get(int(w)):
            return None
        cpu_s = _cpu_seconds_between(t, s["t_start_ns"].to_numpy(), s["t_end_ns"].to_numpy())
        step_s = s["duration_s"].to_numpy(dtype=float)
        busy = np.minimum(cpu_s / allowance[int(w)], step_s)
        frames.append(pd.DataFrame({"worker": int(w), "epoch": s["epoch"].to_numpy(), "step": s["step"].to_numpy(),
                                    "step_s": step_s, "busy_s": busy, "collective_s": step_s - busy,
                                    "input_s": np.nan, "collective_total_s": np.nan, "overlap_s": np.nan}))
    df = pd.concat(frames, ignore_index=True).dropna(subset=["busy_s"])
    return _finish(df, "estimate", workers, why)


def _steady_steps(steps: pd.DataFrame) -> pd.DataFrame:
    if steps.empty:
        return steps
    first = steps["epoch"].min()
    if steps["epoch"].nunique() > 1:
        return steps[steps["epoch"] > first]
    return steps[steps["step"] > steps["step"].min()]


def _allowance(record: RunRecord, per_worker: pd.DataFrame) -> dict[int, float]:
    """Cores a worker could compute with: its host's budget / the host's workers, or its p95 if higher."""
    hosts, budgets = worker_hosts(record.run), host_budgets(record.run)
    per_host = pd.Series(hosts).value_counts()
    mine = per_worker[per_worker["worker"] >= 0]
    out = {}
    for w, p95 in zip(mine["worker"], mine["cpu_p95"] / 100, strict=True):
        host = hosts.get(int(w))
        share = budgets.get(host, math.nan) / per_host.get(host, 1) if host is not None else math.nan
        known = [x for x in (share, float(p95)) if not math.isnan(x)]
        out[int(w)] = max(known) if known else 0.0
    return out


def _cpu_seconds_between(ticks: pd.DataFrame, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """CPU-seconds in [start, end] from a worker's samples: the cumulative CPU curve is piecewise linear
    (each sample is an average over its interval). Steps outside the sampled span get NaN."""
    if not ticks["t_ns"].is_monotonic_increasing:
        ticks = ticks.sort_values("t_ns", kind="stable")
    t = ticks["t_ns"].to_numpy(dtype="int64")
    t0 = int(t[0] - ticks["dt_s"].iloc[0] * 1e9)
    xs = np.concatenate([[0.0], (t - t0).astype(float)])
    ys = np.concatenate([[0.0], np.cumsum(ticks["cpu_s"].to_numpy(dtype=float))])
    a, b = (start - t0).astype(float), (end - t0).astype(float)
    out = np.interp(b, xs, ys) - np.interp(a, xs, ys)
    out[(a < xs[0]) | (b > xs[-1])] = np.nan
    return out


def _finish(df: pd.DataFrame, source: str, workers: int, why: str = "") -> StepSplit | None:
    """Keep steps recorded for every worker; add transfer (min collective) and wait."""
    if df.empty:
        return None
    df = df.assign(key=step_keys(df, int(df["step"].max()) + 1))
    df = df[_full_steps(df, workers)]
    if df.empty:
        return None
    split = StepSplit(source, df.reset_index(drop=True), workers, why)
    # Its steps-by-workers order, found here once, serves the straggler figures and the what-if model too;
    # the two columns added below move no row, so the order stays the split's.
    blocks, steps = split.blocks, split.steps
    transfer = blocks.each_row(np.fmin.reduce(blocks.matrix(steps["collective_s"]), axis=1))
    steps["transfer_s"] = transfer
    steps["wait_s"] = steps["collective_s"].to_numpy() - transfer
    return split


def _full_steps(df: pd.DataFrame, workers: int) -> np.ndarray:
    """Per row: whether its step has exactly ``workers`` rows (a hash of the keys, not np.unique's sort)."""
    codes, _ = pd.factorize(df[STEP_KEY].to_numpy())
    return np.bincount(codes)[codes] == workers


@dataclass(frozen=True)
class StepBlocks:
    """The rows of a split whose every step has one row per worker, as a (steps x workers) matrix: per-step
    figures are then reductions along an axis, where a pandas group-by over 200k steps of 16 workers (3.2M
    rows) sorted the rows again for each median (py-spy: 3.5 s of a 16-worker analysis)."""

    order: np.ndarray  # row positions, step by step (by key), each step's rows by worker
    width: int

    @classmethod
    def of(cls, df: pd.DataFrame, width: int) -> StepBlocks:
        """``df``: rows of steps that each have ``width`` rows (``_full_steps``)."""
        worker = df["worker"].to_numpy(dtype="int64")
        span = int(worker.max()) + 1 if len(worker) else 1
        return cls(np.argsort(df[STEP_KEY].to_numpy(dtype="int64") * span + worker, kind="stable"), width)

    @property
    def steps(self) -> int:
        return len(self.order) // self.width

    def matrix(self, values: Any) -> np.ndarray:
        return np.asarray(values, dtype=float)[self.order].reshape(-1, self.width)

    def each_row(self, per_step: np.ndarray) -> np.ndarray:
        """A per-step figure given to each of the step's rows, in the rows' own order."""
        out = np.empty(len(self.order), dtype=per_step.dtype)
        out[self.order] = np.repeat(per_step, self.width)
        return out


def row_median(m: np.ndarray) -> np.ndarray:
    """Per row of ``m``, its median with NaN left out (NaN where all are), as pandas' group-by median."""
    if not np.isnan(m).any():
        return np.median(m, axis=1)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "All-NaN slice": that step's median is NaN
        return np.nanmedian(m, axis=1)


def stragglers(split: StepSplit, record: RunRecord) -> StragglerFigures:
    df = split.steps
    blocks = split.blocks
    busy = blocks.matrix(df["busy_s"])
    min_busy, median_busy = np.fmin.reduce(busy, axis=1), row_median(busy)
    transfer = blocks.matrix(df["transfer_s"])[:, 0]
    median_input, median_step = row_median(blocks.matrix(df["input_s"])), row_median(blocks.matrix(df["step_s"]))
    table = _worker_table(df, blocks, busy, float(np.nanmedian(min_busy)), blocks.steps)
    predicted = median_busy + transfer + np.nan_to_num(median_input, nan=0.0)
    actual = float(np.nansum(median_step))
    same_cores = record.run.cluster.emulated
    placement, now, proposed = _placement(table, worker_hosts(record.run),
                                          host_budgets(record.run) if same_cores else {})
    slowest = int(table.sort_values(["straggler_share", "speed_score"], ascending=[False, True])["worker"].iloc[0])
    others = df["worker"].to_numpy() != slowest  # two sums: a mask of two columns, not a copy of the table
    wait, step = df["wait_s"].to_numpy()[others], df["step_s"].to_numpy()[others]
    return StragglerFigures(
        source=split.source, note=split.note, steps_compared=blocks.steps, workers=table,
        cost=float(df["wait_s"].sum() / df["step_s"].sum()) if df["step_s"].sum() > 0 else math.nan,
        step_s=float(np.nanmedian(median_step)),
        equal_step_ratio=float(np.nansum(predicted) / actual) if actual > 0 else math.nan,
        placement=placement, compute_now_s=now, compute_proposed_s=proposed, slowest=slowest,
        others_wait_share=float(np.nansum(wait) / np.nansum(step)) if len(step) else math.nan)


def _worker_table(df: pd.DataFrame, blocks: StepBlocks, busy: np.ndarray, median_min_busy: float,
                  steps: int) -> pd.DataFrame:
    g = df.groupby("worker")
    out = g.agg(step_s=("step_s", "mean"), compute_s=("busy_s", "mean"), transfer_s=("transfer_s", "mean"),
                wait_s=("wait_s", "mean"), input_s=("input_s", "mean"),
                collective_total_s=("collective_total_s", "mean"), overlap_s=("overlap_s", "mean"))
    out["overlap_share"] = overlap_share(df)
    out["compute_median_s"] = g["busy_s"].median()
    out["wait_share"] = g["wait_s"].sum() / g["step_s"].sum()
    # Each step's straggler: its first worker (by index) with the largest busy time, so a tie goes to one.
    workers = blocks.matrix(df["worker"])[:, 0:blocks.width]
    slowest = workers[np.arange(len(busy)), np.argmax(np.nan_to_num(busy, nan=-np.inf), axis=1)].astype("int64")
    out["straggler_share"] = pd.Series(slowest).value_counts().reindex(out.index, fill_value=0) / steps
    out["speed_score"] = median_min_busy / out["compute_median_s"]
    out["flagged"] = out["speed_score"] < FLAG_BELOW
    out["steps_compared"] = steps
    return out.reset_index()[WORKER_COLUMNS]


def allowances(busy_w: pd.Series, host_of: dict[int, str], budgets: dict[str, float]) -> pd.Series:
    """Per worker: its host's CPU budget shared by the host's workers (NaN where the host has none)."""
    hosts = busy_w.index.map(lambda w: host_of.get(int(w), "?"))
    counts = pd.Series(hosts).value_counts()
    return pd.Series([budgets.get(h, math.nan) / counts.get(h, 1) for h in hosts], index=busy_w.index, dtype=float)


def work_per_step(busy_w: pd.Series, host_of: dict[int, str], budgets: dict[str, float]) -> float | None:
    """Core-seconds of compute one worker's step takes. Every worker does the same work per step (same
    model, same local batch); it is measured where a worker is held by its budget to at most one core (one
    TF thread), as allowance x busy, median over those workers. A worker with more than a core runs several
    threads, whose core-seconds are not one thread's, so it does not measure the work. None without such a
    worker."""
    share = allowances(busy_w, host_of, budgets)
    work = (share * busy_w)[held_to_a_core(share)]
    return float(work.median()) if not work.empty else None


def held_to_a_core(share: pd.Series) -> pd.Series:
    """Per worker (``share``: its ``allowances``): whether its CPU budget held it to at most one core, so
    it was CPU-bound in one TF thread (NaN, no budget: False)."""
    return share <= 1.0


def _host_costs(busy: pd.Series, host_of: pd.Index, budgets: dict[str, float]) -> dict[str, Any]:
    """Per host, n -> the compute time per step of each of n workers placed there. Hosts emulated on one
    machine's cores (``budgets`` given) with a measured work per step: work / min(budget / n, the most
    cores a worker was seen to use), because a worker given more cores than it can keep busy is not faster
    (one worker on a 1.5-core host used ~1 core in bench whatif; two there each ran at 0.75). Otherwise
    (real hosts, whose cores differ): the host's measured throughput (sum of 1 / busy over its workers)
    shared by its n workers."""
    hosts = dict(zip(busy.index, host_of))
    capacity = (1.0 / busy).groupby(host_of).sum()
    work = work_per_step(busy, hosts, budgets) if budgets and all(h in budgets for h in capacity.index) else None
    if work is None:
        return {h: (lambda n, c=float(capacity[h]): n / c) for h in capacity.index}
    used = float((work / busy).max())
    return {h: (lambda n, b=budgets[h]: work / min(b / n, used)) for h in capacity.index}


def _placement(table: pd.DataFrame, hosts: dict[int, str],
               budgets: dict[str, float]) -> tuple[pd.DataFrame, float, float]:
    """Workers per host proportional to measured capacity, and the placement minimising the slowest
    (``budgets``: emulated hosts' CPU budgets, empty for real hosts)."""
    busy = pd.Series(table.set_index("worker")["compute_median_s"])
    if not hosts or busy.isna().any() or (busy <= 0).any():
        return pd.DataFrame(columns=PLACEMENT_COLUMNS), math.nan, math.nan
    host_of = busy.index.map(lambda w: hosts.get(int(w), "?"))
    capacity = (1.0 / busy).groupby(host_of).sum()
    if len(capacity) < 2:
        return pd.DataFrame(columns=PLACEMENT_COLUMNS), math.nan, math.nan
    cost = _host_costs(busy, host_of, budgets)
    now = pd.Series(host_of).value_counts().reindex(capacity.index, fill_value=0)
    total = int(now.sum())
    proposed = dict.fromkeys(capacity.index, 0)
    for _ in range(total):  # greedy min-max over non-decreasing costs: optimal for this objective
        host = min(capacity.index, key=lambda h: (cost[h](proposed[h] + 1), h))
        proposed[host] += 1
    now_s = max(cost[h](int(n)) for h, n in now.items() if n)
    proposed_s = max(cost[h](n) for h, n in proposed.items() if n)
    if proposed_s >= now_s * 0.99:  # a move that gains under 1% is noise, not advice
        proposed, proposed_s = {h: int(n) for h, n in now.items()}, now_s
    out = pd.DataFrame({"host": capacity.index, "capacity_share": (capacity / capacity.sum()).to_numpy(),
                        "workers_now": now.to_numpy(), "workers_proportional": (capacity / capacity.sum() * total)
                        .to_numpy(), "workers_proposed": [proposed[h] for h in capacity.index]})
    return out, now_s, proposed_s
