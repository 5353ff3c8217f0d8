"""What the commands share, defined once: the typer app, the options that several commands take (same flag,
same help, same default), the live progress display, the end-of-run summary, and the analysis outputs. No
command module imports another; everything here is presentation, and every check of what a flag means
lives in the library (``perfkit.trainer.options``, ``perfkit.config``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from perfkit.cli._progress import ProgressObserver, WarningsOnly

if TYPE_CHECKING:
    from perfkit.analysis.load import LoadedRun
    from perfkit.analysis.result import Analysis
    from perfkit.analysis.summary import RunSummary
    from perfkit.config import RunConfig
    from perfkit.results import RunMeta
    from perfkit.trainer.multi import MultiOptions

app = typer.Typer(
    name="perfkit",
    help="How much faster is a multi-worker TensorFlow run than the single-machine baseline, and why not more.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command's; after `--` they are the user's
)


def _version(value: bool) -> None:
    if not value:
        return
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    typer.echo(f"perfkit {installed('perfkit')} (TensorFlow {installed('tensorflow')}, "
               f"Python {platform.python_version()})")
    raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print perfkit's version, TensorFlow's and Python's, and exit.")]
          = False) -> None:
    pass

ResultsDir = Annotated[Path, typer.Option(help="Where run directories are created.")]
RunId = Annotated[Optional[str], typer.Option(help="Run id (default: <UTC time>-<mode>[-<label>], or the "
                                              "scheduler's job id).")]
Label = Annotated[Optional[str], typer.Option(help="Appended to the generated run id.")]
SampleInterval = Annotated[float, typer.Option(help="Seconds between CPU samples.")]
Workers = Annotated[Optional[int], typer.Option(help="multi, ps: N workers on this machine (127.0.0.1).")]
ClusterFile = Annotated[Optional[Path], typer.Option("--cluster", help="multi, ps: cluster file (TOML: hosts with "
                                                     "name, address, cores, workers, base_port; ps: ps, chief).")]
Emulate = Annotated[bool, typer.Option("--emulate", help="multi: emulate --cluster's hosts on this machine with "
                                       "their CPU budgets (automatic when every address is local).")]
HangTimeout = Annotated[str, typer.Option(help="multi, launch: call the cluster hung when no worker ends a step for "
                                         "this many seconds and name the stuck worker; 'auto': 10x the longest "
                                         "pause between steps seen, at least 30 s (before the first step, the "
                                         "connect timeout). Not after a worker's last step: its exit has 300 s of "
                                         "its own.")]
Pin = Annotated[bool, typer.Option("--pin/--no-pin", help="Pin workers to cores and cap TF threads.")]
NoProfile = Annotated[bool, typer.Option("--no-profile", help="No profiler trace window.")]
ClusterFrom = Annotated[Optional[str], typer.Option(
    help="multi: the cluster from a scheduler: slurm (srun's variables), tf-config (TF_CONFIG: TFJob, Vertex AI, "
    "SageMaker, Ray; perfkit launch passes it on unchanged) or auto (automatic when neither --workers nor "
    "--cluster is given and one is detected).", show_default=False)]
BasePort = Annotated[Optional[int], typer.Option(help="multi, --cluster-from slurm: each task's port is this + its "
                                                 "local id (default 23456).", show_default=False)]
Live = Annotated[bool, typer.Option("--live", help="The workers' live view (perfkit watch) under the progress "
                                     "bars while each run starts and trains (launch --hosts: the hosts' "
                                     "workers as relayed to this one).")]
AllowUnenforced = Annotated[bool, typer.Option("--allow-unenforced", help="multi: run emulated hosts even where their "
                                               "CPU budgets cannot be enforced (figures that use budgets are then "
                                               "marked).")]

# The trainer's tuning knobs (docs/tuning.md), the same on run and compare; perfkit.config.Knobs checks them.
StepsPerExecution = Annotated[int, typer.Option(help="Batches per call of the training function: Keras "
                                                "compile(steps_per_execution=K) (single, multi).")]
Metrics = Annotated[str, typer.Option(help="full: the workload's own metrics; minimal: the loss and accuracy "
                                      "only (fewer metric states to all-reduce).")]
BytesPerPack = Annotated[int, typer.Option(help="multi: all-reduce pack size, CommunicationOptions(bytes_per_pack="
                                           "N); 0: TensorFlow's default.")]
AllReduce = Annotated[str, typer.Option(help="multi: all-reduce implementation, ring (the CPU collective), auto or "
                                        "nccl (GPUs only).")]
Prefetch = Annotated[str, typer.Option(help="Input pipeline prefetch buffer in batches: auto (tf.data.AUTOTUNE), "
                                       "N, or 0 for none.")]


def knobs(steps_per_execution: int, metrics: str, bytes_per_pack: int, all_reduce: str, prefetch: str) -> Any:
    """The knob flags as one ``perfkit.config.Knobs`` (which checks them)."""
    from perfkit.config import Knobs

    return Knobs(steps_per_execution=steps_per_execution, metrics=metrics, bytes_per_pack=bytes_per_pack,
                 all_reduce=all_reduce, prefetch=prefetch)


def summary_table(summary: RunSummary, epochs: Any) -> Table:
    from perfkit.analysis.renderers.console import fmt

    what = f"preset {summary.preset}" if summary.preset else "your command"
    table = Table(title=f"run {summary.run_id} ({summary.mode}, {what}, {summary.status})")
    for col in ("epoch", "epoch s", "train s", "val s", "samples/s", "val acc", "val AUC"):
        table.add_column(col, justify="right")
    for row in epochs.itertuples(index=False):
        table.add_row(str(row.epoch), fmt(row.epoch_s, ".1f"), fmt(row.train_s, ".1f"), fmt(row.val_s, ".1f"),
                      fmt(row.samples_per_s, ",.0f"), fmt(row.val_accuracy, ".4f"), fmt(row.val_auc, ".4f"))
    steady = "epoch time (1 epoch, includes warm-up)" if summary.steady_is_warmup else "steady epoch time"
    table.caption = (
        f"{steady} {fmt(summary.steady_epoch_s, '.1f', ' s')} · steady {fmt(summary.steady_samples_per_s, ',.0f')}"
        f" samples/s · fit {fmt(summary.fit_s, '.1f', ' s')} · CPU mean {fmt(summary.cpu_mean, '.0f', '%')}"
        f" p95 {fmt(summary.cpu_p95, '.0f', '%')} (100% = one core) · command to first step"
        f" {fmt(summary.startup_s, '.1f', ' s')}"
    )
    return table


def worker_lines(workers: Any) -> Table:
    from perfkit.analysis.renderers.console import fmt

    table = Table(title="workers")
    for col in ("worker", "host", "steps", "median step s", "CPU mean", "CPU p95", "peak RSS"):
        table.add_column(col, justify="left" if col == "host" else "right")
    for w in workers.itertuples(index=False):
        rss = w.rss_peak_bytes / 2**20 if isinstance(w.rss_peak_bytes, (int, float)) else math.nan
        table.add_row(str(w.worker), str(w.host), str(w.steps), fmt(w.step_median_s, ".3f"),
                      fmt(w.cpu_mean, ".0f", "%"), fmt(w.cpu_p95, ".0f", "%"), fmt(rss, ",.0f", " MiB"))
    return table


def trace_lines(profile: Any, run_dir: Path) -> list[str]:
    """One line per traced worker: its median step split as the trace saw it, the share of its collective
    time hidden under compute, and the cross-check. Parsing the captures here (after training, in the CLI
    process) also writes the run's trace cache, so the first analysis finds it ready."""
    import pandas as pd

    from perfkit.analysis.tracetables import load_traces, overlap_share

    if not isinstance(profile, dict) or not profile.get("workers"):
        return [] if not isinstance(profile, dict) or profile.get("spec") == "off" else [
            f"profiler trace: none ({profile.get('error', 'no capture')})"]
    window = profile.get("window") or {}
    lines = [f"profiler trace of steps {window.get('first')}-{window.get('last')} "
             f"(TensorBoard: perfkit tensorboard {run_dir.name}):"]
    tables = load_traces(run_dir, replace(_meta(run_dir), profile=profile))
    steps = tables.steps if tables.steps is not None else pd.DataFrame(columns=["worker", "step_s"])
    med = steps.groupby("worker").median(numeric_only=True)
    hidden = overlap_share(steps)
    for worker, entry in sorted(profile["workers"].items(), key=lambda kv: int(kv[0])):
        if int(worker) not in med.index:
            bad = tables.unreadable.get(worker)
            why = f"unreadable ({bad['file']}: {bad['error']})" if bad else \
                f"{entry.get('status')} {entry.get('error') or ''}"
            lines.append(f"  worker {worker}: {why}".rstrip())
            continue
        m, check = med.loc[int(worker)], tables.checks.get(worker, {})
        agree = (f"trace vs step callback {100 * (check['agreement'] - 1):+.1f}%" if "agreement" in check
                 else "no step callback match")
        share = hidden.get(int(worker), math.nan)
        overlap = "" if math.isnan(share) else f"; {share:.0%} of all-reduce time hidden under compute"
        lines.append(f"  worker {worker}: step {m['step_s']:.3f} s = compute {m['compute_s']:.3f} + all-reduce "
                     f"{m['collective_s']:.3f} exposed + input {m['input_s']:.3f} + other {m['other_s']:.3f}"
                     f"{overlap} ({agree})")
    return lines + [f"  warning: {w}" for w in tables.notes]


