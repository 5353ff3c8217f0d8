"""Self-contained HTML report of an Analysis (plotly.js inlined: it opens without a network).

The verdict comes first, then the charts: speedup and efficiency against the ideal line, CPU% over
time per process with epoch ends marked, step time per worker, compute / transfer / wait per worker (its
subtitle gives each traced worker's share of collective time hidden under compute),
validation accuracy and AUC per epoch, memory per worker; then the runs table, runs left out and
warnings. Plotly is imported here only, lazily: analysing never needs it.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import pandas as pd

from perfkit.analysis.advice.words import view
from perfkit.analysis.renderers import RenderOptions
from perfkit.analysis.renderers.account_html import goodput_figure, waterfall_figure
from perfkit.analysis.renderers.console import MIB, fmt
from perfkit.analysis.renderers.gantt import timeline_figure

if TYPE_CHECKING:
    from perfkit.analysis.result import Analysis

_STAMP = re.compile(r"^\d{8}T\d{6}Z-")
_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}ul.verdict li{margin:.3em 0}
ul.verdict li:first-child{font-weight:600}
table{border-collapse:collapse;font-size:.85em;max-width:100%}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right;vertical-align:top;overflow-wrap:anywhere}
td:first-child,th:first-child{text-align:left}.note{color:#666;font-size:.9em}
table.fit{table-layout:fixed;width:100%}table.fit .text{text-align:left}th{overflow-wrap:normal}
details>summary{cursor:pointer;color:#555}code{white-space:normal}"""


FINGERPRINT_META = "perfkit-analysis"  # the analysis' fingerprint (result.fingerprint), in the page's head
_FINGERPRINT = re.compile(r"<meta name='perfkit-analysis' content='([0-9a-f]{64})'>")


