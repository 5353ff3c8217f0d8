"""Terminal renderer of an Analysis: the verdict, then rich tables (runs, workers, hosts, convergence...).

A figure that was not measured prints as ``n/a``; estimated splits say so in the table caption.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TextIO

import pandas as pd
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from perfkit.analysis.advice import CauseKind
from perfkit.analysis.advice.words import view
from perfkit.analysis.renderers import RenderOptions

if TYPE_CHECKING:
    from perfkit.analysis.result import Analysis
from perfkit.analysis.startup import phase_summary

MIB = 2**20


def fmt(value: Any, spec: str = ".1f", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "n/a"
    try:
        return f"{value:{spec}}{unit}"
    except (TypeError, ValueError):
        return str(value)


def _true(value: Any) -> bool:
    return value is not None and not pd.isna(value) and bool(value)


_LEFT = ("run id", "host", "worker", "mode", "op", "reason", "process")


def _table(title: str, columns: list[str], left: tuple[str, ...] = _LEFT) -> Table:
    table = Table(title=title, title_justify="left")
    for col in columns:
        # Run ids are what users copy into other commands: never wrapped; other headers wrap between words,
        # and a cell's word longer than its column (a flag, a TensorFlow call) folds onto the next line
        # rather than being cut to an ellipsis.
        table.add_column(col, justify="left" if col in left else "right", no_wrap=col == "run id",
                         overflow="fold", min_width=max(len(word) for word in col.split()))
    return table


def runs_table(a: Analysis) -> Table:
    t = _table("runs: speed", ["run id", "mode", "workers", "steady epoch s", "samples/s", "fit s", "speedup",
                               "efficiency"])
    for r in a.runs.itertuples(index=False):
        warm = "*" if r.steady_is_warmup else ""
        t.add_row(r.run_id, r.mode, str(r.workers), fmt(r.steady_epoch_s, ".1f") + warm,
                  fmt(r.steady_samples_per_s, ",.0f"), fmt(r.fit_s, ".1f"), fmt(r.speedup, ".2f", "x"),
                  fmt(r.efficiency, ".0%"))
    notes = [f"baseline: {a.baseline_id}" if a.baseline_id else f"no baseline: {a.baseline_note}"]
    if a.runs["steady_is_warmup"].any():
        notes.append("* one epoch only: includes the warm-up")
    t.caption = "; ".join(notes)
    return t


def _stepless(a: Analysis) -> pd.DataFrame:
    return a.runs[a.runs["steps_note"].map(lambda v: isinstance(v, str) and bool(v))]


def command_table(a: Analysis) -> Table:
    t = _table("runs: the whole command", ["run id", "mode", "workers", "wall s", "speedup", "CPU-s",
                                           "peak RSS MiB"])
    for r in a.runs.itertuples(index=False):
        t.add_row(r.run_id, r.mode, str(r.workers), fmt(r.command_wall_s, ".3g"), fmt(r.command_speedup, ".2f", "x"),
                  fmt(r.command_cpu_s, ",.1f"), fmt(r.rss_peak_max_bytes / MIB, ",.0f"))
    notes = [("wall: the workers' start to the last one's exit (run.json's started to ended); CPU-s: its worker "
              "processes, every sample")]
    stepless = _stepless(a)
    if not stepless.empty:
        notes.append(f"no steps in {', '.join(stepless['run_id'])}: {stepless['steps_note'].iloc[0]}")
    t.caption = "; ".join(notes)
    return t


def cost_table(a: Analysis) -> Table:
    t = _table("runs: cost and quality", ["run id", "CPU-s / 1k samples", "vs baseline", "peak RSS MiB",
                                          "val acc", "val AUC", "acc gap"])
    for r in a.runs.itertuples(index=False):
        t.add_row(r.run_id, fmt(r.cpu_s_per_1k_samples, ".3g"), fmt(r.cpu_cost_vs_baseline, ".2f", "x"),
                  fmt(r.rss_peak_max_bytes / MIB, ",.0f"), fmt(r.val_accuracy, ".4f"), fmt(r.val_auc, ".4f"),
                  fmt(r.val_accuracy_gap, "+.4f"))
    return t


def workers_table(a: Analysis, run_id: str) -> Table:
    t = _table(f"workers of {run_id}", ["worker", "host", "steps", "median step s", "p95 step s", "CPU mean",
                                        "CPU p95", "CPU-s / step", "peak RSS MiB", "exit"])
    for r in a.workers[a.workers["run_id"] == run_id].itertuples(index=False):
        t.add_row(str(r.worker), str(r.host), fmt(r.steps, ".0f"), fmt(r.step_median_s, ".3f"),
                  fmt(r.step_p95_s, ".3f"), fmt(r.cpu_mean, ".0f", "%"), fmt(r.cpu_p95, ".0f", "%"),
                  fmt(r.cpu_s_per_step, ".3f"), fmt(r.rss_peak_bytes / MIB, ",.0f"), fmt(r.exit_code, ".0f"))
    return t


def command_workers_table(a: Analysis, run_id: str) -> Table:
    """The workers of a run without steps: CPU and memory over the command's whole life, exit status."""
    t = _table(f"workers of {run_id} (whole command, no steps)", ["worker", "host", "CPU mean", "CPU p95", "CPU-s",
                                                                  "peak RSS MiB", "threads", "exit"])
    for r in a.workers[a.workers["run_id"] == run_id].itertuples(index=False):
        t.add_row(str(r.worker), str(r.host), fmt(r.cpu_mean, ".0f", "%"), fmt(r.cpu_p95, ".0f", "%"),
                  fmt(r.cpu_s, ",.1f"), fmt(r.rss_peak_bytes / MIB, ",.0f"), fmt(r.threads_max, ".0f"),
                  fmt(r.exit_code, ".0f"))
    return t


