"""The HTML report of a scaling study (plotly.js inlined: it opens without a network): speedup and
efficiency against N, one line per way, with the ideal line and each point's spread over repeats, the
forecast (workers way) with its interval, the per-step split per point, memory per replica and the sync
cost per step, CPU cost per 1,000 samples; then the tables. Plotly is imported here only."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any, TextIO

import pandas as pd

from perfkit.analysis.renderers.scaling_console import fmt, unsupported_lines
from perfkit.analysis.renderers.scaling_json import _rows
from perfkit.analysis.scaling.forecast import EQUAL

if TYPE_CHECKING:
    from perfkit.analysis.scaling.study import ScalingStudy

_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}
td:first-child,th:first-child{text-align:left}.note{color:#666;font-size:.9em}"""
_LAYOUT = {"height": 420, "margin": {"t": 30}, "plot_bgcolor": "white"}


def _div(fig: dict[str, Any]) -> str:
    import plotly.io as pio

    return str(pio.to_html(fig, include_plotlyjs=False, full_html=False, validate=False,
                           config={"displaylogo": False, "responsive": True}))


_WAY_NAMES = {"replicas": "replicas in one process", "workers": "worker processes", "ps": "ps workers (+1 ps)"}


def _ways(s: ScalingStudy) -> list[tuple[str, pd.DataFrame]]:
    """Each way's points, one line each; the replicas line starts at the baseline (1 replica is the baseline
    itself, not run twice)."""
    p = s.points
    base = p[p["way"].isna()] if not p.empty else p
    out = []
    for way, label in _WAY_NAMES.items():
        rows = p[p["way"] == way] if not p.empty else p
        if way == "replicas" and not rows.empty:
            rows = pd.concat([base, rows])
        if not rows.empty:
            out.append((label, rows))
    return out


def _line(label: str, p: pd.DataFrame, col: str, **extra: Any) -> dict[str, Any]:
    err = {"type": "data", "symmetric": False, "array": (p[f"{col}_hi"] - p[col]).tolist(),
           "arrayminus": (p[col] - p[f"{col}_lo"]).tolist()}
    return {"type": "scatter", "mode": "lines+markers", "name": label, "x": [int(v) for v in p["workers"]],
            "y": p[col].tolist(), "error_y": err, **extra}


def speedup_figure(s: ScalingStudy) -> dict[str, Any]:
    ways = _ways(s)
    data = [_line(f"{label} (mean, min–max over repeats)", p, "speedup") for label, p in ways]
    f = s.forecast
    if not f.empty:
        data += _forecast_lines(f)
    n = [int(v) for _, p in ways for v in p["workers"]]
    top = max(n + ([int(v) for v in f["workers"]] if not f.empty else []) or [1])
    data.append({"type": "scatter", "mode": "lines", "name": "ideal (speedup = N)", "x": [1, top], "y": [1, top],
                 "line": {"dash": "dash", "color": "#888"}})
    return {"data": data, "layout": {**_LAYOUT, "xaxis": {"title": "N (replicas or workers)"},
                                     "yaxis": {"title": "speedup"}}}


def _forecast_lines(f: pd.DataFrame, col: str = "speedup") -> list[dict[str, Any]]:
    """The forecast where its points support it, with its 90% band (speedup only); beyond, a fainter line
    with no band (the points cannot say how sure it is there); a cluster's forecast, one marker each."""
    cluster = f[f["hosts"] != EQUAL]
    f = f[f["hosts"] == EQUAL]
    ok = f[f["supported"].astype(bool)]
    beyond = f[~f["supported"].astype(bool)]
    if not ok.empty and not beyond.empty:  # join the lines: the faint one starts where the supported ends
        beyond = pd.concat([ok.tail(1), beyond])
    xs = [int(v) for v in ok["workers"]]
    lines = [{"type": "scatter", "mode": "lines", "name": "forecast (worker processes)", "x": xs,
              "y": ok[col].tolist(), "line": {"dash": "dot"}}] if not ok.empty else []
    if col == "speedup" and not ok.empty:
        lines.append({"type": "scatter", "mode": "lines", "name": "forecast 90% interval (from error out of "
                      "sample)", "x": xs + xs[::-1], "y": ok["speedup_hi"].tolist() + ok["speedup_lo"].tolist()[::-1],
                      "fill": "toself", "line": {"width": 0}, "opacity": 0.2})
    if not beyond.empty:
        lines.append({"type": "scatter", "mode": "lines", "name": "forecast beyond what the points support "
                      "(no interval)", "x": [int(v) for v in beyond["workers"]], "y": beyond[col].tolist(),
                      "line": {"dash": "dot", "color": "#bbb"}})
    lines += [{"type": "scatter", "mode": "markers", "name": f"forecast: {r.hosts}", "x": [int(r.workers)],
               "y": [getattr(r, col)], "marker": {"symbol": "diamond", "size": 10}} for r in cluster.itertuples()]
    return lines


