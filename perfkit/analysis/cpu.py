"""CPU and memory figures from cpu.parquet: per process, per host (and against its budget),
CPU-seconds (hence CPU cost per 1,000 samples), and a down-sampled CPU% timeline for plotting; each a query
over the run's samples in DuckDB (``perfkit.analysis.cpusamples``, which says why and how a sample's
CPU-seconds are counted), handing back one row per process, host or plotted point.

Figures cover the training window (first step start to last epoch end, validation included),
or for a run without steps (analysis/command.py) the command's whole life, every sample;
rows of worker -1 (the launcher) are reported per process but left out of worker, host and cost figures.
Per-worker CPU% and peak RSS are ``CpuSamples.per_worker``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from perfkit.analysis.cpusamples import CpuSamples
from perfkit.results import RunMeta

PROCESS_COLUMNS = ["worker", "host", "pid", "role", "samples", "cpu_mean", "cpu_p95", "budget_share_mean", "cpu_s",
                   "rss_peak_bytes", "threads_max"]
HOST_COLUMNS = ["host", "workers", "budget_cores", "budget_requested_cores", "budget_enforced", "cpu_mean",
                "cpu_p95", "budget_share_mean", "budget_share_p95"]


def process_table(samples: CpuSamples, meta: RunMeta) -> pd.DataFrame:
    """Per process over the training window: CPU% mean/p95 (and the mean as a share of its host's budget),
    CPU-seconds, peak RSS, most threads."""
    out = samples.query(f"""
        SELECT p.pid, p.worker, p.host, p.role, f.* EXCLUDE (proc) FROM (
            SELECT proc, count(*) AS samples, avg(cpu_percent) AS cpu_mean,
                   quantile_cont(cpu_percent, 0.95) AS cpu_p95, coalesce(sum(cpu_s), 0) AS cpu_s,
                   max(rss_bytes) AS rss_peak_bytes, max(num_threads) AS threads_max
            FROM s WHERE {samples.inside} GROUP BY proc) f JOIN procs p USING (proc)""")
    if out.empty:
        return pd.DataFrame(columns=PROCESS_COLUMNS)
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


def host_table(samples: CpuSamples, meta: RunMeta) -> pd.DataFrame:
    """Per host: the workers' CPU% summed per sample (mean, p95) and as a share of the host's budget."""
    ticks = samples.ticks(f"{samples.inside} AND worker >= 0", ("cpu_percent",))
    hosts = samples.query(f"""
        WITH t AS (SELECT t.*, h.host FROM {ticks} t LEFT JOIN
                       (SELECT worker, arg_min(host, t_first) AS host FROM procs GROUP BY worker) h USING (worker)),
             n AS (SELECT host, count(DISTINCT worker) AS workers FROM t GROUP BY host),
             per AS (SELECT host, t_ns, sum(cpu_percent) AS cpu_percent, count(*) AS present FROM t GROUP BY host, t_ns)
        SELECT host, workers, bool_and(present = workers) AS together, avg(per.cpu_percent) AS cpu_mean,
               quantile_cont(per.cpu_percent, 0.95) AS cpu_p95
        FROM per JOIN n USING (host) GROUP BY host, workers ORDER BY host""")
    if hosts.empty:
        return pd.DataFrame(columns=HOST_COLUMNS)
    for i in np.flatnonzero(~hosts["together"].to_numpy(dtype=bool)):  # workers sampled apart: per interval
        apart = samples.query(f"""SELECT t.worker, t.t_ns, t.cpu_percent FROM {ticks} t JOIN
                                  (SELECT worker, arg_min(host, t_first) AS host FROM procs GROUP BY worker) h
                                  USING (worker) WHERE h.host IS NOT DISTINCT FROM ? ORDER BY t.worker, t.t_ns""",
                              [hosts.at[i, "host"]])
        per_tick = _host_sum(*(apart[c].to_numpy() for c in ("worker", "t_ns", "cpu_percent")))
        some = len(per_tick) > 0  # workers sampled apart may share no interval
        hosts.loc[i, "cpu_mean"] = float(per_tick.mean()) if some else math.nan
        hosts.loc[i, "cpu_p95"] = float(np.quantile(per_tick, 0.95)) if some else math.nan
    out = hosts.drop(columns="together")
    budgets, requested = host_budgets(meta), requested_budgets(meta)
    out["budget_cores"] = [budgets.get(str(h), math.nan) for h in out["host"]]
    out["budget_requested_cores"] = [requested.get(str(h), math.nan) for h in out["host"]]
    out["budget_enforced"] = budgets_enforced(meta)
    out["budget_share_mean"] = out["cpu_mean"] / (out["budget_cores"] * 100)
    out["budget_share_p95"] = out["cpu_p95"] / (out["budget_cores"] * 100)
    return out[HOST_COLUMNS]


def _host_sum(worker: np.ndarray, t_ns: np.ndarray, percent: np.ndarray) -> np.ndarray:
    """A host's workers' CPU% summed per sampling interval, over the intervals in which every one of them has
    a sample: its workers were sampled apart (parts of one run on one node: two Slurm tasks, each with its
    own sampler), so their sample times differ. The rows are in worker, then time order."""
    starts = np.flatnonzero(np.r_[True, worker[1:] != worker[:-1]])
    gaps = [np.diff(t) for t in np.split(t_ns, starts[1:]) if len(t) > 1]
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
    """CPU% per process against seconds since the first step, averaged into at most ``max_points`` bins."""
    columns = ["process", "worker", "t_s", "cpu_percent"]
    if samples.start_ns is None:
        return pd.DataFrame(columns=columns)
    out = samples.query(f"""
        WITH x AS (SELECT proc, (t_ns - {int(samples.start_ns)}) / 1e9 AS t_s, cpu_percent FROM samples),
             r AS (SELECT min(t_s) AS lo, greatest(max(t_s) - min(t_s), 1e-9::DOUBLE) AS span FROM x),
             b AS (SELECT proc, CAST(floor((t_s - lo) / span * {int(max_points) - 1}) AS BIGINT) AS bin,
                          avg(t_s) AS t_s, avg(cpu_percent) AS cpu_percent FROM x, r GROUP BY proc, bin)
        SELECT p.worker, p.host, p.role, p.pid, b.proc, b.t_s, b.cpu_percent
        FROM b JOIN procs p USING (proc) ORDER BY p.worker, b.proc, b.t_s""")
    if out.empty:
        return pd.DataFrame(columns=columns)
    out["process"] = [f"worker {int(w)} ({h}) {r} {int(p)}" if int(w) >= 0 else f"{r} ({h}) {int(p)}"
                      for w, h, r, p in zip(out["worker"], out["host"], out["role"], out["pid"], strict=True)]
    return out[columns]
