"""The HTML report's step timeline (a Gantt chart as a plotly figure dict) of ``Analysis.step_timeline``:
one row per worker, each step a run of segments (input, compute, wait, exposed all-reduce) placed at its
recorded start, the all-reduce hidden under compute as a thin bar over the compute's end, the slowest
worker of each step outlined and the run's straggler's row named in red; under them, the same steps as
equal workers would run them. It computes no figure: every number comes from the analysis.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from perfkit.analysis.stragglers import step_keys

if TYPE_CHECKING:
    from perfkit.analysis.result import Analysis

# The colours of the report's per-worker split chart, so that a term reads the same in both.
SEGMENTS = (("input_s", "input", "#d62728"), ("compute_s", "compute", "#1f77b4"), ("wait_s", "wait", "#2ca02c"),
            ("transfer_s", "all-reduce (exposed)", "#ff7f0e"))
OVERLAP_COLOR = "rgba(255,127,14,0.45)"
WHAT_IF_ROW = "equal workers (what-if)"
DRAWN_STEPS = 200  # steps of a trace window drawn at most (the auto window has 10)


def timeline_figure(a: Analysis, run_id: str) -> dict[str, Any] | None:
    """The run's step timeline, or None when it has none (one worker, no split, steps not placed)."""
    t = a.step_timeline[a.step_timeline["run_id"] == run_id] if not a.step_timeline.empty else a.step_timeline
    if t.empty:
        return None
    t, steps = _drawn(t)
    labels, ticks = _rows(a, run_id, t)
    t = t.assign(row=[labels[int(w)] for w in t["worker"]], start_ms=t["start_s"] * 1e3)
    data = []
    for col, name, color in SEGMENTS:
        offset = _offset_ms(t, col)
        data.append({"type": "bar", "orientation": "h", "name": name, "y": t["row"].tolist(),
                     "x": (t[col] * 1e3).round(3).tolist(), "base": (t["start_ms"] + offset).round(3).tolist(),
                     "marker": _marker(t, color, outline=col == "compute_s"), "width": 0.6,
                     "hovertemplate": _hover(t, name), "customdata": _custom(t)})
    overlap = t["overlap_s"].fillna(0.0) * 1e3
    end_of_compute = t["start_ms"] + (t["input_s"] + t["compute_s"]) * 1e3
    data.append({"type": "bar", "orientation": "h", "name": "all-reduce under compute", "y": t["row"].tolist(),
                 "x": overlap.round(3).tolist(), "base": (end_of_compute - overlap).round(3).tolist(), "width": 0.2,
                 "marker": {"color": OVERLAP_COLOR}, "hovertemplate": _hover(t, "all-reduce under compute"),
                 "customdata": _custom(t)})
    rows = list(dict.fromkeys(labels.values()))
    layout = {"barmode": "overlay", "height": 170 + 42 * len(rows), "bargap": 0.3,
              "margin": {"l": 60, "r": 20, "t": 40, "b": 110}, "plot_bgcolor": "white", "paper_bgcolor": "white",
              "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
              "xaxis": {"title": {"text": "ms since the window's first step"}, "gridcolor": "#e5e5e5",
                        "zeroline": False},
              "yaxis": {"categoryorder": "array", "categoryarray": rows, "autorange": "reversed",
                        "tickvals": rows, "ticktext": [ticks[r] for r in rows], "automargin": True},
              "annotations": [{"text": _note(a, run_id, steps), "xref": "paper", "yref": "paper", "x": 0, "y": 0,
                               "yanchor": "top", "yshift": -55, "align": "left", "showarrow": False,
                               "xanchor": "left"}]}
    return {"data": data, "layout": layout}


