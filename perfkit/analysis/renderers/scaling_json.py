"""The JSON of a scaling study (``perfkit sweep``): the sweep, its points (per way), its runs and its forecast.

``KEYS`` documents every top-level key (docs/scaling.md); a figure that was not measured is ``null``.
Tables are lists of row objects whose keys are the columns of ``analysis/scaling/study.py`` (POINT_COLUMNS,
RUN_COLUMNS) and ``analysis/scaling/forecast.py`` (FORECAST_COLUMNS, TERM_COLUMNS).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, TextIO

import pandas as pd

if TYPE_CHECKING:
    from perfkit.analysis.scaling.study import ScalingStudy

FORMAT = "perfkit-scaling"
VERSION = 1
KEYS: dict[str, str] = {
    "format": f'"{FORMAT}"', "version": f"format version ({VERSION})",
    "sweep": "sweep.json as recorded: what was asked (counts, ways, repeats, scaling, cores_per_worker), the "
    "reference, every run started (with its way) and how it ended",
    "points": "per point (the baseline, then each way's counts: way replicas, workers or ps): speedup mean/lo/hi/sd "
    "over repeats, efficiency, the ideal speedup, the per-step split (compute_s, transfer_s, wait_s, input_s), "
    "CPU-seconds per 1,000 samples, processes, replicas_per_process, memory_per_replica_bytes (peak RSS per "
    "replica) and sync_s (the gradients' all-reduce among the replicas, timed after training; null for ps)",
    "runs": "per complete run: its round, way, count, steady epoch, split, memory per replica, sync cost and "
    "speedup against the reference",
    "forecast": "the workers way only, per worker count (measured and beyond) on equal hosts (hosts: \"equal\"), and "
    "a cluster file's hosts (hosts: the file and its hosts, from --forecast-cluster): the model's step terms and "
    "validation, the predicted steady epoch (without perfkit's trace window) with its 90% interval (epoch_lo_s, "
    "epoch_hi_s: from the model's error on counts left out; null where supported is false, with support_note "
    "saying why), speedup with its interval, the measured epoch and error where run",
    "model": "the fitted step-time model: one row per term (term, formula, value, unit), the measured facts it "
    "was given (C, M, L) and its error on each count left out (formula loo)",
    "notes": "list of sentences: failed or missing runs, a partial curve, what the forecast could not do",
}


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):  # numpy scalars
        return _clean(v.item())
    return v


def _rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _clean(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


def document(s: ScalingStudy) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "sweep": s.record.to_dict(), "points": _rows(s.points),
            "runs": _rows(s.runs), "forecast": _rows(s.forecast), "model": _rows(s.terms), "notes": list(s.notes)}


def render(s: ScalingStudy, out: TextIO) -> None:
    out.write(json.dumps(document(s), indent=2, default=str) + "\n")
