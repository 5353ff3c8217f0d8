"""The goodput ledger: where each worker's share of the whole command's wall time went, and the share that
was productive training steps (docs/figures.md, "Goodput").

Per worker, the command's span (its start, ``command_started_wall_ns``, to run.json's ``ended``) is cut into
buckets that add up to it exactly (``Bucket``): start-up until the worker's first step; its steps, of which
the first step's compile (its excess over its epoch's median step), the trace window's cost
(``overheads.window_cost``; its capture's stop in a validation comes out of validation) and input (the
split's mean input per step over this worker's steps, when a trace measured it) are taken out, the rest
being the productive steps; the time between steps within its epochs (callbacks, the recorder, the
iterator); validation; the rest of its training span (between epochs, earlier attempts of a restarted
epoch and a restart's first step over its epoch's median: ``between epochs, restarts``); and the end (its
last epoch's end to the command's end: waiting for the others, teardown, the launcher's own end). Goodput =
productive / span.
Checkpoint saves (worker/checkpoints.py times them) are taken out of the time between epochs, then between
steps; a worker whose saves were not timed (no recorded status, a run before they were) has a ``null``
checkpoint bucket, not a zero. Analysers only compute.
"""

from __future__ import annotations

import math
from enum import Enum

import numpy as np
import pandas as pd

from perfkit.analysis.command import utc_seconds
from perfkit.analysis.overheads import WindowCost
from perfkit.analysis.stragglers import StepSplit
from perfkit.analysis.summary import final_attempt, recompiled
from perfkit.results import RunRecord


class Bucket(str, Enum):
    """A part of a worker's span of the command, in the order it is drawn."""

    STARTUP = "startup"
    COMPILE = "compile"
    PRODUCTIVE = "productive"
    INPUT = "input"
    TRACE = "trace_window"
    BETWEEN = "between_steps"
    VALIDATION = "validation"
    CHECKPOINT = "checkpoint"
    OTHER = "between_epochs"
    END = "end"

    @property
    def column(self) -> str:
        return f"{self.value}_s"

    @property
    def words(self) -> str:
        return _WORDS[self]


_WORDS = {Bucket.STARTUP: "start-up", Bucket.COMPILE: "first step's compile", Bucket.PRODUCTIVE: "training steps",
          Bucket.INPUT: "input", Bucket.TRACE: "trace window", Bucket.BETWEEN: "between steps",
          Bucket.VALIDATION: "validation", Bucket.CHECKPOINT: "checkpoint saves",
          Bucket.OTHER: "between epochs, restarts", Bucket.END: "end"}
COLUMNS = ["worker", "span_s", *(b.column for b in Bucket), "goodput"]


def goodput_table(record: RunRecord, split: StepSplit | None, window: WindowCost | None) -> pd.DataFrame:
    """One row per worker with steps (``COLUMNS``); empty without the command's start and end or steps."""
    meta = record.run
    started = meta.command_started_wall_ns
    ended = utc_seconds(meta.ended)
    offsets = {w.index: w.clock_offset_ns for w in meta.workers if w.clock_offset_ns is not None}
    checkpoints = {w.index: w.checkpoints for w in meta.workers}
    if not started or ended is None or record.steps.empty:
        return pd.DataFrame(columns=COLUMNS)
    span_end = int(ended * 1e9)
    inputs = _input_per_step(split)
    trace = max(0.0, window.extra_s) if window is not None else 0.0
    trace_parts = (trace, min(max(0.0, window.stop_s), trace) if window is not None else 0.0)
    rows = []
    for worker, steps in record.steps.groupby("worker", sort=True):
        offset = offsets.get(int(worker))
        if offset is None:
            continue
        epochs = record.epochs[record.epochs["worker"] == worker] if not record.epochs.empty else record.epochs
        saves = checkpoints.get(int(worker))
        rows.append(_worker(int(worker), steps, epochs, offset, started, span_end, inputs.get(int(worker), 0.0),
                            trace_parts, float(saves.get("s", 0.0)) if isinstance(saves, dict) else math.nan))
    return pd.DataFrame(rows, columns=COLUMNS)


def _input_per_step(split: StepSplit | None) -> dict[int, float]:
    """Each worker's mean input time per compared step, where a trace measured it."""
    if split is None or split.source != "trace":
        return {}
    means = split.steps.groupby("worker")["input_s"].mean()
    return {int(w): float(v) for w, v in means.items() if math.isfinite(v)}