def _drawn(t: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The window's first DRAWN_STEPS steps (all of them when it has no more), and how many it has: a
    browser cannot draw a window of every step of a long run (200k steps x 4 workers: a 300 MB report)."""
    if t.empty:
        return t, 0
    # (epoch, step) as one integer: a MultiIndex of a million rows took most of a cached report's drawing
    key = step_keys(t, int(t["step"].max()) + 1)
    steps = pd.unique(key[t["worker"].to_numpy() >= 0])  # in the order the window ran them
    if len(steps) <= DRAWN_STEPS:
        return t, len(steps)
    return t[np.isin(key, steps[:DRAWN_STEPS])], len(steps)


def _rows(a: Analysis, run_id: str, t: pd.DataFrame) -> tuple[dict[int, str], dict[str, str]]:
    """Row label per worker (-1: the what-if) and its tick text (the straggler's in red)."""
    run = a.runs[a.runs["run_id"] == run_id].iloc[0]
    slow = int(run["slowest_worker"]) if not pd.isna(run.get("slowest_worker")) else None
    w = a.workers[a.workers["run_id"] == run_id].set_index("worker") if not a.workers.empty else pd.DataFrame()
    labels, ticks = {}, {}
    for worker in sorted(int(x) for x in t["worker"].unique() if int(x) >= 0):
        host = w.loc[worker, "host"] if worker in w.index and "host" in w else None
        label = f"worker {worker}" + (f" · {host}" if isinstance(host, str) else "")
        labels[worker] = label
        ticks[label] = (f"<b style='color:#d62728'>{label} · straggler</b>" if worker == slow and
                        _clear_straggler(run) else label)
    if (t["worker"] < 0).any():
        labels[-1] = ticks[WHAT_IF_ROW] = WHAT_IF_ROW
    return labels, ticks


def _clear_straggler(run: pd.Series) -> bool:
    share = run.get("slowest_straggler_share")
    return share is not None and not pd.isna(share) and float(share) >= 0.5


def _offset_ms(t: pd.DataFrame, col: str) -> pd.Series:
    """Where a segment starts within its step: after the segments drawn before it."""
    before = [c for c, _, _ in SEGMENTS[:[c for c, _, _ in SEGMENTS].index(col)]]
    return t[before].fillna(0.0).sum(axis=1) * 1e3 if before else pd.Series(0.0, index=t.index)


def _marker(t: pd.DataFrame, color: str, outline: bool) -> dict[str, Any]:
    if not outline:
        return {"color": color}
    strag = t["straggler"].astype(bool).tolist()
    return {"color": color, "line": {"color": ["#000" if s else color for s in strag],
                                     "width": [2 if s else 0 for s in strag]}}


def _custom(t: pd.DataFrame) -> list[list[Any]]:
    return [[int(e), int(s), round(float(d) * 1e3, 2)] for e, s, d in zip(t["epoch"], t["step"], t["step_s"])]


def _hover(t: pd.DataFrame, name: str) -> str:
    return (f"%{{y}}<br>epoch %{{customdata[0]}} step %{{customdata[1]}} (%{{customdata[2]}} ms)<br>{name}: "
            "%{x:.2f} ms<extra></extra>")


def _note(a: Analysis, run_id: str, steps: int) -> str:
    run = a.runs[a.runs["run_id"] == run_id].iloc[0]
    source = "from the trace" if run.get("split_source") == "trace" else "estimated from CPU-seconds"
    total = _window_steps(run, steps)
    kept = "every one" if total <= steps else f"the first {steps:,}"
    drawn = f" (the first {DRAWN_STEPS} drawn; {kept} in --format json)" if total > DRAWN_STEPS else ""
    steps = total
    eq = run.get("equal_step_s")
    what = (f"<br>what-if: every worker at the median worker's compute ({float(run['equal_compute_s']) * 1e3:.1f} "
            "ms), the trace's cost left in" if eq is not None and not (isinstance(eq, float) and math.isnan(eq))
            else "")
    return (f"{steps:,} steps{drawn}, split {source}, scaled to each recorded step; outlined: the slowest worker of "
            f"each step{what}")


def _window_steps(run: pd.Series, in_table: int) -> int:
    """Steps in the run's window: a trace window longer than the table (timeline.TABLE_STEPS) has all its
    steps compared by the split (``steps_compared``); an estimate's table is the window drawn."""
    compared = run.get("steps_compared")
    if run.get("split_source") != "trace" or compared is None or pd.isna(compared):
        return in_table
    return max(in_table, int(compared))