def split_table(a: Analysis, run_id: str, note: str) -> Table:
    t = _table(f"where step time goes: {run_id}", ["worker", "host", "compute s", "transfer s", "wait s",
                                                   "input s", "overlap", "wait share", "straggler", "speed",
                                                   "flag"])
    rows = a.workers[a.workers["run_id"] == run_id]
    for r in rows.itertuples(index=False):
        t.add_row(str(r.worker), str(r.host), fmt(r.compute_s, ".3f"), fmt(r.transfer_s, ".3f"),
                  fmt(r.wait_s, ".3f"), fmt(r.input_s, ".3f"), fmt(getattr(r, "overlap_share", None), ".0%"),
                  fmt(r.wait_share, ".0%"), fmt(r.straggler_share, ".0%"), fmt(r.speed_score, ".2f"),
                  "[red]straggler[/red]" if _true(r.flagged) else "")
    overlap = ("overlap: share of the collective time hidden under compute (sum over the compared steps; "
               "transfer and wait are the exposed rest); " if "overlap_share" in rows
               and rows["overlap_share"].notna().any() else "")
    t.caption = (f"seconds per step (mean), {note}; {overlap}straggler: share of steps with the largest compute; "
                 f"speed score < 0.75 is flagged")
    return t


def processes_table(a: Analysis) -> Table:
    t = _table("CPU per process over the training window (a run without steps: its whole life; 100% = one core)",
               ["run id", "process", "pid", "CPU mean", "CPU p95", "of host budget", "CPU-s", "peak RSS MiB"])
    # A parameter server or chief is named by its role and its task index (the index run.json uses).
    labels = [f"{r.role} ({r.host})" if r.worker < 0 else f"{r.role} {r.worker} ({r.host})"
              if r.role in ("worker", "trainer") else f"{r.role} (task {r.worker}, {r.host})"
              for r in a.processes.itertuples(index=False)]
    t.columns[1].no_wrap, t.columns[1].min_width = True, max(map(len, labels), default=7)
    for label, r in zip(labels, a.processes.itertuples(index=False)):
        t.add_row(r.run_id, label, str(r.pid), fmt(r.cpu_mean, ".0f", "%"), fmt(r.cpu_p95, ".0f", "%"),
                  fmt(r.budget_share_mean, ".0%"), fmt(r.cpu_s, ",.1f"), fmt(r.rss_peak_bytes / MIB, ",.0f"))
    return t


