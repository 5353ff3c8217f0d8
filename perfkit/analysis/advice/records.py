"""Advice as values: the closed set of causes of lost speed, one piece of advice as a frozen record, and the
table the analysis keeps them in (one row per piece, typed columns: no text to match)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

import pandas as pd

from perfkit.config import KNOB_FLAGS, Knobs


class CauseKind(str, Enum):
    """What costs a synchronous multi-worker run its speed (docs/figures.md, "Advice")."""

    REDUCTIONS = "metric_reductions"  # the metrics' and loss's collectives besides the gradients'
    FRAMEWORK = "framework"  # per-step Python, function dispatch and callbacks
    GRADIENTS = "gradient_allreduce"  # the gradient all-reduce not hidden under compute
    STRAGGLER = "straggler"  # waiting for the slowest worker
    INPUT = "input"  # waiting for the input pipeline
    VALIDATION = "validation"
    OVERSUBSCRIBED = "oversubscribed"  # more worker threads than a host has cores
    TRACE_WINDOW = "trace_window"  # perfkit's own trace capture

    @property
    def per_epoch(self) -> bool:
        """Whether its cost is seconds per steady epoch (validation, the trace window), not per step."""
        return self in (CauseKind.VALIDATION, CauseKind.TRACE_WINDOW)


class Tried(str, Enum):
    """Whether ``perfkit tune`` runs a piece of advice, and why not."""

    NOT_YET = "not_yet"  # a perfkit knob: tune runs it
    SCRIPT = "script"  # a launched script: the change is in its code
    NOT_AN_OPTION = "not_an_option"  # no perfkit option makes it
    PLACEMENT = "placement"  # no perfkit option: a different placement of the workers
    NEEDS_TRACE = "needs_trace"  # --profile-steps off: perfkit's split needs the trace


PROFILE_STEPS = "profile_steps"  # the run's trace window: a perfkit option that is not a knob


@dataclass(frozen=True)
class Change:
    """The perfkit option a piece of advice sets: a ``Knobs`` field, or ``profile_steps``."""

    option: str
    value: int | str

    def __post_init__(self) -> None:
        if self.option not in KNOB_FLAGS and self.option != PROFILE_STEPS:
            raise ValueError(f"{self.option!r} is not a perfkit option advice can set")

    @property
    def is_knob(self) -> bool:
        """Whether ``perfkit tune`` can run it (a knob; the trace window is what tune measures with)."""
        return self.option in KNOB_FLAGS

    def knobs(self, base: Knobs) -> Knobs:
        """``base`` with this change made (checked as the flag would be); a change that is no knob: ``base``."""
        return replace(base, **{self.option: self.value}) if self.is_knob else base


@dataclass(frozen=True)
class Prediction:
    """The steady-epoch speedup predicted for a change alone: its central figure and range."""

    speedup: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Advice:
    """One cause of lost speed in one run, what it costs and what would act on it.

    ``detail`` is the kind's own figure: REDUCTIONS the collectives a step besides the longest,
    OVERSUBSCRIBED the hosts' threads and cores, TRACE_WINDOW the traced steps, STRAGGLER the host budgets
    that would equal the workers; None for the others."""

    kind: CauseKind
    cost_s: float  # per step; seconds per steady epoch where ``kind.per_epoch``
    cost_share: float  # of a steady epoch
    change: Change | None  # None: no perfkit option acts on it (``api`` is the change to make)
    api: str  # the TensorFlow line that makes the change
    predicted: Prediction
    basis: str  # what the prediction assumes
    tried: Tried = Tried.NOT_YET
    detail: int | str | None = None


ADVICE_COLUMNS = ["rank", "kind", "detail", "cost_s", "cost_share", "option", "value", "api", "predicted_speedup",
                  "predicted_lo", "predicted_hi", "basis", "tried"]


def advice_frame(advice: Sequence[Advice], min_share: float = 0.0) -> pd.DataFrame:
    """ADVICE_COLUMNS, one row per piece whose share is at least ``min_share``, the costliest first."""
    kept = sorted((a for a in advice if a.cost_share >= min_share), key=lambda a: -a.cost_share)
    rows = [{"rank": i, "kind": a.kind.value, "detail": a.detail, "cost_s": float(a.cost_s),
             "cost_share": float(a.cost_share), "option": a.change.option if a.change else None,
             "value": a.change.value if a.change else None, "api": a.api,
             "predicted_speedup": float(a.predicted.speedup), "predicted_lo": float(a.predicted.lo),
             "predicted_hi": float(a.predicted.hi), "basis": a.basis, "tried": a.tried.value}
            for i, a in enumerate(kept, start=1)]
    # Cell by cell as written: pandas would make a column of ints and Nones floats (8 -> 8.0, a flag's value).
    kept_as = {"kind", "detail", "option", "value", "api", "basis", "tried"}
    return pd.DataFrame({c: pd.Series([r[c] for r in rows], dtype=object if c in kept_as else None)
                         for c in ADVICE_COLUMNS})


def advice_of(row: Any) -> Advice:
    """One row of an advice table (a namedtuple of ``itertuples`` or a Series) back as its record."""
    option, value = getattr(row, "option", None), getattr(row, "value", None)
    change = Change(option, cell_value(value)) if isinstance(option, str) and option else None
    detail = getattr(row, "detail", None)
    return Advice(CauseKind(row.kind), float(row.cost_s), float(row.cost_share), change, str(row.api),
                  Prediction(float(row.predicted_speedup), float(row.predicted_lo), float(row.predicted_hi)),
                  str(row.basis), Tried(row.tried), None if _missing(detail) else cell_value(detail))


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def cell_value(value: Any) -> Any:
    """A numpy scalar from a table cell as the Python value it was written as."""
    return value.item() if hasattr(value, "item") else value