def report_fingerprint(path: Path) -> str | None:
    """The fingerprint of the analysis an HTML report at ``path`` was written from; None when there is no
    such report (or it is older than fingerprints, or unreadable)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(4096)
    except OSError:
        return None
    found = _FINGERPRINT.search(head)
    return found.group(1) if found else None


def short_names(run_ids: list[str]) -> dict[str, str]:
    """Run ids without their time stamp when that keeps them distinct (chart labels)."""
    short = {r: _STAMP.sub("", r) for r in run_ids}
    return short if len(set(short.values())) == len(short) else {r: r for r in run_ids}


def render(a: Analysis, out: TextIO, options: RenderOptions = RenderOptions()) -> None:
    out.write(page(a))


def page(a: Analysis) -> str:
    from plotly.offline import get_plotlyjs

    names = short_names(a.runs["run_id"].tolist()) if not a.runs.empty else {}
    sections = [_verdict_html(a)]
    for title, fig in charts(a, names):
        sections.append(f"<h2>{html.escape(title)}</h2>" + (fig if isinstance(fig, str) else _div(fig)))
    if len(a.modes) > 1:
        sections.append("<h2>Strategies compared (latest run of each mode)</h2>" + _table_html(
            a.modes, list(_MODE_COLS), _MODE_COLS))
    for run_id, adv in (a.advice.groupby("run_id", sort=False) if not a.advice.empty else []):
        sections.append(f"<h2>Advice: {html.escape(str(run_id))}</h2>" + _advice_html(view(adv)))
    sections.append("<h2>Runs</h2>" + _runs_html(a))
    if not a.processes.empty:
        sections.append("<h2>CPU and memory per process (training window, or a run's whole life when it has no "
                        "steps; 100% = one core)</h2>"
                        + _table_html(a.processes.assign(rss_peak_mib=a.processes["rss_peak_bytes"] / MIB),
                                      list(_PROC_COLS), _PROC_COLS))
    stepless = a.runs[a.runs["steps_note"].map(lambda v: isinstance(v, str))] if not a.runs.empty else a.runs
    if not stepless.empty:
        sections.append("<h2>Runs without steps</h2>" + _table_html(stepless, ["run_id", "steps_note"],
                                                                    {"run_id": "run id", "steps_note": "why"}))
    if not a.excluded.empty:
        sections.append("<h2>Left out</h2>" + _table_html(a.excluded, ["run_id", "reason", "path"]))
    if a.warnings:
        sections.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{html.escape(w)}</li>" for w in a.warnings) + "</ul>")
    from perfkit.analysis.result import fingerprint

    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<meta name='{FINGERPRINT_META}' content='{fingerprint(a)}'><title>perfkit analysis</title>"
            f"<style>{_CSS}</style><script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
            "<h1>perfkit analysis</h1>" + "\n".join(sections) + "</body></html>\n")


def _div(fig: dict[str, Any]) -> str:
    import plotly.io as pio

    # Plain figure dicts, not validated graph objects: ten times cheaper for the same JSON.
    return str(pio.to_html(fig, include_plotlyjs=False, full_html=False, validate=False,
                           config={"displaylogo": False, "responsive": True}))


def _note(text: str) -> str:
    return f"<p class='note'>{html.escape(text)}</p>"


def charts(a: Analysis, names: dict[str, str]) -> list[tuple[str, Any]]:
    """(title, plotly figure dict or an HTML note saying why the chart is missing), in report order."""
    out: list[tuple[str, Any]] = [("Speedup and scaling efficiency", speedup_figure(a, names))]
    for run_id in a.waterfall["run_id"].unique() if not a.waterfall.empty else []:
        out.append((f"Where the speedup went: {run_id}", waterfall_figure(a, run_id)))
    for run_id in a.runs["run_id"] if not a.runs.empty else []:
        out.append((f"CPU% per process over time: {run_id}", cpu_figure(a, run_id)))
    out += [("Step time per worker", step_figure(a, names)),
            ("Compute / transfer / wait per worker", split_figure(a, names))]
    out += timelines(a)
    if not a.goodput.empty:
        out.append(("Goodput: where the time of the whole command went, per worker", goodput_figure(a, names)))
    out += [("Validation accuracy and AUC per epoch", convergence_figure(a, names)),
            ("Memory per worker (peak RSS)", memory_figure(a, names))]
    return out


def timelines(a: Analysis) -> list[tuple[str, Any]]:
    """One step timeline per run that has one; a note when no run with several workers has."""
    ids = a.step_timeline["run_id"].unique().tolist() if not a.step_timeline.empty else []
    if not ids:
        return [("Step timeline", _note("No step timeline: it needs a run of several synchronous workers with a "
                                        "trace window or enough CPU samples to split its steps."))]
    return [(f"Step timeline of the trace window: {run_id}", timeline_figure(a, run_id)) for run_id in ids]


_AXIS = {"gridcolor": "#e5e5e5", "zerolinecolor": "#ccc", "automargin": True}


def _figure(data: list[dict[str, Any]], note: str | None = None, two: bool = False, **layout: Any) -> dict[str, Any]:
    lay: dict[str, Any] = {"height": 420, "margin": {"l": 60, "r": 20, "t": 50, "b": 60},
                           "plot_bgcolor": "white", "paper_bgcolor": "white", "colorway": PALETTE,
                           "xaxis": dict(_AXIS), "yaxis": dict(_AXIS)}
    if two:  # two side-by-side panels: traces on the right use xaxis "x2" / yaxis "y2"
        lay["xaxis"]["domain"], lay["xaxis2"] = [0, 0.45], {**_AXIS, "domain": [0.55, 1], "anchor": "y2"}
        lay["yaxis2"] = {**_AXIS, "anchor": "x2"}
    if note:
        lay["annotations"] = [{"text": note, "xref": "paper", "yref": "paper", "x": 0, "y": 1.1,
                               "showarrow": False, "xanchor": "left"}]
    for key, value in layout.items():  # "xaxis", "yaxis2", ...: merged into the defaults
        lay[key] = {**lay.get(key, {}), **value} if isinstance(value, dict) else value
    return {"data": data, "layout": lay}


def _list(values: Any) -> list[Any]:
    return [None if v is None or (isinstance(v, float) and v != v) else v for v in pd.Series(values).tolist()]


def speedup_figure(a: Analysis, names: dict[str, str]) -> Any:
    runs = a.runs[a.runs["speedup"].notna()] if not a.runs.empty else a.runs
    if runs.empty:
        return command_speedup_figure(a, names)
    top = int(max(runs["workers"].max(), 2))
    labels = [names[r] for r in runs["run_id"]]
    data = [
        {"type": "scatter", "x": [1, top], "y": [1, top], "mode": "lines", "name": "ideal (speedup = workers)",
         "line": {"dash": "dash", "color": "#888"}},
        {"type": "scatter", "x": _list(runs["workers"]), "y": _list(runs["speedup"]), "mode": "markers+text",
         "text": labels, "textposition": "top center", "name": "speedup (steady epoch)", "marker": {"size": 10}},
        {"type": "bar", "x": labels, "y": _list(runs["efficiency"]), "name": "scaling efficiency",
         "xaxis": "x2", "yaxis": "y2"},
        {"type": "scatter", "x": [labels[0], labels[-1]], "y": [1, 1], "mode": "lines", "name": "ideal efficiency",
         "line": {"dash": "dash", "color": "#888"}, "xaxis": "x2", "yaxis": "y2", "showlegend": False},
    ]
    return _figure(data, "left: speedup against workers, ideal line dashed; right: efficiency = speedup / workers",
                   two=True, xaxis={"title": {"text": "workers"}}, yaxis={"title": {"text": "speedup (x)"}},
                   yaxis2={"title": {"text": "scaling efficiency"}, "tickformat": ".0%"})


def command_speedup_figure(a: Analysis, names: dict[str, str]) -> Any:
    """Runs without steps have one speed figure: the whole command's (baseline wall time / this one's)."""
    runs = a.runs[a.runs["command_speedup"].notna()] if not a.runs.empty else a.runs
    if runs.empty:
        return _note(f"No speedup: no baseline ({a.baseline_note}).")
    top = int(max(runs["workers"].max(), 2))
    data = [
        {"type": "scatter", "x": [1, top], "y": [1, top], "mode": "lines", "name": "ideal (speedup = workers)",
         "line": {"dash": "dash", "color": "#888"}},
        {"type": "scatter", "x": _list(runs["workers"]), "y": _list(runs["command_speedup"]), "mode": "markers+text",
         "text": [names[r] for r in runs["run_id"]], "textposition": "top center",
         "name": "command speedup (whole command)", "marker": {"size": 10}},
    ]
    return _figure(data, "no steps recorded: speedup of the whole command's wall time (workers' start to the last "
                   "exit), ideal line dashed", xaxis={"title": {"text": "workers"}},
                   yaxis={"title": {"text": "command speedup (x)"}})


def _since(a: Analysis, run_id: str) -> str:
    row = a.runs[a.runs["run_id"] == run_id]
    stepless = not row.empty and isinstance(row["steps_note"].iloc[0], str)
    return "seconds since the first CPU sample (no steps)" if stepless else "seconds since the first step"


def cpu_figure(a: Analysis, run_id: str) -> Any:
    tl = a.cpu_timeline[a.cpu_timeline["run_id"] == run_id] if not a.cpu_timeline.empty else a.cpu_timeline
    if tl.empty:
        return _note("No CPU samples in the training window (or, for a run without steps, at all).")
    data = [{"type": "scattergl", "x": _list(df["t_s"]), "y": _list(df["cpu_percent"]), "mode": "lines",
             "name": str(process)} for process, df in tl.groupby("process", sort=False)]
    ep = a.epochs[a.epochs["run_id"] == run_id] if not a.epochs.empty else a.epochs
    ends = list(zip(ep["epoch"], ep["end_s"])) if "end_s" in ep.columns else []
    shapes = [{"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
               "line": {"dash": "dot", "color": "#888", "width": 1}} for _, x in ends]
    marks = [{"x": x, "y": 1, "xref": "x", "yref": "paper", "text": f"end of epoch {e}", "showarrow": False,
              "yanchor": "bottom", "font": {"size": 10}} for e, x in ends]
    return _figure(data, shapes=shapes, annotations=marks, xaxis={"title": {"text": _since(a, run_id)}},
                   yaxis={"title": {"text": "CPU % (100 = one core)"}})


def _worker_label(names: dict[str, str], run_id: str, worker: Any) -> str:
    return f"{names[run_id]} w{int(worker)}"


def step_figure(a: Analysis, names: dict[str, str]) -> Any:
    stepped = a.workers[a.workers["steps"].notna()] if "steps" in a.workers.columns else a.workers.iloc[0:0]
    if stepped.empty:
        return _note("No steps recorded.")
    data = [{"type": "box", "name": names[run_id], "x": [_worker_label(names, run_id, i) for i in w["worker"]],
             "q1": _list(w["step_q1_s"]), "median": _list(w["step_median_s"]), "q3": _list(w["step_q3_s"]),
             "lowerfence": _list(w["step_lo_s"]), "upperfence": _list(w["step_hi_s"]), "mean": _list(w["step_mean_s"])}
            for run_id, w in stepped.groupby("run_id", sort=False)]
    return _figure(data, "every step recorded; boxes: quartiles, whiskers: 1.5 IQR, dashed: mean",
                   yaxis={"title": {"text": "step time (s)"}})


def split_figure(a: Analysis, names: dict[str, str]) -> Any:
    w = a.workers[a.workers["compute_s"].notna()] if "compute_s" in a.workers.columns else a.workers.iloc[0:0]
    if w.empty:
        return _note("No split: no trace window, and no run with several workers to estimate it from.")
    labels = [_worker_label(names, r, i) + (" (est.)" if s == "estimate" else "")
              for r, i, s in zip(w["run_id"], w["worker"], w["split_source"])]
    data = [{"type": "bar", "x": labels, "y": _list(w[col]), "name": name}
            for col, name in (("compute_s", "compute"), ("transfer_s", "transfer"), ("wait_s", "wait"),
                              ("input_s", "input")) if w[col].notna().any()]
    notes = a.runs.loc[a.runs["split_source"] == "estimate", "split_note"].drop_duplicates()
    note = (f"(est.): {'; '.join(notes)}; input folded into transfer" if (w["split_source"] == "estimate").any()
            else "from traces")
    return _figure(data, note + _overlap_note(w, names), barmode="stack",
                   yaxis={"title": {"text": "seconds per step (mean)"}})


def _overlap_note(w: pd.DataFrame, names: dict[str, str], listed: int = 6) -> str:
    """The traced workers' overlap share (collective time hidden under compute, a ratio of sums over the
    compared steps): the bars show only the exposed part. A range past ``listed`` workers keeps one line."""
    known = w[w["overlap_share"].notna()] if "overlap_share" in w.columns else w.iloc[0:0]
    if known.empty:
        return ""
    shares = known["overlap_share"].astype(float)
    each = (f"{shares.min():.0%}–{shares.max():.0%} per worker" if len(known) > listed else
            ", ".join(f"{_worker_label(names, r, i)} {v:.0%}" for r, i, v in zip(known["run_id"], known["worker"],
                                                                                shares)))
    return f"; transfer and wait are exposed; collective time hidden under compute: {each}"


def convergence_figure(a: Analysis, names: dict[str, str]) -> Any:
    if a.epochs.empty:
        return _note("No epochs recorded.")
    data = []
    for i, (run_id, ep) in enumerate(a.epochs.groupby("run_id", sort=False)):
        for axis, metric in (("", "val_accuracy"), ("2", "val_auc")):
            data.append({"type": "scatter", "x": _list(ep["epoch"]), "y": _list(ep[metric]), "mode": "lines+markers",
                         "name": names[run_id], "legendgroup": run_id, "showlegend": axis == "",
                         "line": {"color": PALETTE[i % len(PALETTE)]}, "xaxis": f"x{axis}", "yaxis": f"y{axis}"})
    return _figure(data, "left: validation accuracy; right: validation AUC (after each epoch)", two=True,
                   xaxis={"title": {"text": "epoch"}, "dtick": 1}, xaxis2={"title": {"text": "epoch"}, "dtick": 1},
                   yaxis={"title": {"text": "validation accuracy"}}, yaxis2={"title": {"text": "validation AUC"}})


def memory_figure(a: Analysis, names: dict[str, str]) -> Any:
    w = a.workers[a.workers["rss_peak_bytes"].notna()] if "rss_peak_bytes" in a.workers.columns else a.workers
    if w.empty:
        return _note("No memory samples.")
    data = [{"type": "bar", "x": [_worker_label(names, run_id, i) for i in df["worker"]],
             "y": _list(df["rss_peak_bytes"] / MIB), "name": names[run_id]}
            for run_id, df in w.groupby("run_id", sort=False)]
    return _figure(data, "peak resident memory of each worker's processes (memory per replica)",
                   yaxis={"title": {"text": "peak RSS (MiB)"}})


PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def _verdict_html(a: Analysis) -> str:
    items = "".join(f"<li>{html.escape(line)}</li>" for line in a.verdict)
    base = f"Baseline: {a.baseline_id} ({a.baseline_note})" if a.baseline_id else f"No baseline: {a.baseline_note}"
    assumed = "".join(f"<li>{html.escape(line)}</li>" for line in a.assumptions)
    assumed = f"<h3>What-if assumptions</h3><ul class='note'>{assumed}</ul>" if assumed else ""
    return f"<h2>Verdict</h2><ul class='verdict'>{items}</ul>" + _note(base) + assumed


_RUN_COLS = {"run_id": "run id", "mode": "mode", "workers": "workers", "steady_epoch_s": "steady epoch s",
             "steady_samples_per_s": "samples/s", "speedup": "speedup", "efficiency": "efficiency",
             "fit_s": "fit s", "startup_s": "command to first step s", "command_wall_s": "command s",
             "command_speedup": "command speedup", "cpu_s_per_1k_samples": "CPU-s / 1k samples",
             "val_accuracy": "val acc", "val_auc": "val AUC", "split_source": "split"}
_MODE_COLS = {"mode": "mode", "strategy": "strategy", "run_id": "run id", "workers": "workers", "ps": "ps",
              "steady_epoch_s": "steady epoch s", "speedup": "speedup", "efficiency": "efficiency",
              "step_shares": "steps per worker", "val_accuracy": "val acc", "val_accuracy_gap": "vs baseline",
              "epoch_ratio_vs_multi": "epoch: multi / this", "val_accuracy_vs_multi": "val acc vs multi"}
_ADVICE_COLS = {"rank": "#", "cause": "cause", "cost_share": "of epoch", "knob": "perfkit option", "api": "TensorFlow",
                "predicted_speedup": "predicted", "predicted_lo": "low", "predicted_hi": "high", "basis": "basis",
                "tried": "tried"}
# Shares of the page's width (they add up to 100): the words and the code get the room.
_ADVICE_WIDTHS = {"rank": 3, "cause": 20, "cost_share": 6, "knob": 14, "api": 22, "predicted_speedup": 8,
                  "predicted_lo": 5, "predicted_hi": 5, "basis": 9, "tried": 8}
_ADVICE_TEXT = ("cause", "knob", "api", "basis", "tried")
_PROC_COLS = {"run_id": "run id", "worker": "worker", "role": "role", "host": "host", "pid": "pid",
              "cpu_mean": "CPU mean %", "cpu_p95": "CPU p95 %", "budget_share_mean": "of host budget",
              "cpu_s": "CPU-s", "rss_peak_mib": "peak RSS MiB"}
_SPECS = {"cost_share": ".0%", "predicted_speedup": ".2f", "predicted_lo": ".2f", "predicted_hi": ".2f",
          "cpu_mean": ".0f", "cpu_p95": ".0f", "budget_share_mean": ".0%", "cpu_s": ",.1f", "rss_peak_mib": ",.0f",
          "steady_epoch_s": ".1f", "steady_samples_per_s": ",.0f", "speedup": ".2f", "efficiency": ".0%",
          "fit_s": ".1f", "startup_s": ".1f", "command_wall_s": ".3g", "command_speedup": ".2f",
          "cpu_s_per_1k_samples": ".3g", "val_accuracy": ".4f", "val_auc": ".4f",
          "val_accuracy_gap": "+.4f", "epoch_ratio_vs_multi": ".2f", "val_accuracy_vs_multi": "+.4f"}


def _runs_html(a: Analysis) -> str:
    if a.runs.empty:
        return _note("No run could be analysed.")
    return _table_html(a.runs, list(_RUN_COLS), _RUN_COLS)


def _advice_html(adv: pd.DataFrame) -> str:
    """The advice table, within the page's width: fixed column shares, the TensorFlow line as code that
    wraps, what each prediction assumes folded away until asked for."""
    cols = list(_ADVICE_COLS)
    widths = "".join(f"<col style='width:{_ADVICE_WIDTHS[c]}%'>" for c in cols)
    head = "".join(f"<th class='text'>{html.escape(_ADVICE_COLS[c])}</th>" if c in _ADVICE_TEXT else
                   f"<th>{html.escape(_ADVICE_COLS[c])}</th>" for c in cols)
    rows = []
    for row in adv[cols].to_dict("records"):
        cells = []
        for c in cols:
            text = html.escape(fmt(row[c], _SPECS.get(c, "")))
            if c == "api":
                text = f"<code>{text}</code>"
            elif c == "basis":
                text = f"<details><summary>what it assumes</summary>{text}</details>"
            cells.append(f"<td class='text'>{text}</td>" if c in _ADVICE_TEXT else f"<td>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class='fit'><colgroup>{widths}</colgroup><tr>{head}</tr>{''.join(rows)}</table>"


def _table_html(df: pd.DataFrame, cols: list[str], headers: dict[str, str] | None = None) -> str:
    headers = headers or {c: c for c in cols}
    head = "".join(f"<th>{html.escape(headers[c])}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(row[c], _SPECS.get(c, '')))}</td>" for c in cols) + "</tr>"
                   for row in df[cols].to_dict("records"))
    return f"<table><tr>{head}</tr>{body}</table>"
