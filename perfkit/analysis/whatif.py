"""What-if "equal workers": the steady epoch a cluster would take if every worker computed at the median
worker's measured speed, built from per-step predictions (docs/figures.md, "what-if").

For each compared step s (traced, or estimated from CPU-seconds), with m the median over workers of each
worker's median busy time:

    step'(s) = m * jitter(s) * r  +  transfer'  +  median_w input(w,s) * r,
    jitter(s) = max_w busy(w,s) / median_s' busy(w,s')

- ``jitter`` keeps each worker's own step-to-step variation: a synchronous step waits for the slowest of N
  workers, so N equal workers take longer than one of them at its median (measured here: 4 equal workers
  at ~0.5 core each, the slowest 5-10% above the median worker, every step);
- ``r`` undoes the trace's own cost: the median callback time of the run's untraced steady steps over
  that of the traced ones (1 for an estimate, whose steps are untraced);
- ``transfer'`` is what a balanced cluster pays per step for its all-reduces: the smaller of two upper
  bounds, and the verdict says which. (a) The run's own transfer (median over steps of the min over workers
  of the exposed all-reduce), too large when the last worker to arrive does its share of the exchange
  inside a throttled budget. (b) The workers' calibration after training (``trainer/worker/calibrate.py``): one
  all-reduce of the gradients plus K of one float, K being the traced collectives per step less the
  gradients' one, too large because in a step the scalar all-reduces partly run under the small ops
  between them. Where the slowest worker (the last to reach every all-reduce, so the one whose exposed
  part of it is (a)) ran under an emulated CPU budget of at most a core, (a) is first scaled like that
  worker's compute, level / its median busy: its share of the exchange runs in the same budget
  (``StepModel.transfer_at``).

The steady epoch is then ``steps_per_epoch * mean_s step'(s)`` (steps more than 5 MADs above the median
left out) plus the epoch's time outside steps (as measured, median over the steady epochs that hold no
trace window, where the run has one) plus validation (from the same epochs).
Validation is synchronous too and waits for the slowest worker: it is scaled by m x the median jitter /
the slowest worker's median busy. The interval is the 95% interval of the mean step, from the step-to-step
spread. The placement what-if is the same model at the compute time of the proposed placement's slowest
host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perfkit.analysis.cpu import host_budgets, worker_hosts
from perfkit.analysis.stragglers import (
    STEP_KEY,
    StepSplit,
    allowances,
    held_to_a_core,
    row_median,
    step_keys,
    work_per_step,
)
from perfkit.analysis.summary import final_attempt
from perfkit.results import RunMeta, RunRecord


@dataclass(frozen=True)
class Prediction:
    """A what-if's steady epoch: the mean predicted step's, with the 95% interval of that mean."""

    epoch_s: float
    epoch_lo_s: float
    epoch_hi_s: float
    step_s: float  # mean predicted step
    val_s: float


@dataclass(frozen=True)
class EqualWorkers:
    predicted: Prediction
    compute_s: float  # the compute per step every worker is assumed to take (the median worker's, traced)
    epoch_per_compute: float  # seconds of epoch per second of compute per step (StepModel.epoch_per_compute)
    transfer_s: float
    transfer_source: str  # "calibration" or "run"
    budgets: dict[str, float]  # per host: the budget that gives its workers the median speed
    assumptions: str

    def to_row(self) -> dict[str, Any]:
        p = self.predicted
        return {"equal_epoch_s": p.epoch_s, "equal_epoch_lo_s": p.epoch_lo_s, "equal_epoch_hi_s": p.epoch_hi_s,
                "equal_step_s": p.step_s, "equal_compute_s": self.compute_s,
                "equal_epoch_per_compute": self.epoch_per_compute, "equal_transfer_s": self.transfer_s,
                "equal_transfer_source": self.transfer_source, "equal_val_s": p.val_s,
                "equal_budgets": budgets_text(self.budgets), "equal_assumptions": self.assumptions}


EMPTY_ROW = {k: math.nan for k in ("equal_epoch_s", "equal_epoch_lo_s", "equal_epoch_hi_s", "equal_step_s",
                                   "equal_compute_s", "equal_epoch_per_compute", "equal_transfer_s", "equal_val_s")} | {
    "equal_transfer_source": None, "equal_budgets": None, "equal_assumptions": None}
PLACEMENT_EMPTY = {"placement_epoch_s": math.nan, "placement_epoch_lo_s": math.nan,
                   "placement_epoch_hi_s": math.nan, "placement_assumptions": None}


def budgets_text(budgets: dict[str, float]) -> str:
    return ", ".join(f"{h}={c:.4g}" for h, c in budgets.items())


def parse_budgets(text: str) -> dict[str, float]:
    """Inverse of ``budgets_text`` (host names are sanitised ids: no '=' or ', ' in them)."""
    return {h: float(c) for h, c in (part.split("=", 1) for part in text.split(", ") if part)}


def calibrated_transfer(meta: RunMeta, split: StepSplit) -> float | None:
    """Seconds a balanced cluster's all-reduces take per step, from the workers' calibration; None without."""
    cals = [w.calibration or {} for w in meta.workers]
    grads = [c["gradients_s"] for c in cals if isinstance(c.get("gradients_s"), (int, float))]
    floats = [c["one_float_s"] for c in cals if isinstance(c.get("one_float_s"), (int, float))]
    if not grads or not floats:
        return None
    extra = 0.0
    if "collectives" in split.steps and split.steps["collectives"].notna().any():
        extra = max(0.0, float(split.steps["collectives"].median()) - 1)
    return float(np.median(grads) + extra * np.median(floats))


def trace_factor(steps: pd.DataFrame, split: StepSplit) -> float:
    """Untraced over traced median step time on the same run (``steps``: its final attempt's step
    records): the trace window's own cost taken out."""
    if split.source != "trace" or steps.empty:
        return 1.0
    steps = steps[steps["epoch"] > steps["epoch"].min()] if steps["epoch"].nunique() > 1 else steps
    width = int(max(split.steps["step"].max(), steps["step"].max())) + 1
    mask = np.isin(step_keys(steps, width), pd.unique(step_keys(split.steps, width)))
    if not mask.any() or mask.all():
        return 1.0
    duration = steps["duration_s"].to_numpy(dtype=float)
    return float(np.nanmedian(duration[~mask]) / np.nanmedian(duration[mask]))


