"""`perfkit diff`'s renderers (analysis/diff.py computes it): the terminal's tables, JSON, and an HTML page
with the same tables and B's speedup waterfall against A."""

from __future__ import annotations

import html
import json
import math
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.table import Table

from perfkit.analysis.renderers.console import _table, fmt

if TYPE_CHECKING:
    from perfkit.analysis.diff import Diff

_PCT = {"change", "band", "slowdown", "slowdown_lo", "slowdown_hi"}


def headline(d: Diff) -> str:
    """The answer: B against A, with its band and how the band was found."""
    if not math.isfinite(d.slowdown):
        return "B against A: no steady steps with samples on one side, so no speed to compare."
    word = "slower" if d.slowdown > 0 else "faster"
    band = (f" (95% band {d.slowdown_lo:+.1%} to {d.slowdown_hi:+.1%}: {d.band_note})"
            if math.isfinite(d.slowdown_lo) else "")
    within = (" — within noise" if math.isfinite(d.slowdown_lo) and d.slowdown_lo <= 0 <= d.slowdown_hi else "")
    return f"B is {abs(d.slowdown):.1%} {word} than A per sample{band}{within}."


def render_console(d: Diff, out: TextIO, width: int | None = None) -> None:
    console = Console(file=out, width=width)
    console.print(f"[bold]perfkit diff[/bold]  A: {', '.join(d.a)}  B: {', '.join(d.b)}", highlight=False)
    console.print(headline(d), highlight=False)
    for note in d.notes:
        console.print(f"- {note}", highlight=False, style="dim")
    console.print(_figures_table(d))
    if not d.ops.empty:
        console.print(_ops_table(d))
    from perfkit.analysis.renderers.console import goodput_table, waterfall_table

    for run_id in d.b:
        if not d.analysis.waterfall.empty and (d.analysis.waterfall["run_id"] == run_id).any():
            console.print(waterfall_table(d.analysis, run_id))
    if not d.analysis.goodput.empty:
        console.print(goodput_table(d.analysis))


def _figures_table(d: Diff) -> Table:
    t = _table("figures: A against B (means over each side's runs)", ["figure", "A", "B", "change", "band", "call"],
               left=("figure", "call"))
    for r in d.figures.itertuples(index=False):
        spec = ".1%" if r.figure in ("straggler_cost", "goodput") else ".4g"
        band = "±" + fmt(r.band, ".1%") if r.band == r.band else "n/a"  # NaN: no band
        t.add_row(r.words, fmt(r.a, spec), fmt(r.b, spec), fmt(r.change, "+.1%"), band, r.call)
    t.caption = "band: the noise a change must exceed (the runs' spread, or the slowdown's per-step band)"
    return t


def _ops_table(d: Diff) -> Table:
    t = _table("traced ops that moved most (ms of self time per 1,000 of the worker's samples)",
               ["worker", "op", "A", "B", "change", "call"], left=("worker", "op", "call"))
    for r in d.ops.itertuples(index=False):
        who = f"{r.worker} (A: {r.a_worker})" if r.worker != r.a_worker else str(r.worker)
        t.add_row(who, str(r.op), fmt(r.a_ms_per_1k, ".2f"), fmt(r.b_ms_per_1k, ".2f"), fmt(r.change_ms_per_1k, "+.2f"),
                  r.call)
    return t


def to_dict(d: Diff) -> dict[str, Any]:
    from perfkit.analysis.diff import summary_row
    from perfkit.analysis.renderers.json import _rows

    def records(df: Any) -> list[dict[str, Any]]:
        return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
                for row in df.to_dict("records")]

    return {"format": "perfkit-diff", "version": 1, **{k: (None if isinstance(v, float) and not math.isfinite(v)
                                                          else v) for k, v in summary_row(d).items()},
            "headline": headline(d), "figures": records(d.figures), "ops": records(d.ops),
            "waterfall": _rows(d.analysis.waterfall, "waterfall"), "goodput": _rows(d.analysis.goodput, "goodput")}


def render_json(d: Diff, out: TextIO) -> None:
    json.dump(to_dict(d), out, indent=2, default=str)
    out.write("\n")


def page(d: Diff) -> str:
    from plotly.offline import get_plotlyjs

    from perfkit.analysis.renderers.account_html import waterfall_figure
    from perfkit.analysis.renderers.html import _CSS, _div

    def table(rows: list[dict[str, Any]], cols: list[str]) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c), c))}</td>" for c in cols) + "</tr>"
                       for r in rows)
        return f"<table><tr>{head}</tr>{body}</table>"

    doc = to_dict(d)
    parts = [f"<h1>perfkit diff</h1><p>A: {html.escape(', '.join(d.a))}<br>B: {html.escape(', '.join(d.b))}</p>",
             f"<p><b>{html.escape(headline(d))}</b></p>",
             "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in d.notes) + "</ul>",
             "<h2>Figures</h2>" + table(doc["figures"], ["words", "a", "b", "change", "band", "call"])]
    if doc["ops"]:
        parts.append("<h2>Traced ops that moved most (ms per 1,000 of the worker's samples)</h2>"
                     + table(doc["ops"], ["worker", "a_worker", "op", "a_ms_per_1k", "b_ms_per_1k",
                                          "change_ms_per_1k", "call"]))
    for run_id in d.b:
        if not d.analysis.waterfall.empty and (d.analysis.waterfall["run_id"] == run_id).any():
            parts.append(f"<h2>Where the speedup went: {html.escape(run_id)}</h2>"
                         + _div(waterfall_figure(d.analysis, run_id)))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>perfkit diff</title>"
            f"<style>{_CSS}</style><script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
            + "\n".join(parts) + "</body></html>\n")


def _cell(value: Any, col: str) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:+.1%}" if col in _PCT else f"{value:.4g}"
    return str(value)