def _meta(run_dir: Path) -> RunMeta:
    from perfkit.errors import ResultsError
    from perfkit.results import SCHEMA_VERSION, RunMeta, load_meta

    try:
        return load_meta(run_dir)
    except ResultsError:  # the caller's profile is enough to find the captures; hosts are then unknown
        return RunMeta(schema_version=SCHEMA_VERSION, run_id=run_dir.name)


class Display(Enum):
    """What a command shows while it trains."""

    PROGRESS = "progress"  # epoch and step bars, then the run's summary
    LIVE = "live"  # the bars with the workers' live view under them (perfkit watch), then the summary
    QUIET = "quiet"  # warnings only, no summary

    @classmethod
    def of(cls, quiet: bool, live: bool = False) -> Display:
        from perfkit.errors import UsageError

        if quiet and live:
            raise UsageError("--live/--quiet: give one of them (--quiet shows nothing while training)")
        return cls.QUIET if quiet else cls.LIVE if live else cls.PROGRESS


def train_once(cfg: RunConfig, opts: MultiOptions | None, results_dir: Path, run_id: str | None,
               display: Display, extra_meta: dict[str, object] | None = None) -> Path:
    """One run under ``display``, then its summary (none when quiet)."""
    from perfkit.trainer.options import train

    return with_progress(display, lambda observer: train(cfg, opts, results_dir, observer, run_id=run_id,
                                                         extra_meta=extra_meta))