def _worker(worker: int, steps: pd.DataFrame, epochs: pd.DataFrame, offset: int, started: int, span_end: int,
            input_per_step: float, trace: tuple[float, float], saves_s: float) -> dict[str, float]:
    """``trace``: the window's cost and, of it, the capture's stop in a validation."""
    first = int(steps["t_start_ns"].min()) + offset
    last = int(max(steps["t_end_ns"].max(), epochs["t_end_ns"].max() if not epochs.empty else 0)) + offset
    span = (span_end - started) / 1e9
    # the final attempts' steps and epochs; a lost attempt's, and a restart's first step, are the restart's
    steps, epochs = final_attempt(steps), final_attempt(epochs)
    stepped = float(steps["duration_s"].sum())
    restart_s = _restarts_first_steps(steps)
    compile_s = _compile(steps)
    input_s = min(input_per_step * len(steps), max(0.0, stepped - restart_s - compile_s))
    in_steps = min(trace[0] - trace[1], max(0.0, stepped - restart_s - compile_s - input_s))
    validation = float(epochs["val_s"].sum()) if not epochs.empty else 0.0
    stop_s = min(trace[1], max(0.0, validation))  # the capture's stop, inside a validation's time
    between = float(epochs["train_s"].sum()) - stepped if not epochs.empty else 0.0
    training = (last - first) / 1e9
    out = {"worker": worker, "span_s": span, Bucket.STARTUP.column: (first - started) / 1e9,
           Bucket.COMPILE.column: compile_s,
           Bucket.PRODUCTIVE.column: stepped - restart_s - compile_s - input_s - in_steps,
           Bucket.INPUT.column: input_s, Bucket.TRACE.column: in_steps + stop_s,
           Bucket.BETWEEN.column: max(0.0, between), Bucket.VALIDATION.column: validation - stop_s,
           Bucket.END.column: (span_end - last) / 1e9}
    out[Bucket.OTHER.column] = training - stepped - max(0.0, between) - validation + restart_s
    _take_saves(out, saves_s)
    out["goodput"] = out[Bucket.PRODUCTIVE.column] / span if span > 0 else math.nan
    return out


def _restarts_first_steps(steps: pd.DataFrame) -> float:
    """The first step of each restarted attempt (compiling again, waiting for the others to rejoin) over the
    median step of its epoch, summed (``steps``: one worker's final attempts)."""
    again = recompiled(steps)
    if not again.any():
        return 0.0
    median = steps.groupby("epoch")["duration_s"].transform("median").to_numpy(float)
    return float(np.clip(steps["duration_s"].to_numpy(float)[again] - median[again], 0.0, None).sum())


def _take_saves(out: dict[str, float], saves_s: float) -> None:
    """The checkpoint saves' seconds, taken out of the time between epochs (where an epoch's save falls) and
    then between steps (a save every N batches); NaN: this worker's saves were not timed."""
    if math.isnan(saves_s):
        out[Bucket.CHECKPOINT.column] = math.nan
        return
    taken = 0.0
    for bucket in (Bucket.OTHER, Bucket.BETWEEN):
        part = min(max(0.0, out[bucket.column]), saves_s - taken)
        out[bucket.column] -= part
        taken += part
    out[Bucket.CHECKPOINT.column] = taken


def _compile(steps: pd.DataFrame) -> float:
    """The first step's time over the median step of its epoch (tracing and compiling the step function)."""
    order = steps.sort_values(["epoch", "step"], kind="stable")
    epoch = order["epoch"].iloc[0]
    own = order.loc[order["epoch"] == epoch, "duration_s"].to_numpy(dtype=float)
    if len(own) < 2:
        return 0.0
    return max(0.0, float(own[0] - np.median(own[1:])))


def median_worker(table: pd.DataFrame) -> pd.Series:
    """The row of the worker whose goodput is nearest the median of ``table``'s (one run's rows): the worker
    the verdict and the terminal speak for."""
    return table.iloc[(table["goodput"] - table["goodput"].median()).abs().argsort().iloc[0]]


def run_goodput(table: pd.DataFrame) -> dict[str, float]:
    """The run's goodput (productive over span, summed over workers) and the median worker's buckets."""
    if table.empty:
        return {"goodput": math.nan}
    span = float(table["span_s"].sum())
    return {"goodput": float(table[Bucket.PRODUCTIVE.column].sum()) / span if span > 0 else math.nan}
