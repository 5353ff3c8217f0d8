"""Advice: the causes of lost speed of a synchronous multi-worker run, ranked by what they cost a steady
epoch, each with the change that acts on it and the gain predicted from this run's own figures
(docs/figures.md, "Advice"; ``perfkit tune`` runs them and reports predicted against measured).

``records``: the closed set of causes and a piece of advice as a frozen record; ``causes``: one function a
cause; ``terms``: the per-step terms they are priced from; ``words``: the text a person reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from perfkit.analysis.advice import causes
from perfkit.analysis.advice.records import (
    ADVICE_COLUMNS,
    Advice,
    CauseKind,
    Change,
    Prediction,
    Tried,
    advice_frame,
    advice_of,
)
from perfkit.analysis.advice.terms import steady_epochs, terms, window_growth
from perfkit.analysis.cpusamples import CpuSamples
from perfkit.analysis.overheads import WindowCost, cpu_held, window_cost, worker_cores
from perfkit.analysis.stragglers import StepSplit
from perfkit.analysis.whatif import StepModel
from perfkit.results import RunMeta, RunRecord

__all__ = ["ADVICE_COLUMNS", "Advice", "CauseKind", "Change", "Prediction", "Tried", "advice_frame", "advice_of",
           "advice_table", "in_combination", "MIN_SHARE"]

MIN_SHARE = 0.01  # a cause costing less than this share of a steady epoch is not advice


def advice_table(split: StepSplit, trace: pd.DataFrame | None, model: StepModel, row: dict[str, Any],
                 meta: RunMeta, record: RunRecord | None = None, cpu: CpuSamples | None = None,
                 window: WindowCost | None = None) -> pd.DataFrame:
    """ADVICE_COLUMNS, ranked by cost share of the steady epoch; empty for one worker or no steady epoch.
    ``record`` (the run's step records and CPU samples) adds the oversubscribed threads and the trace window;
    ``cpu``: its ``CpuSamples`` and ``window``: its ``window_cost`` when the caller has them (else taken from
    ``record`` again)."""
    return advice_frame(advice_of_run(split, trace, model, row, meta, record, cpu, window), MIN_SHARE)


def advice_of_run(split: StepSplit, trace: pd.DataFrame | None, model: StepModel, row: dict[str, Any],
                  meta: RunMeta, record: RunRecord | None = None, cpu: CpuSamples | None = None,
                  window: WindowCost | None = None) -> list[Advice]:
    """Every cause the run shows, as records (unranked; ``advice_table`` ranks them and drops the small)."""
    epoch = float(row.get("steady_epoch_s", math.nan))
    if split.workers < 2 or not math.isfinite(epoch) or epoch <= 0:
        return []
    t = terms(split, trace, model, epoch, meta)
    knobs = (meta.config or {}).get("knobs") or {}
    window = window if window is not None or record is None else window_cost(split, record)
    growth = window_growth(window, meta, steady_epochs(row), causes.TRY_K)
    cores = worker_cores(record, cpu) if record is not None else None  # one pass over the CPU samples
    held = cpu_held(split, record, cores) if record is not None else None
    found = [causes.reductions(t, knobs, causes.held_saving(split, held, t)), causes.framework(t, knobs, growth),
             causes.gradients(t, knobs, meta), causes.straggler(t, row, split), causes.waiting_for_input(t, knobs),
             causes.validation(model, epoch)]
    if record is not None:
        found += [causes.oversubscribed(t, split, record, cores),
                  causes.trace_window(window, epoch, steady_epochs(row))]
    advice = [a for a in found if a is not None]
    if meta.launch:  # a launched script's code is its own: the API line is the advice, nothing was tried
        advice = [replace(a, change=None, tried=Tried.SCRIPT) for a in advice]
    return advice


def in_combination(kind: CauseKind, kinds: Sequence[CauseKind], predicted: Prediction) -> Prediction:
    """A change's prediction as a part of the changes ``kinds`` tried together: with the metrics' reductions
    gone, steps per execution counts its low end throughout (the framework time once per call): the rest
    of its prediction is the gaps between the metric reductions, which that change takes away with them."""
    if kind is CauseKind.FRAMEWORK and CauseKind.REDUCTIONS in kinds:
        return Prediction(predicted.lo, predicted.lo, predicted.lo)
    return predicted
