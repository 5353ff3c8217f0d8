"""The account of a run in the HTML report: the speedup waterfall (analysis/waterfall.py: the ideal speedup,
each term's loss, largest first and ``not explained`` last, and the measured speedup) and the goodput ledger
(analysis/goodput.py: each worker's span of the command in buckets)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfkit.analysis.result import Analysis


def waterfall_figure(a: Analysis, run_id: str) -> dict[str, Any]:
    w = a.waterfall[(a.waterfall["run_id"] == run_id) & (a.waterfall["level"] == "steady")]
    row = a.runs[a.runs["run_id"] == run_id].iloc[0]
    labels = ["ideal", *w["words"].tolist(), "measured"]
    values = [float(row["ideal_speedup"]), *(-w["speedup_lost"]).tolist(), float(row["speedup"])]
    hover = ["the compute given over the baseline's", *(f"{lost:+.3f} s per 1,000 samples, {share:.0%} of the lost "
                                                        "time" for lost, share in zip(w["lost_s"], w["share"],
                                                                                      strict=True)),
             "the steady epoch's speedup"]
    data = [{"type": "waterfall", "x": labels, "y": values, "measure": ["absolute", *["relative"] * len(w), "total"],
             "text": [f"{v:+.2f}x" if 0 < i < len(values) - 1 else f"{v:.2f}x" for i, v in enumerate(values)],
             "hovertext": hover, "textposition": "outside", "connector": {"line": {"color": "#aaa"}},
             "decreasing": {"marker": {"color": "#d62728"}}, "increasing": {"marker": {"color": "#2ca02c"}},
             "totals": {"marker": {"color": "#1f77b4"}}, "showlegend": False}]
    note = ("speedup of a steady epoch; each term's bar is its share of the lost time (seconds per 1,000 samples, "
            "against the baseline's part over the ideal), so the bars add up in any order")
    layout = {"height": 420, "margin": {"l": 60, "r": 20, "t": 50, "b": 120}, "plot_bgcolor": "white",
              "paper_bgcolor": "white", "yaxis": {"title": {"text": "speedup (x)"}, "gridcolor": "#e5e5e5",
                                                  "automargin": True},
              "xaxis": {"automargin": True, "tickangle": -20},
              "annotations": [{"text": note, "xref": "paper", "yref": "paper", "x": 0, "y": 1.1, "showarrow": False,
                               "xanchor": "left"}]}
    return {"data": data, "layout": layout}


def goodput_figure(a: Analysis, names: dict[str, str]) -> dict[str, Any]:
    """Each worker's span of the command, cut into the goodput ledger's buckets (analysis/goodput.py)."""
    from perfkit.analysis.goodput import Bucket

    g = a.goodput
    labels = [f"{names.get(r, r)} w{int(w)}" for r, w in zip(g["run_id"], g["worker"], strict=True)]
    data = [{"type": "bar", "orientation": "h", "y": labels, "x": g[b.column].tolist(), "name": b.words}
            for b in Bucket if g[b.column].abs().sum() > 0]  # NaN (not timed) sums as 0: left out
    note = "seconds of the whole command per worker; goodput = training steps / the span"
    layout = {"height": max(300, 60 + 22 * len(labels)), "barmode": "stack", "plot_bgcolor": "white",
              "paper_bgcolor": "white", "margin": {"l": 60, "r": 20, "t": 50, "b": 60},
              "xaxis": {"title": {"text": "seconds since the command's start"}, "gridcolor": "#e5e5e5"},
              "yaxis": {"automargin": True, "autorange": "reversed"},
              "annotations": [{"text": note, "xref": "paper", "yref": "paper", "x": 0, "y": 1.1, "showarrow": False,
                               "xanchor": "left"}]}
    return {"data": data, "layout": layout}