def hosts_table(a: Analysis) -> Table:
    t = _table("CPU per host (workers' CPU% summed; 100% = one core)",
               ["run id", "host", "workers", "budget cores", "CPU mean", "CPU p95", "of budget (mean)",
                "of budget (p95)"])
    for r in a.hosts.itertuples(index=False):
        t.add_row(r.run_id, str(r.host), str(r.workers), fmt(r.budget_cores, "g"), fmt(r.cpu_mean, ".0f", "%"),
                  fmt(r.cpu_p95, ".0f", "%"), fmt(r.budget_share_mean, ".0%"), fmt(r.budget_share_p95, ".0%"))
    return t


def placement_table(a: Analysis) -> Table:
    t = _table("placement what-if (workers per host by measured speed)",
               ["run id", "host", "capacity share", "workers now", "proportional", "proposed"])
    for r in a.placement.itertuples(index=False):
        t.add_row(r.run_id, str(r.host), fmt(r.capacity_share, ".0%"), str(r.workers_now),
                  fmt(r.workers_proportional, ".1f"), str(r.workers_proposed))
    return t


def convergence_table(a: Analysis) -> Table:
    t = _table("convergence (validation after each epoch)",
               ["run id", "epoch", "epoch s", "samples/s", "val loss", "val acc", "val AUC"])
    for r in a.epochs.itertuples(index=False):
        t.add_row(r.run_id, str(r.epoch), fmt(r.epoch_s, ".1f"), fmt(r.samples_per_s, ",.0f"),
                  fmt(r.val_loss, ".4f"), fmt(r.val_accuracy, ".4f"), fmt(r.val_auc, ".4f"))
    return t


def ops_table(a: Analysis) -> Table:
    t = _table("top traced ops (self time, all workers)", ["run id", "op", "count", "total s"])
    for r in a.ops.itertuples(index=False):
        t.add_row(r.run_id, str(r.name), fmt(r.count, ",.0f"), fmt(r.total_s, ".3f"))
    return t


def startup_table(a: Analysis) -> Table:
    t = _table("start-up: where a worker's went, up to its first step (the median worker)",
               ["run id", "to first step s", "phases: s (CPU s)"], left=(*_LEFT, "phases: s (CPU s)"))
    for run_id, phases in a.startup.groupby("run_id", sort=False):
        words = [f"{r.phase} {r.wall_s:.1f}" + (f" ({r.cpu_s:.1f})" if not pd.isna(r.cpu_s) else "")
                 for r in phase_summary([phases]).itertuples()]
        row = a.runs[a.runs["run_id"] == run_id]
        t.add_row(str(run_id), fmt(row["startup_s"].iloc[0] if not row.empty else None, ".1f"), ", ".join(words))
    return t


def excluded_table(a: Analysis) -> Table:
    t = _table("left out", ["run id", "reason"])
    for r in a.excluded.itertuples(index=False):
        t.add_row(r.run_id, r.reason)
    return t


def render(a: Analysis, out: TextIO, options: RenderOptions = RenderOptions()) -> None:
    """Verdict, then the tables (``options.verdict_last``: the tables first, so a long study ends with the
    answer); colour where ``out`` is a terminal."""
    console = Console(file=out, width=options.width)
    if options.verdict_only:
        _verdict(a, console)
        return
    print_to(a, console, options.verdict_last)


def print_to(a: Analysis, console: Console, verdict_last: bool = False) -> None:
    if not verdict_last:
        _verdict(a, console)
    _tables(a, console)
    if verdict_last:
        console.print()
        _verdict(a, console)


