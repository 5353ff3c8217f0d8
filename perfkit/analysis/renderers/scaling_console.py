"""The terminal view of a scaling study: the curve (speedup, efficiency, ideal, split, CPU cost per point),
memory per replica and sync cost per point, the forecast with its interval, and the model's terms. It
formats what ``analysis/scaling/study.py`` computed."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.table import Table

from perfkit.analysis.scaling.forecast import EQUAL

if TYPE_CHECKING:
    from perfkit.analysis.scaling.study import ScalingStudy


def fmt(v: Any, spec: str = ".2f", missing: str = "-") -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return missing
    return format(f, spec) if math.isfinite(f) else missing


def _span(lo: Any, hi: Any, spec: str = ".2f") -> str:
    return "" if fmt(lo, spec) == fmt(hi, spec) else f" ({fmt(lo, spec)}–{fmt(hi, spec)})"


def curve_table(s: ScalingStudy) -> Table:
    t = Table(title=f"Scaling curve: {s.record.sweep_id} ({s.record.scaling} scaling, {_reference(s)})")
    for col in ("point", "runs", "speedup (range)", "ideal", "efficiency", "epoch s", "step ms", "compute ms",
                "transfer ms", "wait ms", "CPU s / 1k samples"):
        t.add_column(col, justify="left" if col == "point" else "right", no_wrap=col == "point")
    for r in s.points.itertuples():
        t.add_row(str(r.point), str(r.runs), fmt(r.speedup) + "x" + _span(r.speedup_lo, r.speedup_hi),
                  fmt(r.ideal_speedup, ".0f") + "x", fmt(r.efficiency, ".0%"), fmt(r.steady_epoch_s),
                  *(fmt(1000 * float(getattr(r, c)), ".1f") for c in ("step_s", "compute_s", "transfer_s", "wait_s")),
                  fmt(r.cpu_s_per_1k_samples))
    return t


def ways_table(s: ScalingStudy) -> Table:
    """Memory per replica and the sync cost per step of each point (analysis/scaling/ways.py)."""
    t = Table(title="Memory and synchronisation per point (sync: the all-reduce of the gradients among the "
              "replicas, timed after training; transfer: its exposed part of a traced step)")
    for col in ("point", "way", "processes", "replicas / process", "peak RSS / replica MiB", "sync ms / step",
                "transfer ms / step"):
        t.add_column(col, justify="left" if col in ("point", "way") else "right", no_wrap=col == "point")
    for r in s.points.itertuples():
        t.add_row(str(r.point), str(r.way) if isinstance(r.way, str) else "baseline", fmt(r.processes, ".0f"),
                  fmt(r.replicas_per_process, ".0f"), fmt(float(r.memory_per_replica_bytes) / 2**20, ".0f"),
                  fmt(1000 * float(r.sync_s), ".1f"), fmt(1000 * float(r.transfer_s), ".1f"))
    return t


def _reference(s: ScalingStudy) -> str:
    c = s.record.cores_per_worker
    where = "local workers" if s.record.ways == ("workers",) else f"{', '.join(s.record.ways)} on this machine"
    return (f"scale model: hosts of {c:g} cores, speedup against one such host" if c is not None
            else f"{where}, speedup against the single-process baseline")


def forecast_table(s: ScalingStudy) -> Table:
    t = Table(title="Forecast of the workers way: the step-time model fitted to its measured points (90% "
              "interval from its error on counts left out; epochs without perfkit's trace window)")
    for col in ("workers", "", "epoch s (90% interval)", "measured s", "error", "speedup (90% interval)",
                "efficiency", "compute ms", "transfer ms", "wait ms"):
        t.add_column(col, justify="right")
    for r in s.forecast.itertuples():
        beyond = " (not supported)" if not r.supported else ""
        t.add_row(_workers(r), ("measured" if r.measured else "predicted") + beyond,
                  fmt(r.steady_epoch_s) + _span(r.epoch_lo_s, r.epoch_hi_s), fmt(r.measured_epoch_s),
                  fmt(r.error, "+.0%"), fmt(r.speedup) + "x" + _span(r.speedup_lo, r.speedup_hi),
                  fmt(r.efficiency, ".0%"), *(fmt(1000 * float(getattr(r, c)), ".1f")
                                             for c in ("compute_s", "transfer_s", "wait_s")))
    return t


def _workers(r: Any) -> str:
    return str(r.workers) if r.hosts == EQUAL else f"{r.workers} ({r.hosts})"


def unsupported_lines(s: ScalingStudy) -> list[str]:
    """One line per forecast outside what the measured points support, and per cluster forecast's caveat."""
    f = s.forecast
    return [] if f.empty else [f"{_workers(r)} workers" + (" not supported, no interval" if not r.supported else "")
                               + f": {r.support_note}" for r in f.itertuples() if not r.supported or r.hosts != EQUAL]


def terms_table(s: ScalingStudy) -> Table:
    t = Table(title="The model's terms")
    for col in ("term", "formula", "value", "unit"):
        t.add_column(col, justify="right" if col == "value" else "left")
    for r in s.terms.itertuples():
        t.add_row(str(r.term), str(r.formula), fmt(r.value, ".4g"), str(r.unit))
    return t


def render(s: ScalingStudy, out: TextIO, width: int | None = None) -> None:
    console = Console(file=out, width=width or 140, highlight=False)
    console.print(curve_table(s))
    console.print(ways_table(s))
    if not s.forecast.empty:
        console.print(forecast_table(s))
        for line in unsupported_lines(s):
            console.print(f"forecast: {line}", soft_wrap=True)
        console.print(terms_table(s))
    for note in s.notes:
        console.print(f"note: {note}", soft_wrap=True)
