"""The step timeline: the trace window's steps (its first TABLE_STEPS) of every worker on one time axis, each
split into input, compute, wait and exposed all-reduce, and beside them the same steps as the equal-workers
what-if would run them (the report's Gantt chart; docs/figures.md, "step timeline").

Where each step starts and ends comes from the step records (one clock per run: the workers of one machine
share its monotonic clock, and the parts of several hosts are merged on the wall clock by ``load``); how
it splits comes from the trace (or the CPU-seconds estimate), scaled to the recorded duration: the trace's
own step is a few percent off the callback's. Within a step the terms are drawn in the order a synchronous
step runs them: input, compute, then the all-reduce, whose first part a fast worker spends waiting for
the slowest (wait) and whose rest every worker pays (exposed transfer). The part of the all-reduce hidden
under compute (``overlap_s``) ends with the compute segment.

The what-if row uses the equal-workers step model (``whatif.StepModel``) at the median worker's compute,
without undoing the trace's own cost (``r`` = 1): the window's steps, traced, as equal workers would run
them, separated by the same gaps between steps as the run had.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from perfkit.analysis.stragglers import STEP_KEY, StepSplit
from perfkit.analysis.summary import final_attempt
from perfkit.analysis.whatif import StepModel
from perfkit.results import RunRecord

MAX_STEPS = 20  # an estimate covers every steady step: the chart shows this many consecutive ones
# A trace window's first steps kept in the table (5x the report's 200 drawn; the auto window has 10): a
# window of every step of a long run (4 workers x 200k steps) made a million rows that were computed, cached,
# read back and written as JSON for a chart that draws 200 (bench analysis-speed). The figures of every
# traced step are the split's (workers, runs), not this table's.
TABLE_STEPS = 1000
WHAT_IF = -1  # the worker column of the what-if row
TIMELINE_COLUMNS = ["kind", "worker", "epoch", "step", "start_s", "step_s", "input_s", "compute_s", "wait_s",
                    "transfer_s", "overlap_s", "straggler"]


def step_timeline(split: StepSplit, record: RunRecord, model: StepModel | None) -> pd.DataFrame:
    """TIMELINE_COLUMNS: kind "run" (one row per worker and step) then "equal workers" (one row per step,
    worker -1); start_s in seconds since the window's first step. Empty when the steps cannot be placed."""
    steps = _window(split)
    placed = _placed(steps, final_attempt(record.steps))
    if placed.empty:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    origin = int(placed["t_start_ns"].min())
    scale = placed["duration_s"] / placed["step_s"].where(placed["step_s"] > 0)
    busiest = placed.groupby(STEP_KEY)["busy_s"].transform("max")
    run = pd.DataFrame({
        "kind": "run", "worker": placed["worker"].astype("int64"), "epoch": placed["epoch"], "step": placed["step"],
        "start_s": (placed["t_start_ns"] - origin) / 1e9, "step_s": placed["duration_s"],
        **{f"{t}_s": placed[col].fillna(0.0) * scale for t, col in
           (("input", "input_s"), ("compute", "busy_s"), ("wait", "wait_s"), ("transfer", "transfer_s"),
            ("overlap", "overlap_s"))},
        "straggler": placed["busy_s"] >= busiest})
    what_if = _what_if(placed, origin, model)
    del placed, scale, busiest  # a million rows each: gone before the concat makes the table again
    return pd.concat([run, what_if], ignore_index=True)[TIMELINE_COLUMNS] if not what_if.empty else run


def _window(split: StepSplit) -> pd.DataFrame:
    """The compared steps to draw: the trace window's first TABLE_STEPS, or MAX_STEPS consecutive ones of an
    estimate."""
    keys = np.sort(split.steps[STEP_KEY].unique())  # integer (epoch, step) keys: in the order they ran
    if split.source == "trace":
        kept = len(keys) <= TABLE_STEPS
        return split.steps if kept else split.steps[split.steps[STEP_KEY].to_numpy() <= keys[TABLE_STEPS - 1]]
    if len(keys) <= MAX_STEPS:
        return split.steps
    middle = len(keys) // 2 - MAX_STEPS // 2  # away from an epoch's first steps and its end
    return split.steps[split.steps[STEP_KEY].isin(keys[middle:middle + MAX_STEPS])]


_SPLIT_USED = ("worker", "epoch", "step", STEP_KEY, "step_s", "busy_s", "input_s", "wait_s", "transfer_s", "overlap_s")


def _placed(split_steps: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """The split's steps with their recorded start and duration (steps without a record are left out)."""
    if split_steps.empty or records.empty:
        return pd.DataFrame()
    rec = records[["worker", "epoch", "step", "t_start_ns", "duration_s"]]
    used = [c for c in split_steps.columns if c in _SPLIT_USED]  # the merge copies every column it is given
    out = split_steps[used].merge(rec, on=["worker", "epoch", "step"], how="inner")
    return out.sort_values(["t_start_ns", "worker"], ignore_index=True)


def _what_if(placed: pd.DataFrame, origin: int, model: StepModel | None) -> pd.DataFrame:
    if model is None:
        return pd.DataFrame()
    traced = replace(model, r=1.0)  # the window as traced: the trace's cost stays in, as in the run's rows
    level = traced.median_level
    per = placed.groupby(STEP_KEY).agg(epoch=("epoch", "first"), step=("step", "first"),
                                       start=("t_start_ns", "min"), last=("duration_s", "max"))
    per = per.sort_values("start")
    keys = per.index
    compute = (level * traced.jitter.reindex(keys).fillna(1.0)).to_numpy()
    inp = traced.inp.reindex(keys).fillna(0.0).to_numpy()
    transfer = traced.transfer_at(level)
    pred = compute + inp + transfer
    ends = (per["start"] + per["last"] * 1e9).to_numpy()  # ~ when the step ended on the slowest worker
    gaps = np.maximum(np.append((per["start"].to_numpy()[1:] - ends[:-1]) / 1e9, 0.0), 0.0)
    starts = np.concatenate([[0.0], np.cumsum(pred + gaps)[:-1]]) + (per["start"].iloc[0] - origin) / 1e9
    return pd.DataFrame({"kind": "equal workers", "worker": WHAT_IF, "epoch": per["epoch"].to_numpy(),
                         "step": per["step"].to_numpy(), "start_s": starts, "step_s": pred, "input_s": inp,
                         "compute_s": compute, "wait_s": 0.0, "transfer_s": transfer, "overlap_s": np.nan,
                         "straggler": False})
