"""The HTML report of a scaling study (plotly.js inlined: it opens without a network): speedup and
efficiency against workers with the ideal line and each point's spread over repeats, the forecast with its
interval, the per-step split against workers, CPU cost per 1,000 samples; then the tables. Plotly is
imported here only."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any, TextIO

import pandas as pd

from perfkit.analysis.renderers.scaling_console import fmt
from perfkit.analysis.renderers.scaling_json import _rows

if TYPE_CHECKING:
    from perfkit.analysis.scaling import ScalingStudy

_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}
td:first-child,th:first-child{text-align:left}.note{color:#666;font-size:.9em}"""
_LAYOUT = {"height": 420, "margin": {"t": 30}, "plot_bgcolor": "white"}


def _div(fig: dict[str, Any]) -> str:
    import plotly.io as pio

    return str(pio.to_html(fig, include_plotlyjs=False, full_html=False, validate=False,
                           config={"displaylogo": False, "responsive": True}))


def _workers(s: ScalingStudy) -> pd.DataFrame:
    return s.points[s.points["point"] != s.points["point"].iloc[0]] if s.record.reference == "baseline" \
        and not s.points.empty else s.points


def speedup_figure(s: ScalingStudy) -> dict[str, Any]:
    p = _workers(s)
    n = [int(v) for v in p["workers"]]
    err = {"type": "data", "symmetric": False, "array": (p["speedup_hi"] - p["speedup"]).tolist(),
           "arrayminus": (p["speedup"] - p["speedup_lo"]).tolist()}
    data = [{"type": "scatter", "mode": "lines+markers", "name": "measured (mean, min–max over repeats)", "x": n,
             "y": p["speedup"].tolist(), "error_y": err}]
    f = s.forecast
    if not f.empty:
        xs = [int(v) for v in f["workers"]]
        data += [{"type": "scatter", "mode": "lines", "name": "forecast", "x": xs, "y": f["speedup"].tolist(),
                  "line": {"dash": "dot"}},
                 {"type": "scatter", "mode": "lines", "name": "forecast interval", "x": xs + xs[::-1],
                  "y": f["speedup_hi"].tolist() + f["speedup_lo"].tolist()[::-1], "fill": "toself",
                  "line": {"width": 0}, "opacity": 0.2}]
    top = max(n + [int(v) for v in f["workers"]] if not f.empty else n or [1])
    data.append({"type": "scatter", "mode": "lines", "name": "ideal (speedup = N)", "x": [1, top], "y": [1, top],
                 "line": {"dash": "dash", "color": "#888"}})
    return {"data": data, "layout": {**_LAYOUT, "xaxis": {"title": "workers"}, "yaxis": {"title": "speedup"}}}


def efficiency_figure(s: ScalingStudy) -> dict[str, Any]:
    p = _workers(s)
    n = [int(v) for v in p["workers"]]
    err = {"type": "data", "symmetric": False, "array": (p["efficiency_hi"] - p["efficiency"]).tolist(),
           "arrayminus": (p["efficiency"] - p["efficiency_lo"]).tolist()}
    data = [{"type": "scatter", "mode": "lines+markers", "name": "measured", "x": n, "y": p["efficiency"].tolist(),
             "error_y": err}]
    if not s.forecast.empty:
        data.append({"type": "scatter", "mode": "lines", "name": "forecast",
                     "x": [int(v) for v in s.forecast["workers"]],
                     "y": s.forecast["efficiency"].tolist(), "line": {"dash": "dot"}})
    data.append({"type": "scatter", "mode": "lines", "name": "ideal (100%)", "x": [1, max(n or [1])], "y": [1, 1],
                 "line": {"dash": "dash", "color": "#888"}})
    return {"data": data, "layout": {**_LAYOUT, "xaxis": {"title": "workers"},
                                     "yaxis": {"title": "efficiency (speedup / N)", "tickformat": ".0%"}}}


def split_figure(s: ScalingStudy) -> dict[str, Any]:
    p = _workers(s)
    names = {"compute_s": "compute", "transfer_s": "all-reduce transfer", "wait_s": "wait for the slowest",
             "input_s": "input"}
    data = [{"type": "bar", "name": label, "x": [str(int(v)) for v in p["workers"]],
             "y": (p[col].astype(float) * 1000).tolist()} for col, label in names.items()]
    return {"data": data, "layout": {**_LAYOUT, "barmode": "stack", "xaxis": {"title": "workers", "type": "category"},
                                     "yaxis": {"title": "ms per steady step"}}}


def cpu_figure(s: ScalingStudy) -> dict[str, Any]:
    p = s.points
    return {"data": [{"type": "bar", "x": p["point"].tolist(), "y": p["cpu_s_per_1k_samples"].tolist()}],
            "layout": {**_LAYOUT, "yaxis": {"title": "CPU-seconds per 1,000 samples"}}}


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p class='note'>none</p>"
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(v: Any) -> str:
    return "-" if v is None else fmt(v, ".4g") if isinstance(v, float) else str(v)


def page(s: ScalingStudy) -> str:
    from plotly.offline import get_plotlyjs

    charts = [("Speedup against workers (ideal line dashed)", speedup_figure(s)),
              ("Scaling efficiency against workers", efficiency_figure(s)),
              ("Per-step split against workers", split_figure(s)),
              ("CPU cost per 1,000 samples", cpu_figure(s))]
    parts = [f"<h2>{html.escape(t)}</h2>{_div(f)}" for t, f in charts]
    parts += [f"<h2>Points</h2>{_table(_rows(s.points))}", f"<h2>Forecast</h2>{_table(_rows(s.forecast))}",
              f"<h2>The model's terms</h2>{_table(_rows(s.terms))}", f"<h2>Runs</h2>{_table(_rows(s.runs))}"]
    if s.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in s.notes) + "</ul>")
    r = s.record
    head = (f"{r.scaling} scaling, counts {', '.join(map(str, r.counts))}, {r.repeats} repeat(s), preset {r.preset}"
            + (f", hosts of {r.cores_per_worker:g} cores" if r.cores_per_worker is not None else ", local workers")
            + f"; sweep {r.status}")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>perfkit scaling study</title>"
            f"<style>{_CSS}</style><script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
            f"<h1>perfkit scaling study: {html.escape(r.sweep_id)}</h1><p>{html.escape(head)}</p>"
            + "\n".join(parts) + "</body></html>\n")


def render(s: ScalingStudy, out: TextIO) -> None:
    out.write(page(s))
