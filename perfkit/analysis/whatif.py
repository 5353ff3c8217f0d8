"""What-if "equal workers": the steady epoch a cluster would take if every worker computed at the median
worker's measured speed, built from per-step predictions (docs/figures.md, "what-if").

For each compared step s (traced, or estimated from CPU-seconds):

    step'(s) = median_w busy(w,s) * r  +  transfer'  +  median_w input(w,s) * r

- ``r`` undoes the trace's own cost: the median callback time of the run's untraced steady steps over
  that of the traced ones (1 for an estimate, whose steps are untraced);
- ``transfer'`` is what a balanced cluster pays per step for its all-reduces: the smaller of two upper
  bounds, and the verdict says which. (a) The run's own transfer (median over steps of the min over workers
  of the exposed all-reduce), too large when the last worker to arrive does its share of the exchange
  inside a throttled budget. (b) The workers' calibration after training (``trainer/calibrate.py``): one
  all-reduce of the gradients plus K of one float, K being the traced collectives per step less the
  gradients' one, too large because in a step the scalar all-reduces partly run under the small ops
  between them. On this 2-core machine (bench whatif) (a) was the smaller in most runs.

The steady epoch is then ``steps_per_epoch * mean_s step'(s)`` plus the epoch's time outside steps (as
measured, median over steady epochs) plus validation. Validation is synchronous too and waits for the
slowest worker: it is scaled by median busy / slowest worker's busy. The interval is the 95% interval of
the mean step, from the step-to-step spread. The same step model gives the placement what-if.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perfkit.analysis.stragglers import STEP_KEY, StepSplit
from perfkit.analysis.summary import final_attempt
from perfkit.results import RunRecord


@dataclass(frozen=True)
class EqualWorkers:
    epoch_s: float
    epoch_lo_s: float
    epoch_hi_s: float
    step_s: float  # mean predicted step
    transfer_s: float
    transfer_source: str  # "calibration" or "run"
    val_s: float
    trace_factor: float  # r
    budgets: dict[str, float]  # per host: the budget that gives its workers the median speed
    assumptions: str

    def to_row(self) -> dict[str, Any]:
        return {"equal_epoch_s": self.epoch_s, "equal_epoch_lo_s": self.epoch_lo_s,
                "equal_epoch_hi_s": self.epoch_hi_s, "equal_step_s": self.step_s,
                "equal_transfer_s": self.transfer_s, "equal_transfer_source": self.transfer_source,
                "equal_val_s": self.val_s, "equal_budgets": budgets_text(self.budgets),
                "equal_assumptions": self.assumptions}


EMPTY_ROW = {k: math.nan for k in ("equal_epoch_s", "equal_epoch_lo_s", "equal_epoch_hi_s", "equal_step_s",
                                   "equal_transfer_s", "equal_val_s")} | {
    "equal_transfer_source": None, "equal_budgets": None, "equal_assumptions": None}


def budgets_text(budgets: dict[str, float]) -> str:
    return ", ".join(f"{h}={c:.4g}" for h, c in budgets.items())


def parse_budgets(text: str) -> dict[str, float]:
    """Inverse of ``budgets_text`` (host names are sanitised ids: no '=' or ', ' in them)."""
    return {h: float(c) for h, c in (part.split("=", 1) for part in text.split(", ") if part)}


def calibrated_transfer(meta: dict[str, Any], split: StepSplit) -> float | None:
    """Seconds a balanced cluster's all-reduces take per step, from the workers' calibration; None without."""
    cals = [w.get("calibration") or {} for w in meta.get("workers") or []]
    grads = [c["gradients_s"] for c in cals if isinstance(c.get("gradients_s"), (int, float))]
    floats = [c["one_float_s"] for c in cals if isinstance(c.get("one_float_s"), (int, float))]
    if not grads or not floats:
        return None
    extra = 0.0
    if "collectives" in split.steps and split.steps["collectives"].notna().any():
        extra = max(0.0, float(split.steps["collectives"].median()) - 1)
    return float(np.median(grads) + extra * np.median(floats))


def trace_factor(record: RunRecord, split: StepSplit) -> float:
    """Untraced over traced median step time on the same run: the trace window's own cost taken out."""
    if split.source != "trace" or record.steps.empty:
        return 1.0
    steps = final_attempt(record.steps)
    steps = steps[steps["epoch"] > steps["epoch"].min()] if steps["epoch"].nunique() > 1 else steps
    traced = pd.MultiIndex.from_arrays([split.steps["epoch"], split.steps["step"]])
    mask = pd.MultiIndex.from_arrays([steps["epoch"], steps["step"]]).isin(traced)
    if not mask.any() or mask.all():
        return 1.0
    return float(steps.loc[~mask, "duration_s"].median() / steps.loc[mask, "duration_s"].median())


