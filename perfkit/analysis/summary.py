"""Per-run figures from a frozen run: epoch times, steady throughput, CPU use, final validation metrics.

Definitions follow docs/figures.md: epoch time is worker 0's training plus validation wall time; the steady
figure is the median over epochs after the first (the first pays for tracing and warm-up). Analysers
return DataFrames and plain numbers; rendering is the caller's business.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfkit.analysis.cpusamples import CpuSamples, training_window
from perfkit.results import RunRecord


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    status: str
    mode: str
    preset: str | None  # None: a user's own command
    epochs: int
    steady_epoch_s: float
    steady_is_warmup: bool  # only one epoch: the figure includes the first epoch's warm-up
    fit_s: float
    steady_samples_per_s: float
    steady_epoch_samples: float  # samples of a steady epoch, all workers together (0 when unknown)
    cpu_mean: float
    cpu_p95: float
    val_accuracy: float
    val_auc: float
    startup_s: float  # from the command's start to the first training step, on the wall clock


def startup_seconds(record: RunRecord) -> float:
    """Command start to the earliest first step of any worker (each worker's anchor maps its clock)."""
    started = record.run.command_started_wall_ns
    walls = first_steps_wall_ns(record)
    return (min(walls.values()) - started) / 1e9 if started and walls else math.nan


def first_steps_wall_ns(record: RunRecord) -> dict[int, int]:
    """Each worker's first step, on the wall clock (its anchor maps its monotonic clock)."""
    offsets = {w.index: w.clock_offset_ns for w in record.run.workers if w.clock_offset_ns is not None}
    if record.steps.empty or not offsets:
        return {}
    firsts = record.steps.groupby("worker")["t_start_ns"].min()
    return {int(i): int(t) + offsets[i] for i, t in firsts.items() if i in offsets}


def final_attempt(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of the last attempt at each (worker, epoch): a restarted cluster redoes the epoch it was in.
    ``df`` itself when no row is dropped (the analysis asks again of tables already reduced: a long run's
    steps are millions of rows, and a copy of them is not free)."""
    if df.empty or "attempt" not in df.columns:
        return df
    attempt, worker, epoch = (df[c].to_numpy() for c in ("attempt", "worker", "epoch"))
    if not all(a.dtype.kind in "iu" for a in (attempt, worker, epoch)):  # not integers: pandas' group-by
        last = df.groupby(["worker", "epoch"])["attempt"].transform("max")
        return df[df["attempt"] == last]
    if attempt.min() == attempt.max():
        return df
    # (worker, epoch) as one integer, its attempts' maximum by one pass (a two-key group-by hashes both)
    codes, keys = pd.factorize((worker.astype(np.int64) << 32) + epoch.astype(np.int64))
    last = np.full(len(keys), np.iinfo(np.int64).min)
    np.maximum.at(last, codes, attempt.astype(np.int64))
    keep = attempt == last[codes]
    return df if keep.all() else df[keep]


def recompiled(steps: pd.DataFrame) -> np.ndarray:
    """Which rows of ``steps`` are the first step a restarted attempt ran (attempt > 0): the step function is
    traced and compiled again there, and the workers rejoin."""
    out = np.zeros(len(steps), dtype=bool)
    later = np.flatnonzero(steps["attempt"].to_numpy() > 0) if "attempt" in steps.columns else []
    if not len(later):
        return out
    order = steps.iloc[later][["worker", "attempt", "epoch", "step"]].reset_index(drop=True)
    order = order.sort_values(["worker", "attempt", "epoch", "step"], kind="stable")
    first = ~order.duplicated(["worker", "attempt"])
    out[later[order.index[first.to_numpy()]]] = True
    return out


# Validation metrics first (the first two are what `perfkit runs` shows), then the training ones.
EPOCH_METRICS = ("val_accuracy", "val_auc", "val_loss", "val_precision", "val_recall", "loss", "accuracy", "auc")


def epoch_table(record: RunRecord) -> pd.DataFrame:
    """One row per epoch of worker 0: times, global samples/s, validation (and training) metrics."""
    ep = final_attempt(record.epochs)
    if ep.empty:
        return pd.DataFrame(columns=["epoch", "epoch_s", "train_s", "val_s", "samples", "samples_per_s",
                                     *EPOCH_METRICS])
    ep0 = ep[ep["worker"] == ep["worker"].min()].sort_values("epoch")
    steps = final_attempt(record.steps)
    samples = steps.groupby("epoch")["samples"].sum() if not steps.empty else pd.Series(dtype=float)
    out = pd.DataFrame({
        "epoch": ep0["epoch"].astype(int).to_numpy() + 1,
        "epoch_s": (ep0["train_s"] + ep0["val_s"]).to_numpy(),
        "train_s": ep0["train_s"].to_numpy(),
        "val_s": ep0["val_s"].to_numpy(),
        "samples": ep0["epoch"].map(samples).fillna(0).astype("int64").to_numpy(),
    })
    # No samples recorded: a custom loop whose batch could not be read; its rate is unknown, not zero.
    out["samples_per_s"] = out["samples"].where(out["samples"] > 0) / out["train_s"].where(out["train_s"] > 0)
    for metric in EPOCH_METRICS:
        out[metric] = ep0[metric].to_numpy() if metric in ep0 else math.nan
    return out


def cpu_table(record: RunRecord) -> pd.DataFrame:
    """Per worker: CPU% (its processes summed per sample) mean and p95 over the training window, peak RSS
    (``CpuSamples.per_worker``; the launcher is worker -1)."""
    return CpuSamples.of(record).per_worker


def _steady(values: pd.Series) -> tuple[float, bool]:
    if values.empty:
        return math.nan, False
    if len(values) == 1:
        return float(values.iloc[0]), True
    return float(np.median(values.iloc[1:])), False


def summarize(record: RunRecord, cpu: pd.DataFrame | None = None, epochs: pd.DataFrame | None = None
              ) -> RunSummary:
    """``cpu`` (a ``cpu_table``) and ``epochs`` (an ``epoch_table``) may be passed when already computed."""
    epochs = epoch_table(record) if epochs is None else epochs
    steady_epoch, warm = _steady(epochs["epoch_s"])
    steady_rate, _ = _steady(epochs["samples_per_s"])
    window = training_window(record)
    cpu = cpu_table(record) if cpu is None else cpu
    main = cpu[cpu["worker"] == 0] if not cpu.empty else cpu  # the trainer, or worker 0 (-1 is the launcher)
    last = epochs.iloc[-1] if not epochs.empty else None
    return RunSummary(
        run_id=record.run_id,
        status=record.status,
        mode=record.run.mode or "?",
        preset=record.run.preset,
        epochs=len(epochs),
        steady_epoch_s=steady_epoch,
        steady_is_warmup=warm,
        fit_s=(window[1] - window[0]) / 1e9 if window else math.nan,
        steady_samples_per_s=steady_rate,
        steady_epoch_samples=_steady(epochs["samples"].astype(float))[0],
        cpu_mean=float(main["cpu_mean"].iloc[0]) if not main.empty else math.nan,
        cpu_p95=float(main["cpu_p95"].iloc[0]) if not main.empty else math.nan,
        val_accuracy=float(last["val_accuracy"]) if last is not None else math.nan,
        val_auc=float(last["val_auc"]) if last is not None else math.nan,
        startup_s=startup_seconds(record),
    )


def worker_table(record: RunRecord, cpu: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per worker: host, steps, median step time, CPU mean/p95 and peak RSS (launcher rows left out)."""
    cols = ["worker", "host", "steps", "step_median_s", "cpu_mean", "cpu_p95", "rss_peak_bytes"]
    if record.steps.empty:
        return pd.DataFrame(columns=cols)
    steps = final_attempt(record.steps).groupby("worker").agg(steps=("step", "size"),
                                                               step_median_s=("duration_s", "median"))
    cpu = cpu_table(record) if cpu is None else cpu
    cpu = cpu[cpu["worker"] >= 0].set_index("worker") if not cpu.empty else pd.DataFrame(
        columns=["host", "cpu_mean", "cpu_p95", "rss_peak_bytes"])
    out = steps.join(cpu[["host", "cpu_mean", "cpu_p95", "rss_peak_bytes"]], how="left")
    return out.reset_index()[cols]
