"""CPU and memory figures from cpu.parquet: per process, per host (and against its budget),
CPU-seconds (hence CPU cost per 1,000 samples), and a down-sampled CPU% timeline for plotting.

``cpu_percent`` is the average over the interval since the process's previous sample (100 = one core),
so CPU-seconds = sum(cpu_percent / 100 * interval); the first sample of a process covers one sampler
interval. Figures cover the training window (first step start to last epoch end, validation included),
or for a run without steps (analysis/command.py) the command's whole life, every sample;
rows of worker -1 (the launcher) are reported per process but left out of worker, host and cost figures.
Per-worker CPU% and peak RSS are ``summary.cpu_table``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfkit.analysis.groups import Groups
from perfkit.analysis.summary import per_worker_tick, training_window
from perfkit.results import RunMeta, RunRecord

PROCESS_COLUMNS = ["worker", "host", "pid", "role", "samples", "cpu_mean", "cpu_p95", "budget_share_mean", "cpu_s",
                   "rss_peak_bytes", "threads_max"]
WORKER_SAMPLE_COLUMNS = ["t_ns", "worker", "host", "pid", "cpu_percent", "dt_s", "cpu_s"]
HOST_COLUMNS = ["host", "workers", "budget_cores", "budget_requested_cores", "budget_enforced", "cpu_mean",
                "cpu_p95", "budget_share_mean", "budget_share_p95"]


@dataclass(frozen=True)
class CpuSamples:
    """cpu.parquet with ``proc`` (a process key: the pid, or (host, pid) when parts of several hosts were
    merged, as pids repeat across machines), ``dt_s`` (the interval each sample covers) and ``cpu_s``."""

    rows: pd.DataFrame  # every sample
    window: pd.DataFrame  # the samples within the training window (a run without steps: every sample)
    start_ns: int | None  # the training window's start (first step; a run without steps: first sample)

    @classmethod
    def of(cls, record: RunRecord, whole_life: bool = False) -> CpuSamples:
        """``whole_life``: a run without steps (no training window) is taken over every sample."""
        rows = _with_cpu_seconds(record)
        window = training_window(record)
        if window is None and whole_life and not rows.empty:
            window = int(rows["t_ns"].min()), int(rows["t_ns"].max())
        if window is None or rows.empty:
            return cls(rows, rows.iloc[0:0], None)
        return cls(rows, _between(rows, *window), window[0])

    def worker_rows(self, columns: list[str]) -> pd.DataFrame:
        """The window's samples of worker processes (the launcher left out), only ``columns``: one copy of
        the columns a figure reads (10M samples x 7 columns took 1 s, most of it new memory)."""
        return self.window.loc[self.window["worker"].to_numpy() >= 0, columns]

    @functools.cached_property
    def workers(self) -> pd.DataFrame:
        """``worker_rows`` of WORKER_SAMPLE_COLUMNS, taken once when a figure asks for it."""
        return self.worker_rows(WORKER_SAMPLE_COLUMNS)

    @functools.cached_property
    def worker_cpu_s(self) -> pd.Series:
        """Worker -> its CPU-seconds over the window (its processes summed), in worker order; no copy of
        the samples."""
        w = self.window
        if w.empty:
            return pd.Series(dtype=float, index=pd.Index([], name="worker", dtype="int64"))
        mine = w["worker"].to_numpy() >= 0
        cpu_s = pd.Series(w["cpu_s"].to_numpy()[mine], index=pd.Index(w["worker"].to_numpy()[mine], name="worker"))
        return cpu_s.groupby(level=0).sum()


def _between(rows: pd.DataFrame, start: int, end: int) -> pd.DataFrame:
    """The rows with start <= t_ns <= end. The sampler writes a tick's processes together, tick by tick,
    so these are one slice (a view, where a mask copies 10M rows); rows of merged parts are masked."""
    t = rows["t_ns"]
    if not t.is_monotonic_increasing:
        return rows[(t >= start) & (t <= end)]
    values = t.to_numpy()
    return rows.iloc[int(np.searchsorted(values, start, "left")):int(np.searchsorted(values, end, "right"))]


def sample_interval_s(record: RunRecord) -> float:
    value = record.run.sampler.get("interval_s") or record.run.config.get("sample_interval")
    return float(value) if value else math.nan


def _with_cpu_seconds(record: RunRecord) -> pd.DataFrame:
    cpu = record.cpu
    if cpu.empty:
        return cpu.assign(proc=pd.Series(dtype="int64"), dt_s=pd.Series(dtype=float), cpu_s=pd.Series(dtype=float))
    several = len(record.run.parts) > 1
    cpu = cpu.assign(proc=cpu.groupby(["host", "pid"], sort=True).ngroup() if several else cpu["pid"])
    if not cpu["t_ns"].is_monotonic_increasing:  # samples of several parts: order each process's rows
        cpu = cpu.sort_values(["proc", "t_ns"], kind="stable")
    dt = _since_previous(cpu["proc"], cpu["t_ns"].to_numpy())
    first = sample_interval_s(record)
    if math.isnan(first):
        first = float(np.nanmedian(dt)) if not np.isnan(dt).all() else 0.0
    dt = np.where(np.isnan(dt), first, dt)
    return cpu.assign(dt_s=dt, cpu_s=cpu["cpu_percent"].to_numpy() / 100.0 * dt)


def _since_previous(proc: pd.Series, t_ns: np.ndarray) -> np.ndarray:
    """Seconds since the same process's previous row (NaN for its first). A group-by diff in one pass over
    the rows (no sort: 0.67 -> 0.34 s for 10M samples); times taken from the first sample's, which keeps
    them exact in float64 for runs up to 104 days."""
    codes, _ = pd.factorize(proc.to_numpy())
    since = pd.Series(t_ns - t_ns.min() if len(t_ns) else t_ns, dtype="int64")
    return since.groupby(codes).diff().to_numpy(dtype=float) / 1e9


def process_table(samples: CpuSamples, meta: RunMeta) -> pd.DataFrame:
    """Per process over the training window: CPU% mean/p95 (and the mean as a share of its host's budget),
    CPU-seconds, peak RSS, most threads."""
    cpu = samples.window
    if cpu.empty:
        return pd.DataFrame(columns=PROCESS_COLUMNS)
    g = Groups.of(cpu["proc"])
    percent = cpu["cpu_percent"].to_numpy()
    out = pd.DataFrame({
        "pid": g.first(cpu["pid"]), "worker": g.first(cpu["worker"]), "host": g.first(cpu["host"]),
        "role": g.first(cpu["role"]), "samples": g.sizes, "cpu_mean": g.mean(percent), "cpu_s": g.sum(cpu["cpu_s"]),
        "rss_peak_bytes": g.max(cpu["rss_bytes"]), "threads_max": g.max(cpu["num_threads"]),
        "cpu_p95": g.quantile(percent, 0.95)})
    budgets = host_budgets(meta)
    out["budget_share_mean"] = out["cpu_mean"] / (out["host"].astype(str).map(budgets).astype(float) * 100)
    return out.sort_values(["worker", "host", "pid"], ignore_index=True)[PROCESS_COLUMNS]


def host_budgets(meta: RunMeta) -> dict[str, float]:
    """Cores each host may use: what its workers were given as read back after they started (quota capped
    by affinity), else the requested emulated budget, else the host's declared cores."""
    budgets = requested_budgets(meta)
    applied = (meta.cluster.cpu_budget.get("applied") or {}).get("host_budgets_cores") or {}
    budgets.update({str(k): float(v) for k, v in applied.items() if v})
    return budgets


def requested_budgets(meta: RunMeta) -> dict[str, float]:
    budgets = {str(h.get("name")): float(h["cores"]) for h in meta.cluster.hosts if h.get("cores")}
    emulated = meta.cluster.cpu_budget.get("host_budgets_cores") or {}
    budgets.update({str(k): float(v) for k, v in emulated.items() if v})
    return budgets


def budgets_enforced(meta: RunMeta) -> bool:
    """False when the run was made with --allow-unenforced and its budgets could not be enforced."""
    return bool(meta.cluster.cpu_budget.get("enforced", True))


def worker_hosts(meta: RunMeta) -> dict[int, str]:
    """Worker index -> host name (from the cluster layout, or the recorded worker processes)."""
    return meta.cluster.host_of() or {w.index: str(w.host) for w in meta.workers}


_TICK_HOW = {"cpu_percent": "sum", "cpu_s": "sum", "dt_s": "max"}


def worker_ticks(cpu: pd.DataFrame, how: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per worker and sample: its processes' CPU% and CPU-seconds summed (launcher left out);
    ``how``: the columns to combine and how (default: those three)."""
    how = _TICK_HOW if how is None else how
    cpu = cpu[cpu["worker"] >= 0] if not cpu.empty and (cpu["worker"] < 0).any() else cpu
    if cpu.empty:
        return pd.DataFrame(columns=["worker", "host", "t_ns", *how])
    return per_worker_tick(cpu, how)


def host_table(samples: CpuSamples, meta: RunMeta) -> pd.DataFrame:
    """Per host: the workers' CPU% summed per sample (mean, p95) and as a share of the host's budget."""
    # the columns the per-host sums read, not every worker column: a narrower copy of 10M samples
    ticks = worker_ticks(samples.worker_rows(["worker", "host", "t_ns", "pid", "cpu_percent"]), {"cpu_percent": "sum"})
    if ticks.empty:
        return pd.DataFrame(columns=HOST_COLUMNS)
    rows, hosts = [], Groups.of(ticks["host"])
    worker, t_ns, percent = (ticks[c].to_numpy() for c in ("worker", "t_ns", "cpu_percent"))
    for i, host in enumerate(hosts.keys):
        at = hosts.rows(i)
        per_tick = _host_sum(worker[at], t_ns[at], percent[at])
        some = len(per_tick) > 0  # workers sampled apart may share no interval
        rows.append({"host": host, "workers": len(np.unique(worker[at])),
                     "cpu_mean": float(per_tick.mean()) if some else math.nan,
                     "cpu_p95": float(np.quantile(per_tick, 0.95)) if some else math.nan})
    out = pd.DataFrame(rows)
    budgets, requested = host_budgets(meta), requested_budgets(meta)
    out["budget_cores"] = [budgets.get(str(h), math.nan) for h in out["host"]]
    out["budget_requested_cores"] = [requested.get(str(h), math.nan) for h in out["host"]]
    out["budget_enforced"] = budgets_enforced(meta)
    out["budget_share_mean"] = out["cpu_mean"] / (out["budget_cores"] * 100)
    out["budget_share_p95"] = out["cpu_p95"] / (out["budget_cores"] * 100)
    return out[HOST_COLUMNS]


def _host_sum(worker: np.ndarray, t_ns: np.ndarray, percent: np.ndarray) -> np.ndarray:
    """A host's workers' CPU% summed per sample. Workers sampled together (one sampler) share their sample
    times, so their series add up element-wise. Workers sampled apart (parts of one run on one node: two
    Slurm tasks, each with its own sampler) are summed per sampling interval, over the intervals in which
    every one of them has a sample."""
    ticks, _ = pd.factorize(t_ns)
    counts = np.bincount(ticks)
    if len(counts) and (counts == len(pd.unique(worker))).all():
        # Each sample time has a row of every worker (one each: the rows are per worker and time), so the
        # workers share their sample times: a sum per time, in one pass (0.64 -> 0.25 s for 7.5M rows).
        return np.bincount(ticks, weights=percent)
    g = Groups.of(worker)
    times = [t_ns[g.rows(i)] for i in range(len(g))]
    gaps = [np.diff(t) for t in times if len(t) > 1]
    step = float(np.median(np.concatenate(gaps))) if gaps else 0.0
    df = pd.DataFrame({"worker": worker, "t_ns": t_ns, "cpu_percent": percent})
    if step <= 0:
        return df.groupby("t_ns", sort=False)["cpu_percent"].sum().to_numpy()
    binned = df.assign(bin=((df["t_ns"] - df["t_ns"].min()) // step).astype("int64"))
    per = binned.groupby(["bin", "worker"])["cpu_percent"].mean().unstack("worker")
    return per.dropna().sum(axis=1).to_numpy()


def training_cpu_seconds(samples: CpuSamples) -> float:
    """CPU-seconds of every worker process over the training window (the launcher left out)."""
    return float(samples.worker_cpu_s.sum()) if not samples.worker_cpu_s.empty else math.nan


def cpu_timeline(samples: CpuSamples, max_points: int = 1500) -> pd.DataFrame:
    """CPU% per process against seconds since the first step, averaged into at most ``max_points`` bins.
    Binned sums by ``np.bincount`` over one integer key per (process, bin): a few thousand bins, where a
    hash group-by of 10M samples took 1.26 s (0.34 s)."""
    cpu = samples.rows
    if samples.start_ns is None or cpu.empty:
        return pd.DataFrame(columns=["process", "worker", "t_s", "cpu_percent"])
    t_s = (cpu["t_ns"].to_numpy() - samples.start_ns) / 1e9
    lo = float(t_s.min())
    span = max(float(t_s.max()) - lo, 1e-9)
    bins = np.floor((t_s - lo) / span * (max_points - 1)).astype("int64")
    codes, procs = pd.factorize(cpu["proc"].to_numpy(dtype="int64"), sort=True)
    key = codes.astype("int64") * max_points + bins
    used = np.flatnonzero(np.bincount(key, minlength=len(procs) * max_points))
    worker = np.empty(len(procs), dtype=cpu["worker"].dtype)
    worker[codes] = cpu["worker"].to_numpy()  # a process is one worker's: any of its rows names it
    percent = cpu["cpu_percent"].to_numpy(dtype=float)
    out = pd.DataFrame({"proc": procs[used // max_points], "worker": worker[used // max_points],
                        "t_s": _binned_mean(key, t_s, used), "cpu_percent": _binned_mean(key, percent, used)})
    out["process"] = out["proc"].map(_process_labels(cpu))
    return out.sort_values(["worker", "proc", "t_s"], ignore_index=True)[["process", "worker", "t_s", "cpu_percent"]]


def _binned_mean(key: np.ndarray, values: np.ndarray, used: np.ndarray) -> np.ndarray:
    """The mean of ``values`` per key, NaN left out (pandas' mean), at the keys ``used``."""
    valid = ~np.isnan(values)
    if not valid.all():
        key, values = key[valid], values[valid]
    size = int(used[-1]) + 1 if len(used) else 0
    sums = np.bincount(key, weights=values, minlength=size)[used]
    counts = np.bincount(key, minlength=size)[used]
    return np.divide(sums, counts, out=np.full(len(used), np.nan), where=counts > 0)


def _process_labels(cpu: pd.DataFrame) -> dict[int, str]:
    first = cpu.drop_duplicates("proc")
    return {int(r.proc): (f"worker {int(r.worker)} ({r.host}) {r.role} {int(r.pid)}" if int(r.worker) >= 0
                          else f"{r.role} ({r.host}) {int(r.pid)}")
            for r in first.itertuples(index=False)}