def equal_workers(split: StepSplit, record: RunRecord, epochs: pd.DataFrame, host_of: dict[int, str],
                  budgets: dict[str, float]) -> EqualWorkers | None:
    df = split.steps
    if df.empty or epochs.empty:
        return None
    r = trace_factor(record, split)
    cal = calibrated_transfer(record.meta, split)
    per = df.groupby(STEP_KEY).agg(busy=("busy_s", "median"), transfer=("transfer_s", "first"),
                                   inp=("input_s", "median"))
    own = float(per["transfer"].median())
    transfer = min(own, cal) if cal is not None else own
    pred = _without_outliers(per["busy"] * r + transfer + per["inp"].fillna(0.0) * r)
    spe = _steps_per_epoch(record)
    steady = epochs.iloc[1:] if len(epochs) > 1 else epochs
    outside = _outside_steps(record, steady)
    busy_w = df.groupby("worker")["busy_s"].median()
    med, slowest = float(busy_w.median()), float(busy_w.max())
    val = float(steady["val_s"].median()) * (med / slowest if slowest > 0 else 1.0)
    half = 1.96 * float(pred.std(ddof=1)) / math.sqrt(len(pred)) if len(pred) > 1 else 0.0
    epoch = spe * float(pred.mean()) + outside + val
    return EqualWorkers(
        epoch_s=epoch, epoch_lo_s=epoch - spe * half, epoch_hi_s=epoch + spe * half, step_s=float(pred.mean()),
        transfer_s=transfer, transfer_source="calibration" if cal is not None and cal < own else "run", val_s=val,
        trace_factor=r, budgets=_equal_budgets(busy_w, host_of, budgets, med),
        assumptions=_assumptions(own, cal, r, split.source))


def _without_outliers(pred: pd.Series) -> pd.Series:
    """Steps more than 5 median absolute deviations above the median (a stall, a restart's first step)
    are left out: one 7 s step among 0.5 s ones would otherwise move every epoch's prediction."""
    med = float(pred.median())
    mad = float((pred - med).abs().median())
    keep = pred[pred <= med + 5 * max(mad, 0.01 * med)]
    return keep if len(keep) else pred


def _steps_per_epoch(record: RunRecord) -> int:
    steps = final_attempt(record.steps)
    w0 = steps[steps["worker"] == steps["worker"].min()]
    return int(w0.groupby("epoch").size().median()) if not w0.empty else 0


def _outside_steps(record: RunRecord, steady: pd.DataFrame) -> float:
    """Median over the steady epochs of training time not spent inside a step (callbacks, data hand-off)."""
    steps = final_attempt(record.steps)
    w0 = steps[steps["worker"] == steps["worker"].min()]
    inside = w0.groupby("epoch")["duration_s"].sum()
    gaps = [float(row.train_s) - float(inside.get(int(row.epoch) - 1, math.nan)) for row in steady.itertuples()]
    gaps = [g for g in gaps if math.isfinite(g)]
    return max(0.0, float(np.median(gaps))) if gaps else 0.0


def _equal_budgets(busy_w: pd.Series, host_of: dict[int, str], budgets: dict[str, float],
                   med: float) -> dict[str, float]:
    """Per host: the budget that gives each of its workers the median busy time. Every worker does the same
    work per step (same model, same local batch), measured as core-seconds where a worker is held by its
    budget to at most one core (one TF thread): share x busy, median over those workers. Each worker then
    gets that work / the median busy; a host, that times its workers. A worker with more than a core runs
    several threads, whose core-seconds are not one thread's, so it does not measure the work."""
    if not budgets or med <= 0:
        return {}
    hosts = busy_w.index.map(lambda w: host_of.get(int(w), "?"))
    counts = pd.Series(hosts).value_counts()
    share = pd.Series([budgets.get(h, math.nan) / counts.get(h, 1) for h in hosts], index=busy_w.index)
    work = (share * busy_w)[share <= 1.0]
    if work.empty:
        work = share * busy_w
    per_worker = float(work.median()) / med
    return {h: per_worker * int(counts[h]) for h in counts.index if h in budgets}


def _assumptions(own: float, cal: float | None, r: float, source: str) -> str:
    if cal is None:
        transfer = (f"transfer {own * 1e3:.1f} ms from this run's own all-reduces (no calibration recorded: may "
                    f"carry a throttled worker's slowness)")
    else:
        transfer = (f"transfer {min(own, cal) * 1e3:.1f} ms per step, the smaller of this run's own "
                    f"({own * 1e3:.1f} ms) and the workers' all-reduce calibration after training ({cal * 1e3:.1f} ms)")
    split = (f"busy and input from traced steps x {r:.3f} (the trace's own cost removed)" if source == "trace"
             else "busy and input from CPU-second estimates")
    return (f"every worker at the median worker's compute speed; {split}; {transfer}; validation scaled by "
            f"median / slowest compute; time outside steps as measured")