def with_progress(display: Display, start: Callable[[Any], Path]) -> Path:
    """``start(observer)`` under ``display``, then the run's summary (quiet: warnings only, no summary)."""
    from perfkit.cli._progress import LiveObserver

    quiet = display is Display.QUIET
    console = Console(stderr=False, quiet=quiet)
    observer = (WarningsOnly() if quiet else LiveObserver(console) if display is Display.LIVE
                else ProgressObserver(console))
    try:
        path = start(observer)
    finally:
        if isinstance(observer, ProgressObserver):
            observer.close()
    if not quiet:
        print_summary(console, path)
    return path


def print_summary(console: Console, path: Path) -> None:
    from perfkit.analysis.summary import epoch_table, summarize, worker_table
    from perfkit.results import RunRecord

    record = RunRecord.load(path)
    if record.steps.empty:  # a launched command that never trained in Python with TensorFlow
        console.print(f"no steps recorded (the command never ran a Keras fit or a tf.function training step "
                      f"that perfkit could see): only CPU, memory and exit status\nrun directory: {path}")
        return
    console.print(summary_table(summarize(record), epoch_table(record)))
    workers = worker_table(record)
    if len(workers) > 1:
        console.print(worker_lines(workers))
    for line in trace_lines(record.run.profile or None, path):
        console.print(line)
    steps = (record.run.launch or {}).get("steps")
    if steps:
        console.print(f"steps recorded: {steps}")
    console.print(f"run directory: {path}")