def efficiency_figure(s: ScalingStudy) -> dict[str, Any]:
    ways = _ways(s)
    data = [_line(label, p, "efficiency") for label, p in ways]
    if not s.forecast.empty:
        data += _forecast_lines(s.forecast, "efficiency")
    top = max([int(v) for _, p in ways for v in p["workers"]] or [1])
    data.append({"type": "scatter", "mode": "lines", "name": "ideal (100%)", "x": [1, top], "y": [1, 1],
                 "line": {"dash": "dash", "color": "#888"}})
    return {"data": data, "layout": {**_LAYOUT, "xaxis": {"title": "N (replicas or workers)"},
                                     "yaxis": {"title": "efficiency (speedup / N)", "tickformat": ".0%"}}}


def split_figure(s: ScalingStudy) -> dict[str, Any]:
    p = s.points
    names = {"compute_s": "compute", "transfer_s": "all-reduce transfer", "wait_s": "wait for the slowest",
             "input_s": "input"}
    data = [{"type": "bar", "name": label, "x": p["point"].tolist(),
             "y": (p[col].astype(float) * 1000).tolist()} for col, label in names.items()]
    return {"data": data, "layout": {**_LAYOUT, "barmode": "stack", "xaxis": {"type": "category"},
                                     "yaxis": {"title": "ms per steady step"}}}


def memory_sync_figure(s: ScalingStudy) -> dict[str, Any]:
    """Peak RSS per replica and the sync cost per step, per point, one line per way."""
    data = []
    for label, p in _ways(s):
        x = [int(v) for v in p["workers"]]
        data += [{"type": "scatter", "mode": "lines+markers", "name": f"{label}: MiB per replica", "x": x,
                  "y": (p["memory_per_replica_bytes"].astype(float) / 2**20).tolist()},
                 {"type": "scatter", "mode": "lines+markers", "name": f"{label}: sync ms per step", "x": x,
                  "y": (p["sync_s"].astype(float) * 1000).tolist(), "yaxis": "y2", "line": {"dash": "dot"}}]
    return {"data": data, "layout": {**_LAYOUT, "xaxis": {"title": "N (replicas or workers)"},
                                     "yaxis": {"title": "peak RSS per replica (MiB)"},
                                     "yaxis2": {"title": "sync ms per step (dotted)", "overlaying": "y",
                                                "side": "right"}}}


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


def _unsupported(s: ScalingStudy) -> str:
    lines = unsupported_lines(s)
    if not lines:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return f"<p class='note'>Outside what the measured points support or tested:</p><ul>{items}</ul>"


def page(s: ScalingStudy) -> str:
    from plotly.offline import get_plotlyjs

    charts = [("Speedup against N, one line per way (ideal line dashed)", speedup_figure(s)),
              ("Scaling efficiency against N, one line per way", efficiency_figure(s)),
              ("Per-step split per point", split_figure(s)),
              ("Memory per replica and synchronisation cost per step", memory_sync_figure(s)),
              ("CPU cost per 1,000 samples", cpu_figure(s))]
    parts = [f"<h2>{html.escape(t)}</h2>{_div(f)}" for t, f in charts]
    parts += [f"<h2>Points</h2>{_table(_rows(s.points))}",
              f"<h2>Forecast</h2>{_unsupported(s)}{_table(_rows(s.forecast))}",
              f"<h2>The model's terms</h2>{_table(_rows(s.terms))}", f"<h2>Runs</h2>{_table(_rows(s.runs))}"]
    if s.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in s.notes) + "</ul>")
    r = s.record
    head = (f"{r.scaling} scaling, counts {', '.join(map(str, r.counts))}, ways {', '.join(r.ways)}, "
            f"{r.repeats} repeat(s), preset {r.preset}"
            + (f", hosts of {r.cores_per_worker:g} cores" if r.cores_per_worker is not None else ", local workers")
            + f"; sweep {r.status}")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>perfkit scaling study</title>"
            f"<style>{_CSS}</style><script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
            f"<h1>perfkit scaling study: {html.escape(r.sweep_id)}</h1><p>{html.escape(head)}</p>"
            + "\n".join(parts) + "</body></html>\n")


def render(s: ScalingStudy, out: TextIO) -> None:
    out.write(page(s))
