"""One run's parts of a steady epoch, the speedup waterfall's input (analysis/waterfall.py holds the account
and says what each part is): in seconds per 1,000 samples of the epochs after the first, from the run's own
step and epoch records (its final attempts) and its step split."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from perfkit.analysis.cpu import host_budgets, worker_hosts
from perfkit.analysis.overheads import Oversubscription, WindowCost
from perfkit.analysis.stragglers import StepSplit, step_keys
from perfkit.analysis.summary import final_attempt, recompiled
from perfkit.analysis.waterfall import CORES, ROW_COLUMNS, STEPS, Term
from perfkit.results import RunMeta, RunRecord


def run_parts(record: RunRecord, epochs: pd.DataFrame, split: StepSplit | None, trace: pd.DataFrame | None,
              window: WindowCost | None, oversub: Oversubscription | None) -> dict[str, float]:
    """One run's parts of a steady epoch, seconds per 1,000 samples (NaN: not measured), and its cores."""
    out = dict.fromkeys(ROW_COLUMNS, math.nan)
    out[CORES] = compute_cores(record.run)
    steady = _steady(epochs)
    samples = float(steady["samples"].sum()) if not steady.empty else 0.0
    every = final_attempt(record.steps)  # as the steady epoch's own time: a restart's lost steps are not in it
    if samples <= 0 or every.empty or "samples" not in every:
        return out
    per_1k = 1000.0 / samples
    steps = every[every["epoch"].isin(steady["epoch"] - 1)]
    steps_s = _mean_step_total(steps)
    out[STEPS] = steps_s * per_1k
    here = window if window is not None and window.epoch + 1 in set(steady["epoch"]) else None
    trace_s = max(0.0, here.extra_s) if here is not None else 0.0
    stop_s = min(max(0.0, here.stop_s), trace_s) if here is not None else 0.0  # in validation, not the steps
    out[Term.TRACE.column] = trace_s * per_1k
    out[Term.OUTSIDE.column] = (float(steady["epoch_s"].sum()) - steps_s - stop_s) * per_1k
    width = int(max(split.steps["step"].max() if split is not None else 0, every["step"].max())) + 1
    compared = pd.unique(step_keys(split.steps, width)) if split is not None else np.array([], dtype="int64")
    keys = (compared if split is not None and split.source == "trace" else np.array([], dtype="int64"), width)
    traced = _traced_pace(every, keys)
    again = recompiled(steps)  # a restart's first steps: read once, for the paces and the restart term
    paces = epoch_paces(steps, keys, here, traced, again)
    out[Term.RESTART.column] = _recompile_s(steps, paces, again) * per_1k
    if split is not None:
        r = pace_factor(steps, paces, traced) if split.source == "trace" else 1.0
        out.update(_split_parts(split, trace, every, oversub, r, (compared, width)))
    return out


def _traced_pace(every: pd.DataFrame, keys: tuple[np.ndarray, int]) -> float:
    """Seconds per sample of the traced steps, their mean: what the split's parts add up to (NaN: none)."""
    traced = every[np.isin(step_keys(every, keys[1]), keys[0])]
    samples = float(traced["samples"].sum())
    return float(traced["duration_s"].sum()) / samples if samples > 0 else math.nan


def epoch_paces(steps: pd.DataFrame, keys: tuple[np.ndarray, int], here: WindowCost | None,
                traced: float, again: np.ndarray) -> pd.Series:
    """Epoch -> seconds per sample of its untraced steps (not a restart's first): each worker's median, median
    over the workers, as ``overheads.window_cost`` finds the window's epoch's, which that epoch takes (or,
    where the window cost nothing measurable, the traced steps' own ``traced`` pace: no profiler's cost to
    take out of them). ``again``: which rows are a restart's first step. An epoch without one is missing."""
    own = steps[~np.isin(step_keys(steps, keys[1]), keys[0]) & (steps["samples"] > 0) & ~again]
    rates = (own["duration_s"] / own["samples"]).groupby([own["epoch"], own["worker"]]).median()
    paces = rates.groupby(level=0).median() if not rates.empty else pd.Series(dtype=float)
    if here is not None:
        paces.loc[here.epoch] = here.pace_s if here.extra_s > 0 else traced
    return paces.dropna()