@dataclass(frozen=True)
class StepModel:
    """A run's per-step terms, from which both what-ifs predict a steady epoch for a given compute level."""

    jitter: pd.Series  # per compared step: max over workers of busy(w,s) / median busy(w)
    inp: pd.Series  # per compared step: median input over workers
    busy_w: pd.Series  # per worker: its median busy time
    r: float
    own: float
    cal: float | None
    steps_per_epoch: int
    outside: float
    val_now: float  # median validation time of the steady epochs (``untraced_steady``)
    source: str
    epochs_used: tuple[int, ...] = ()  # the epochs val_now and outside come from
    window_left_out: bool = False  # whether the trace window's epoch was left out of them
    held: bool = False  # the slowest worker ran under a CPU budget of at most a core, on unshaped links

    def transfer_scale(self, level: float) -> float:
        """What the run's own transfer is multiplied by for workers computing ``level`` per step: level /
        the slowest worker's median busy where a CPU budget held that worker (its share of the exchange
        runs in the same budget: 56 ms at 0.5 core, 38 ms at 0.67, 26 ms with two workers sharing 1.5
        cores, in one bench whatif round), else 1."""
        return level / self.slowest if self.scales_transfer else 1.0

    @property
    def scales_transfer(self) -> bool:
        return self.held and self.slowest > 0

    def transfer_at(self, level: float) -> float:
        """The transfer a cluster whose workers compute ``level`` per step pays: the run's own, scaled
        (``transfer_scale``), then bounded by the calibration."""
        own = self.own * self.transfer_scale(level)
        return min(own, self.cal) if self.cal is not None else own

    @property
    def median_level(self) -> float:
        """m: the median over workers of each worker's median busy (the equal-workers compute level)."""
        return float(self.busy_w.median())

    @property
    def epochs_note(self) -> str:
        if not self.window_left_out:
            return ""
        return (f" (validation and time outside steps from epoch {_spans(self.epochs_used)}: "
                f"the trace window's epoch left out)")

    @property
    def slowest(self) -> float:
        """The slowest worker's median busy time."""
        return float(self.busy_w.max())

    @property
    def epoch_per_compute(self) -> float:
        """d(steady epoch) / d(compute per step): the epoch is linear in the compute level (``predict``),
        so a prediction can be moved to the compute a verification really realised."""
        jit = float(self.jitter.median())
        val = self.val_now * jit / self.slowest if self.slowest > 0 else 0.0
        # the transfer's slope at the equal-workers level: own / slowest while scaled and under the calibration
        level = self.median_level
        scaled = self.scales_transfer and (self.cal is None or self.transfer_at(level) < self.cal)
        transfer = self.own / self.slowest if scaled else 0.0
        return self.steps_per_epoch * (float(self.jitter.mean()) * self.r + transfer) + val

    @property
    def transfer(self) -> float:
        """The transfer at the equal-workers level (the what-if the verdict leads with)."""
        return self.transfer_at(self.median_level)

    @property
    def transfer_source(self) -> str:
        if self.cal is not None and self.cal <= self.transfer:
            return "calibration"
        return "scaled run" if self.held else "run"

    @classmethod
    def of(cls, split: StepSplit, record: RunRecord, epochs: pd.DataFrame) -> StepModel | None:
        df = split.steps
        if df.empty or epochs.empty:
            return None
        own_busy = df.groupby("worker")["busy_s"].median()
        rel = df["busy_s"] / df["worker"].map(own_busy).replace(0.0, math.nan)
        blocks = split.blocks  # one row per step, one column per worker
        keys = pd.Index(blocks.matrix(df[STEP_KEY])[:, 0].astype("int64"), name=STEP_KEY)
        per = pd.DataFrame({"jitter": np.fmax.reduce(blocks.matrix(rel), axis=1),
                            "transfer": blocks.matrix(df["transfer_s"])[:, 0],
                            "inp": row_median(blocks.matrix(df["input_s"]))}, index=keys)
        own = float(per["transfer"].median())
        cal = calibrated_transfer(record.run, split)
        steady, left_out = untraced_steady(epochs, split)
        steps = final_attempt(record.steps)  # once: the three below read the same records
        lead = steps[steps["worker"] == steps["worker"].min()]
        return cls(jitter=per["jitter"].fillna(1.0), inp=per["inp"].fillna(0.0), busy_w=own_busy,
                   r=trace_factor(steps, split), own=own, cal=cal, held=_held(record.run, own_busy),
                   steps_per_epoch=_steps_per_epoch(lead), outside=_outside_steps(lead, steady),
                   val_now=float(steady["val_s"].median()), source=split.source,
                   epochs_used=tuple(int(e) for e in steady["epoch"]),
                   window_left_out=left_out)

    def predict(self, level: float) -> Prediction:
        """Every worker computing ``level`` seconds per step at its median, with its own step-to-step
        variation: a synchronous step waits for the slowest of them, so step(s) = level x jitter(s) x r
        + transfer + input(s) x r. Validation waits for the slowest too: scaled by level x median jitter
        over the slowest worker's median busy."""
        pred = _without_outliers(level * self.jitter * self.r + self.transfer_at(level) + self.inp * self.r)
        jit = float(self.jitter.median())
        val = self.val_now * (level * jit / self.slowest if self.slowest > 0 else 1.0)
        half = 1.96 * float(pred.std(ddof=1)) / math.sqrt(len(pred)) if len(pred) > 1 else 0.0
        spe = self.steps_per_epoch
        epoch = spe * float(pred.mean()) + self.outside + val
        return Prediction(epoch_s=epoch, epoch_lo_s=epoch - spe * half, epoch_hi_s=epoch + spe * half,
                          step_s=float(pred.mean()), val_s=val)


