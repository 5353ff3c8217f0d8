"""`perfkit export RUN`: one run's timeline as a trace file for the Perfetto UI or chrome://tracing.

Thin: resolve the run, call ``perfkit.analysis.traceevents.trace_events`` and the Perfetto renderer, print
one line. pandas and the analysis modules are imported inside the command, so ``--help`` stays fast.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from perfkit.cli._shared import app, resolve_run

if TYPE_CHECKING:
    from perfkit.analysis.load import LoadedRun
    from perfkit.analysis.traceevents import TraceEvents

SUFFIX = ".perfetto.json.gz"


class ExportFormat(str, Enum):
    perfetto = "perfetto"


@app.command("export")
def export_command(
    run: Annotated[str, typer.Argument(metavar="RUN", help="A run directory, or a run id under --results-dir.",
                                       show_default=False)],
    fmt: Annotated[ExportFormat, typer.Option("--format", help="perfetto: Chrome trace-event JSON, gzipped (the "
                                              "Perfetto UI and chrome://tracing open it).")] = ExportFormat.perfetto,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help=f"The file to write, ending in .gz "
                                                   f"(default: <run-id>{SUFFIX} beside the run directory).",
                                                   show_default=False)] = None,
    results_dir: Annotated[Path, typer.Option(help="Where run directories live.")] = Path("results"),
    max_events: Annotated[int, typer.Option(help="At most this many events in the file (0: no cap): epochs, "
                                            "restarts and step markers always kept; counters averaged into time "
                                            "bins past a quarter of it; whole workers' steps while they fit; the "
                                            "traced window's shortest events dropped first.")] = 1_000_000,
    workers: Annotated[Optional[str], typer.Option(help="Only these workers (comma-separated indices, e.g. 0,3) and "
                                                   "the launchers: a few workers of a large run, whole.",
                                                   show_default=False)] = None,
) -> None:
    """Every worker's steps, epochs, validation, restarts, CPU% and RSS and its traced window's TensorFlow ops,
    on one clock, in one trace file."""
    from perfkit.analysis.renderers import perfetto
    from perfkit.analysis.traceevents import trace_events
    from perfkit.errors import UsageError

    if max_events < 0:
        raise UsageError(f"--max-events: {max_events} is negative; give 0 (no cap) or a positive number")
    if output is not None and (output.is_dir() or not output.name.endswith(".gz")):
        raise UsageError(f"--output: {output} is a directory; give a file path ending in .gz" if output.is_dir()
                         else f"--output: {output.name} does not end in .gz; the file is gzipped (e.g. x{SUFFIX})")
    loaded = resolve_run(run, results_dir)
    path = output or loaded.paths[0].parent / f"{loaded.run_id}{SUFFIX}"
    events = trace_events(loaded, max_events, _workers(workers, loaded))
    try:
        perfetto.write(events, path, _other(loaded, events, fmt.value))
    except OSError as exc:
        raise UsageError(f"--output: cannot write {path} ({exc.strerror or exc})") from None
    typer.echo(_summary(events, path))


def _workers(text: str | None, loaded: LoadedRun) -> set[int] | None:
    """``--workers``' indices, each one of the run's."""
    from perfkit.errors import UsageError

    if text is None:
        return None
    have = {w.index for w in loaded.meta.workers} or set(range(loaded.num_workers))
    valid = ", ".join(map(str, sorted(have)))
    try:
        chosen = {int(x) for x in text.split(",") if x.strip()}
    except ValueError:
        raise UsageError(f"--workers: {text!r} is not a list of worker indices; this run's: {valid}") from None
    if not chosen or chosen - have:
        raise UsageError(f"--workers: {', '.join(map(str, sorted(chosen - have))) or 'none given'} not in this "
                         f"run; its workers: {valid}")
    return chosen


def _other(loaded: LoadedRun, events: TraceEvents, fmt: str) -> dict[str, Any]:
    """The file's ``otherData``: what it holds, its clock, the cap, and what is missing."""
    from dataclasses import asdict

    from perfkit.machine import versions

    return {"run_id": loaded.run_id, "exported_by": f"perfkit {versions()['perfkit']} export --format {fmt}",
            "clock": "wall clock (each worker's monotonic times through its run.json anchor), microseconds "
                     "from origin_wall_ns", "origin_wall_ns": events.origin_wall_ns,
            "workers": list(events.workers), "traced_workers": list(events.traced),
            "events": events.counts(), "cap": asdict(events.cap), "notes": list(events.notes),
            "problems": list(loaded.problems)}


def _summary(events: TraceEvents, path: Path) -> str:
    """The command's one line: what the file holds, what the cap dropped, what is missing."""
    n = events.counts()
    cap = events.cap
    dropped = (f"; --max-events {cap.max_events:,} dropped the {cap.dropped:,} shortest of {cap.trace_events:,} "
               f"traced events (each <= {cap.longest_dropped_ns / 1e3:,.1f} us)" if cap.dropped else "")
    dropped += (f"; the steps of {len(cap.steps_left_out)} worker(s) left out ({cap.steps_dropped:,} steps; "
                f"--workers exports fewer workers whole)" if cap.steps_left_out else "")
    dropped += (f"; CPU counters averaged into {cap.counter_bin_s:,.1f}-s bins" if cap.counter_bin_s else "")
    traced = (f", {n['trace_events']:,} traced events ({n['collectives']:,} collectives) of worker(s) "
              f"{', '.join(map(str, events.traced))}" if events.traced else "")
    more = len(events.notes) - 1
    missing = (f"; {events.notes[0]}" + (f" ({more} more note{'s' if more > 1 else ''} in the file's otherData)"
                                         if more > 0 else "")) if events.notes else ""
    return (f"wrote {path}: {len(events.workers)} workers, {n['steps']:,} steps, {n['epochs']:,} epochs, "
            f"{n['counters']:,} counter samples{traced}{dropped}{missing}; open it in ui.perfetto.dev")