def _verdict(a: Analysis, console: Console) -> None:
    console.print("[bold]Verdict[/bold]")
    for i, line in enumerate(a.verdict):
        console.print(f"- {line}", highlight=False, style="bold" if i == 0 and len(a.verdict) > 1 else None)
    if a.assumptions:
        console.print("[bold]What-if assumptions[/bold]")
        for line in a.assumptions:
            console.print(f"- {line}", highlight=False, style="dim")
    console.print()


_FOLD_AT = len("--steps-per-execution")


class _Folding(Text):
    """A cell whose words longer than ``_FOLD_AT`` (a TensorFlow call with no space in it) fold at the column's
    edge rather than widen the table past the terminal, where it would be cut off."""

    def __init__(self, text: str) -> None:
        super().__init__(text, overflow="fold")

    def __rich_measure__(self, console: Console, options: Any) -> Measurement:
        measured = super().__rich_measure__(console, options)
        return Measurement(min(measured.minimum, _FOLD_AT), measured.maximum)


def advice_table(a: Analysis, run_id: str) -> Table:
    """The causes of lost speed, ranked by their share of a steady epoch, with the knob and its prediction."""
    t = _table(f"advice: {run_id}", ["#", "cause", "cost / step", "of epoch", "try", "predicted", "tried"],
               left=_LEFT + ("cause", "try", "tried"))
    for r in view(a.advice[a.advice["run_id"] == run_id]).itertuples(index=False):
        per_epoch = CauseKind(r.kind).per_epoch
        cost = fmt(r.cost_s, ".2f", " s/epoch") if per_epoch else fmt(r.cost_s * 1e3, ".1f", " ms")
        span = (f" ({fmt(r.predicted_lo, '.2f')}–{fmt(r.predicted_hi, '.2f')})"
                if r.predicted_hi != r.predicted_lo else "")
        t.add_row(str(r.rank), r.cause, cost, fmt(r.cost_share, ".0%"), _Folding(r.knob if _true(r.knob) else r.api),
                  fmt(r.predicted_speedup, ".2f", "x") + span, r.tried)
    t.caption = "predicted: steady epoch speedup of that change alone, its range in brackets (JSON: basis)"
    return t


def waterfall_table(a: Analysis, run_id: str, level: str = "steady") -> Table:
    """The speedup waterfall (analysis/waterfall.py): from the ideal to the measured speedup, term by term, of
    a steady epoch (``level`` steady) or of the whole command (command: the goodput ledger's buckets)."""
    w = a.waterfall[(a.waterfall["run_id"] == run_id) & (a.waterfall["level"] == level)]
    row = a.runs[a.runs["run_id"] == run_id].iloc[0]
    whole = level == "command"
    t = _table(f"where the speedup went{' over the whole command' if whole else ''}: {run_id}",
               ["term", "run", "ideal", "lost", "of lost", "speedup"], left=(*_LEFT, "term"))
    t.add_row("ideal: the compute given over the baseline's", "", "", "", "", fmt(row["ideal_speedup"], ".2f", "x"))
    for r in w.itertuples(index=False):
        t.add_row(r.words, fmt(r.run_s, ".3f"), fmt(r.ideal_s, ".3f"), fmt(r.lost_s, "+.3f"), fmt(r.share, ".0%"),
                  fmt(r.speedup_after, ".2f", "x") + f" ({-r.speedup_lost:+.2f})")
    t.caption = (f"seconds per 1,000 samples {'the command trained' if whole else 'of a steady epoch'}: the run's, "
                 "the baseline's over the ideal, and the difference; speedup: what is left after each term (its "
                 "part of ideal - measured)" + "".join(
                     f"; {r.words}: checked by {r.checked_by}, {r.predicted_speedup:.2f}x predicted, "
                     f"{r.measured_speedup:.2f}x measured" for r in w.itertuples(index=False)
                     if isinstance(r.checked_by, str)))
    return t