def equal_workers(model: StepModel, host_of: dict[int, str], budgets: dict[str, float]) -> EqualWorkers:
    med = model.median_level
    return EqualWorkers(
        predicted=model.predict(med), compute_s=med, epoch_per_compute=model.epoch_per_compute,
        transfer_s=model.transfer, transfer_source=model.transfer_source,
        budgets=_equal_budgets(model.busy_w, host_of, budgets, med),
        assumptions=_assumptions(model, "every worker at the median worker's compute speed", med))


def placement_row(model: StepModel, proposed_s: float) -> dict[str, Any]:
    """The placement what-if's steady epoch: every worker at the compute time of the slowest host under the
    proposed placement (its measured throughput shared by its workers), otherwise the equal-workers model."""
    if not math.isfinite(proposed_s):
        return dict(PLACEMENT_EMPTY)
    p = model.predict(proposed_s)
    return {"placement_epoch_s": p.epoch_s, "placement_epoch_lo_s": p.epoch_lo_s, "placement_epoch_hi_s": p.epoch_hi_s,
            "placement_assumptions": _assumptions(model, "each host's measured throughput (workers / their median "
                                                  "compute) shared by the workers placed on it, "
                                                  f"{proposed_s * 1e3:.0f} ms on the slowest", proposed_s)}


def untraced_steady(epochs: pd.DataFrame, split: StepSplit) -> tuple[pd.DataFrame, bool]:
    """The steady epochs (after the first) without the trace window's, where any are left, and whether one
    was left out: the epoch that holds the window pays the profiler's own cost outside its steps too
    (writing the capture; validation after it took up to 1.8x the next epoch's in bench whatif), which
    ``r`` does not take out."""
    steady = epochs.iloc[1:] if len(epochs) > 1 else epochs
    if split.source != "trace" or split.steps.empty:
        return steady, False
    traced = set((split.steps["epoch"].astype(int) + 1).unique())  # step records count epochs from 0
    clean = steady[~steady["epoch"].astype(int).isin(traced)]
    return (clean, len(clean) < len(steady)) if not clean.empty else (steady, False)