def pace_factor(steps: pd.DataFrame, paces: pd.Series, traced: float) -> float:
    """The steady steps' untraced pace (each epoch's, weighted by its samples) over the traced steps' mean:
    a traced step runs slower by the profiler's own cost, which the trace window term holds
    (``overheads.window_cost``: the traced steps over their epoch's pace), so the split's parts are taken at
    the untraced pace, and each epoch at its own (a machine's load drifts from epoch to epoch: every part is
    taken to slow alike, as under the profiler). The traced steps' mean (not their median) is what the
    split's parts add up to, so the steps' time, the window's extra and the split agree but for how the
    untraced steps stray from their epoch's median: what no trace saw, left to ``not explained``. 1 where
    no pace is known."""
    weights = steps.groupby("epoch")["samples"].sum().astype(float)
    pace = paces.reindex(weights.index).fillna(traced)
    r = float((pace * weights).sum() / weights.sum()) / traced if weights.sum() > 0 else math.nan
    return r if math.isfinite(r) and r > 0 else 1.0


def _recompile_s(steps: pd.DataFrame, paces: pd.Series, again: np.ndarray) -> float:
    """Seconds the first step of each restarted attempt in ``steps`` took over its epoch's pace (the step
    function traced and compiled again, the workers rejoining), mean over the workers: a restart's cost
    inside the steady epochs."""
    first = steps[again]
    if first.empty:
        return 0.0
    pace = first["epoch"].map(paces).to_numpy(float)
    if not np.isfinite(pace).all():
        return math.nan
    excess = np.clip(first["duration_s"].to_numpy(float) - pace * first["samples"].to_numpy(float), 0.0, None)
    return float(excess.sum()) / max(1, steps["worker"].nunique())


def _steady(epochs: pd.DataFrame) -> pd.DataFrame:
    """The epochs the steady figure is taken over: after the first (the only one, when there is one)."""
    return epochs.iloc[1:] if len(epochs) > 1 else epochs


def step_means(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per step (epoch, step) of ``steps``: its mean duration over the workers that recorded it, and its
    global samples (the sum over them); the one reading of a synchronous step both the waterfall and
    ``perfkit diff`` take."""
    if steps.empty:
        return np.array([]), np.array([])
    codes, _ = pd.factorize(step_keys(steps, int(steps["step"].max()) + 1))
    duration = np.bincount(codes, steps["duration_s"].to_numpy(float)) / np.bincount(codes)
    samples = (np.bincount(codes, steps["samples"].to_numpy(float)) if "samples" in steps
               else np.zeros(len(duration)))
    return duration, samples


def _mean_step_total(steps: pd.DataFrame) -> float:
    """Sum over steps of the step's mean duration over the workers that recorded it."""
    return float(step_means(steps)[0].sum())


def _split_parts(split: StepSplit, trace: pd.DataFrame | None, steps: pd.DataFrame,
                 oversub: Oversubscription | None, r: float, compared: tuple[np.ndarray, int]
                 ) -> dict[str, float]:
    """Per 1,000 samples of the compared steps (``compared``: the split's (epoch, step) keys and their
    width): the split's terms, mean over workers and steps."""
    df = split.steps
    keys, width = compared
    samples = float(steps["samples"].to_numpy(float)[np.isin(step_keys(steps, width), keys)].sum())
    if samples <= 0:
        return {}
    # From per step to per 1,000 samples, at the untraced steps' pace: the profiler slows every part (a traced
    # straggler also makes the others wait longer), so each is scaled alike (pace_factor).
    scale = len(keys) * 1000.0 / samples * r
    busy = float(df["busy_s"].mean())
    framework = _framework(trace, compared) if split.source == "trace" else math.nan
    contention = min(oversub.waited_s, busy) if oversub is not None else 0.0
    compute = busy - contention - (0.0 if math.isnan(framework) else framework)
    transfer, wait, inputs = (float(df[c].mean()) for c in ("transfer_s", "wait_s", "input_s"))
    return {Term.COMPUTE.column: compute * scale, Term.FRAMEWORK.column: framework * scale,
            Term.CONTENTION.column: contention * scale, Term.INPUT.column: inputs * scale,
            Term.ALLREDUCE.column: transfer * scale, Term.WAIT.column: wait * scale}


def _framework(trace: pd.DataFrame | None, compared: tuple[np.ndarray, int]) -> float:
    """Mean over the compared steps' rows of the trace's ``other_s`` (busy time in no op)."""
    if trace is None or trace.empty or "other_s" not in trace:
        return math.nan
    own = trace[np.isin(step_keys(trace, compared[1]), compared[0])]
    return float(own["other_s"].astype(float).mean()) if not own.empty else math.nan


def compute_cores(meta: RunMeta) -> float:
    """Cores the run's workers were given: the sum over their hosts of each host's budget (applied, else
    requested, else declared cores); NaN when no host's cores are recorded."""
    budgets = host_budgets(meta)
    hosts = set(worker_hosts(meta).values()) or {str(h.get("name")) for h in meta.cluster.hosts}
    known = [budgets[h] for h in hosts if h in budgets]
    return float(sum(known)) if known and len(known) == len(hosts) else math.nan