def goodput_table(a: Analysis) -> Table:
    """The goodput ledger (analysis/goodput.py): each run's median worker's span cut into buckets, a column a
    run (the buckets as rows keep it narrow)."""
    from perfkit.analysis.goodput import Bucket, median_worker

    runs = list(a.goodput.groupby("run_id", sort=False))
    t = _table("goodput: where the whole command's time went (the median worker, seconds)",
               ["bucket", *(str(run_id) for run_id, _ in runs)], left=("bucket",))
    mids = [median_worker(g) for _, g in runs]
    goodput = []
    for _, g in runs:
        lo, hi = f"{g['goodput'].min():.0%}", f"{g['goodput'].max():.0%}"
        total = fmt(g["productive_s"].sum() / g["span_s"].sum(), ".0%")
        goodput.append(total + (f" ({lo}–{hi})" if lo != hi else ""))
    t.add_row("goodput", *goodput)
    t.add_row("span", *(fmt(m["span_s"], ".1f") for m in mids))
    for b in Bucket:
        t.add_row(b.words, *(fmt(m[b.column], ".1f") for m in mids))
    t.caption = ("goodput: training steps over the command's span, every worker (range over workers); n/a: not "
                 "measured (checkpoint saves of a run recorded before perfkit timed them)")
    return t


def tried_table(t: pd.DataFrame, default_run: str) -> Table:
    """``perfkit tune``'s table (analysis/tuning.py): each change, predicted against measured."""
    table = _table("advice tried", ["change", "runs", "predicted", "measured", "error", "vs single", "outcome"],
                   left=_LEFT + ("change", "outcome"))
    for r in t.itertuples(index=False):
        pred = (fmt(r.predicted_speedup, ".2f", "x") + (f" ({fmt(r.predicted_lo, '.2f')}–{fmt(r.predicted_hi, '.2f')})"
                if r.predicted_hi != r.predicted_lo and not pd.isna(r.predicted_lo) else ""))
        meas = fmt(r.measured_speedup, ".2f", "x") + (f" ({fmt(r.measured_lo, '.2f')}–{fmt(r.measured_hi, '.2f')})"
                                                      if r.runs > 1 else "")
        table.add_row(r.change, str(r.runs), pred, meas, fmt(r.error, "+.0%"), fmt(r.vs_baseline, ".2f", "x"),
                      r.outcome)
    table.caption = (f"speedup of the steady epoch over the default configuration ({default_run}), mean over the "
                     "runs (range); error: predicted / measured - 1; vs single: against the single-machine baseline")
    return table


def _tables(a: Analysis, console: Console) -> None:
    if not a.runs.empty:
        if len(_stepless(a)) < len(a.runs):  # some run has steps
            console.print(runs_table(a))
            console.print(cost_table(a))
        console.print(command_table(a))
        stepless = set(_stepless(a)["run_id"])
        for r in a.runs.itertuples(index=False):
            if not a.workers.empty and r.run_id in stepless:
                console.print(command_workers_table(a, r.run_id))
            elif not a.workers.empty and r.workers > 1:
                console.print(workers_table(a, r.run_id))
            if isinstance(r.split_source, str) and r.split_source:
                console.print(split_table(a, r.run_id, r.split_note))
            mine = a.waterfall[a.waterfall["run_id"] == r.run_id] if not a.waterfall.empty else a.waterfall
            for level in ("steady", "command"):
                if not mine.empty and (mine["level"] == level).any():
                    console.print(waterfall_table(a, r.run_id, level))
            if not a.advice.empty and (a.advice["run_id"] == r.run_id).any():
                console.print(advice_table(a, r.run_id))
        for frame, table in ((a.processes, processes_table), (a.hosts, hosts_table),
                             (a.placement, placement_table), (a.epochs, convergence_table), (a.ops, ops_table),
                             (a.startup, startup_table), (a.goodput, goodput_table)):
            if not frame.empty:
                console.print(table(a))
    if not a.excluded.empty:
        console.print(excluded_table(a))
    for w in a.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