def _held(meta: RunMeta, busy_w: pd.Series) -> bool:
    """Whether the slowest worker (the last to reach each all-reduce, whose exposed part of it is the
    run's transfer) ran under an emulated CPU budget of at most one core with no shaped link: then its
    share of the exchange is CPU work in that budget and scales like its compute. A shaped link's
    transfer is the link's, and a worker on real cores is not known to be CPU-bound."""
    if busy_w.empty or not meta.cluster.emulated or (meta.network.get("links") or {}):
        return False
    held = held_to_a_core(allowances(busy_w, worker_hosts(meta), host_budgets(meta)))
    return bool(held.get(busy_w.idxmax(), False))


def _without_outliers(pred: pd.Series) -> pd.Series:
    """Steps more than 5 median absolute deviations above the median (a stall, a restart's first step)
    are left out: one 7 s step among 0.5 s ones would otherwise move every epoch's prediction."""
    med = float(pred.median())
    mad = float((pred - med).abs().median())
    keep = pred[pred <= med + 5 * max(mad, 0.01 * med)]
    return keep if len(keep) else pred


def _steps_per_epoch(lead: pd.DataFrame) -> int:
    """``lead``: the first worker's step records of the final attempt."""
    return int(lead.groupby("epoch").size().median()) if not lead.empty else 0


def _outside_steps(lead: pd.DataFrame, steady: pd.DataFrame) -> float:
    """Median over the steady epochs of training time not spent inside a step (callbacks, data hand-off)."""
    inside = lead.groupby("epoch")["duration_s"].sum()
    gaps = [float(row.train_s) - float(inside.get(int(row.epoch) - 1, math.nan)) for row in steady.itertuples()]
    gaps = [g for g in gaps if math.isfinite(g)]
    return max(0.0, float(np.median(gaps))) if gaps else 0.0


def _equal_budgets(busy_w: pd.Series, host_of: dict[int, str], budgets: dict[str, float],
                   med: float) -> dict[str, float]:
    """Per host: the budget that gives each of its workers the median busy time: the work per step
    (``work_per_step``; from every worker, as allowance x busy, where none is held to one core) / the
    median busy, times the host's workers."""
    if not budgets or med <= 0 or len({host_of.get(int(w)) for w in busy_w.index}) < 2:
        return {}  # one host (e.g. --workers N): there are no hosts to give different budgets
    work = work_per_step(busy_w, host_of, budgets)
    if work is None:
        work = float((allowances(busy_w, host_of, budgets) * busy_w).median())
    counts = pd.Series(busy_w.index.map(lambda w: host_of.get(int(w), "?"))).value_counts()
    return {h: work / med * int(counts[h]) for h in counts.index if h in budgets}


def _assumptions(m: StepModel, who: str, level: float) -> str:
    """The what-if's assumptions in one line; ``who``: how fast its workers compute, ``level`` seconds."""
    t = m.transfer_at(level)
    own = (f"this run's own {m.own * 1e3:.1f} ms scaled like the compute of the slowest worker, whose CPU budget "
           f"also ran its share of the exchange (x{m.transfer_scale(level):.3f})" if m.scales_transfer
           else f"this run's own {m.own * 1e3:.1f} ms")
    if m.cal is None:
        transfer = f"transfer {t * 1e3:.1f} ms per step: {own} (no calibration recorded)"
    else:
        transfer = (f"transfer {t * 1e3:.1f} ms per step, the smaller of {own} and the workers' all-reduce "
                    f"calibration after training ({m.cal * 1e3:.1f} ms)")
    split = (f"busy and input from traced steps x {m.r:.3f} (the trace's own cost removed)" if m.source == "trace"
             else "busy and input from CPU-second estimates")
    return (f"{who}, keeping its own step-to-step variation (a step "
            f"waits for the slowest: x{float(m.jitter.median()):.3f} at the median step); {split}; {transfer}; "
            f"validation scaled like a step; time outside steps as measured{m.epochs_note}")


def _spans(numbers: Any) -> str:
    """1, 2, 3, 5 -> "1-3, 5": a long run's epochs in a line."""
    out: list[str] = []
    for n in sorted(int(x) for x in numbers):
        if out and out[-1].split("-")[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ", ".join(out)
