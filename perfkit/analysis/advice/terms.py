"""The per-step terms every piece of advice is priced from, and how a saving per step becomes a steady
epoch's (docs/figures.md, "Advice": E' = E - steps per epoch x s x r, and for changes that act on
validation batches too, - min(validation, validation batches x s))."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from perfkit.analysis.overheads import WindowCost, traced_batches
from perfkit.analysis.stragglers import StepSplit
from perfkit.analysis.whatif import StepModel
from perfkit.results import RunMeta


@dataclass(frozen=True)
class Terms:
    """Per-step terms (traced seconds) and the epoch they scale into."""

    small: float  # every collective's time but the longest
    grad: float  # the gradient all-reduce not hidden: transfer less ``small``
    other: float  # framework time: the trace's other_s less the gaps
    busy: float
    inp: float
    collectives: float  # a step's collectives (median); NaN: not recorded
    gaps: float  # the reductions' share of the idle gaps of the step's chain of collectives
    epoch: float
    spe: int
    r: float  # the trace's own cost taken out, as in the what-if
    val: float = 0.0  # validation seconds per steady epoch
    val_steps: int = 0  # validation batches per epoch (0: not recorded)

    def epoch_saving(self, per_step: float, in_validation: bool = False) -> float:
        """Seconds of the steady epoch a per-batch saving takes out; ``in_validation``: every validation
        batch saves it too (at most the validation time)."""
        val = min(self.val, self.val_steps * per_step) if in_validation and self.val > 0 else 0.0
        return self.spe * per_step * self.r + val

    def speedup(self, per_step: float, in_validation: bool = False, added: float = 0.0) -> float:
        """``added``: seconds the change adds to the steady epoch besides (a larger trace window)."""
        left = self.epoch - self.epoch_saving(per_step, in_validation) + added
        return self.epoch / left if left > 0 else math.nan


def terms(split: StepSplit, trace: pd.DataFrame | None, model: StepModel, epoch: float, meta: RunMeta) -> Terms:
    s = split.steps
    small = small_collectives(s)
    grad = (s["transfer_s"] - small).clip(lower=0.0)
    other = float(trace["other_s"].mean()) if trace is not None and "other_s" in trace and not trace.empty else 0.0
    count = float(s["collectives"].median()) if "collectives" in s and s["collectives"].notna().any() else math.nan
    gaps = _mean(trace, "collective_gaps_s") * (count - 1) / count if count > 1 else 0.0
    val = model.val_now if math.isfinite(model.val_now) and model.val_now > 0 else 0.0
    return Terms(small=float(small.mean()), grad=float(grad.mean()), other=max(0.0, other - gaps),
                 busy=float(s["busy_s"].mean()), inp=float(s["input_s"].fillna(0.0).mean()), collectives=count,
                 gaps=gaps, epoch=epoch, spe=model.steps_per_epoch, r=model.r, val=val,
                 val_steps=_plan_int(meta, "validation_steps"))


def small_collectives(s: pd.DataFrame) -> pd.Series:
    """Per compared step: every collective's time but the longest (0 where a table of an older parser has
    no collective_total_s)."""
    if "collective_total_s" not in s or not s["collective_total_s"].notna().any():
        return pd.Series(0.0, index=s.index)
    return (s["collective_total_s"] - s["allreduce_max_s"]).clip(lower=0.0)


def _mean(trace: pd.DataFrame | None, column: str) -> float:
    """A trace column's mean; 0 where unknown (a table of an older parser, no trace)."""
    if trace is None or column not in trace or trace[column].isna().all():
        return 0.0
    return float(trace[column].mean())


def _plan_int(meta: RunMeta, key: str) -> int:
    """The largest of the workers' recorded plan's ``key`` (0: not recorded)."""
    values = [v for w in meta.workers if w.plan is not None for v in [w.plan.get(key)] if isinstance(v, int)]
    return max(values) if values else 0


def steady_epochs(row: dict[str, Any]) -> int:
    """How many epochs the steady epoch is the mean of (all after the first)."""
    epochs = row.get("epochs")
    return max(1, int(epochs) - 1) if isinstance(epochs, (int, float)) and math.isfinite(epochs) else 1


@dataclass(frozen=True)
class Growth:
    """What a larger trace window adds to the steady epoch: central, at most and at least (seconds), and the
    batches traced now and then."""

    seconds: float
    most: float
    least: float
    now: int
    then: int


def window_growth(window: WindowCost | None, meta: RunMeta, steady: int, k: int) -> Growth | None:
    """Seconds a steady epoch gains when the run is traced at ``k`` batches per execution instead of its own:
    its window's cost per traced batch (the traced steps' extra and the capture's stop, both in proportion
    to the batches traced) x the batches added, spread over the steady epochs; None where unknown."""
    cfg = meta.config or {}
    batches = _plan_int(meta, "steps_per_epoch")
    epochs = cfg.get("epochs")
    if window is None or batches <= 0 or not isinstance(epochs, int):
        return None
    spec = str(cfg.get("profile_steps") or "auto")
    k0 = int(((cfg.get("knobs") or {}).get("steps_per_execution", 1)) or 1)
    now, then = traced_batches(spec, batches, epochs, k0), traced_batches(spec, batches, epochs, k)
    if not now or then is None:
        return None
    grow = (then - now) / now / steady
    return Growth(*(max(0.0, x) * grow for x in (window.extra_s, window.hi_s, window.lo_s)), now, then)