class Format(str, Enum):
    table = "table"
    json = "json"


def default_html_path(results_dir: Path) -> Path:
    from datetime import datetime, timezone

    return results_dir / "analysis" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") / "report.html"


def write_outputs(analysis: Analysis, fmt: Format, output: Path | None, html: Path | None, csv: Path | None,
                  verdict_last: bool = False, same_as: tuple[Path, ...] = ()) -> None:
    """The analysis in the terminal (or as JSON), and the CSV and HTML files asked for. ``same_as``: reports
    that, written from this very analysis (their fingerprint), stand for ``html`` instead of writing it."""
    from perfkit.analysis import renderers

    width = None if sys.stdout.isatty() else 120  # a pipe or file gets lines of a fixed width
    notes = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    said = notes if fmt is Format.json else Console(width=width)
    if fmt is Format.json:
        if output is None:
            renderers.render("json", analysis, sys.stdout)
        else:
            renderers.write("json", analysis, output)
            notes.print(f"JSON: {output}", highlight=False)
    else:
        renderers.render("console", analysis, sys.stdout, renderers.RenderOptions(verdict_last, width))
    if csv is not None:
        renderers.write("csv", analysis, csv)
        said.print(f"CSV: {csv}", highlight=False)
    if html is not None:
        same = _same_report(analysis, same_as)
        if same is None:
            renderers.write("html", analysis, html)
        # soft_wrap: a path is never broken across lines (it is copied, or read by scripts)
        said.print(f"HTML report: {same or html}" + (" (unchanged: the same analysis)" if same else ""),
                   highlight=False, soft_wrap=True)


def _same_report(analysis: Analysis, reports: tuple[Path, ...]) -> Path | None:
    """The first of ``reports`` written from an analysis with the same figures, or None."""
    if not reports:
        return None
    from perfkit.analysis.renderers.html import report_fingerprint
    from perfkit.analysis.result import fingerprint

    mine = fingerprint(analysis)
    return next((r for r in reports if report_fingerprint(r) == mine), None)


def latest_report(results_dir: Path) -> Path | None:
    """The newest report under ``<results-dir>/analysis/`` (the default reports' folders are UTC times)."""
    reports = sorted((results_dir / "analysis").glob("*/report.html"))
    return reports[-1] if reports else None


def resolve_run(name: str, results_dir: Path) -> LoadedRun:
    """RUN as a run directory (with its sibling parts) or a run id under ``results_dir``."""
    from perfkit.analysis.load import find_run, load_runs
    from perfkit.errors import UsageError
    from perfkit.results import RUN_FILE, iter_run_dirs

    path = Path(name)
    if (path / RUN_FILE).is_file():
        return load_runs([path], results_dir).runs[0]
    found = find_run(results_dir, name) if results_dir.is_dir() and "/" not in name else None
    if found is not None:
        return found
    if not results_dir.is_dir():
        raise UsageError(f"RUN: {name!r} is not a run directory, and --results-dir {results_dir} is not a directory")
    ids = sorted({p.name.split("--")[0] for p in iter_run_dirs(results_dir)})
    listed = (", ".join(ids[-5:]) + (f" (and {len(ids) - 5} more: perfkit runs)" if len(ids) > 5 else "")) or "none"
    raise UsageError(f"RUN: {name!r} is neither a run directory nor a run id under {results_dir}; runs there: "
                     f"{listed}")
