"""`perfkit watch [RUN]`: a running run, live: every worker's state, pace, CPU against its budget, and the
worker the others wait for. Read-only; ``q`` or Ctrl-C leaves and the run goes on.

Thin: find the run, poll ``perfkit.live.watcher.Watcher`` once an interval, draw with ``perfkit.live.render``.
"""

from __future__ import annotations

import contextlib
import math
import select
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Optional

import typer

from perfkit.cli._shared import Format, app


@app.command("watch")
def watch_command(
    run: Annotated[Optional[str], typer.Argument(
        metavar="RUN", help="A run directory (a shared filesystem's too) or a run id under --results-dir; "
        "default: the one run running there.", show_default=False)] = None,
    results_dir: Annotated[Path, typer.Option(help="Where run directories live.")] = Path("results"),
    baseline: Annotated[Optional[str], typer.Option(
        help="A finished run (directory or id) to set the throughput against: the speedup so far.",
        show_default=False)] = None,
    plain: Annotated[bool, typer.Option("--plain", help="One line an interval (for logs and CI), no live "
                                        "table.")] = False,
    fmt: Annotated[Format, typer.Option("--format", help="table: the live view (or --plain lines); json: one "
                                        "JSON object an interval, for other tools.")] = Format.table,
    interval: Annotated[float, typer.Option(help="Seconds between two readings.")] = 1.0,
    once: Annotated[bool, typer.Option("--once", help="Two readings an interval apart, one printed, then "
                                       "exit.")] = False,
    trace_now: Annotated[bool, typer.Option("--trace-now", help="Ask every worker for a trace window at its "
                                            "next step (writes RUN/trace-now.json), wait for each, say where it "
                                            "went, then exit.")] = False,
    trace_steps: Annotated[int, typer.Option(help="--trace-now: the window's length in steps.")] = 3,
    trace_timeout: Annotated[float, typer.Option(help="--trace-now: seconds to wait for every worker's "
                                                 "window.")] = 120.0,
) -> None:
    """Watch a running run: each worker's state, pace and CPU, and the worker the others wait for.

    A stopped, stuck or silent worker is named at once; above the workers, the run's throughput, speedup so
    far and ETA. It writes nothing into the run, and ends when the run does."""
    from perfkit.errors import UsageError
    from perfkit.live import render
    from perfkit.live.snapshot import RunState
    from perfkit.live.watcher import Watcher

    if not (math.isfinite(interval) and 0.2 <= interval <= 60):
        raise UsageError(f"--interval: {interval:g} is not between 0.2 and 60 seconds")
    run_dir = _run_dir(run, results_dir)
    if trace_now:
        _trace_now(run_dir, trace_steps, trace_timeout)
        return
    base = _baseline(baseline, results_dir) if baseline else None
    watcher = Watcher(run_dir, baseline=base)
    line: Callable[..., str] | None = (render.json_line if fmt is Format.json else
                                       render.plain_line if plain or once else None)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C leaves the watcher, never the run
        snap = watcher.poll()
        if snap.state is RunState.FINISHED:
            typer.echo(line(snap) if fmt is Format.json and line else render.headline(snap))
            return
        if once:
            time.sleep(interval)
            typer.echo(line(watcher.poll()) if line else "")
            return
        if line is not None:
            _lines(watcher, line, interval)
        else:
            _live(watcher, interval)


def _trace_now(run_dir: Path, steps: int, timeout: float) -> None:
    from perfkit.errors import UsageError
    from perfkit.live import tracenow
    from perfkit.results import load_meta

    if not (math.isfinite(timeout) and timeout > 0):
        raise UsageError(f"--trace-timeout: {timeout:g} is not a number of seconds > 0")
    status = load_meta(run_dir).status
    if status != "running":
        raise UsageError(f"--trace-now: {run_dir.name} is not running ({status}); nothing would take the window")
    rid = tracenow.ask(run_dir, steps)
    typer.echo(f"asked every worker of {run_dir.name} for a trace window of {steps} steps (request {rid})")
    for worker, got in tracenow.wait(run_dir, rid, timeout):
        window = got.get("window") or {}
        where = got.get("file") or got.get("error")
        typer.echo(f"worker {worker}: {got.get('status')} steps {window.get('first')}-{window.get('last')}: {where}")
    typer.echo(f"perfkit tensorboard --results-dir {run_dir.parent} shows them (session {run_dir.name}-now{rid})")


GIVE_UP_S = 300.0  # --plain and json lines (logs, CI) stop after the run stays "not updated" this long


def _lines(watcher, line: Callable[..., str], interval: float,  # type: ignore[no-untyped-def]
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
    """A line an interval until the run finishes; a run whose records stopped moving and whose launcher is
    gone ends it after ``GIVE_UP_S``, naming the run (a log or CI job never waits forever)."""
    from perfkit.errors import RunFailed
    from perfkit.live.snapshot import RunState

    quiet_since = None
    while True:
        snap = watcher.poll()
        typer.echo(line(snap))
        sys.stdout.flush()
        if snap.state is RunState.FINISHED:
            return
        quiet_since = (quiet_since or clock()) if snap.state is RunState.NOT_UPDATED else None
        if quiet_since is not None and clock() - quiet_since >= GIVE_UP_S:
            raise RunFailed(f"{snap.run_id}: not updated for {snap.age_s:.0f} s and its launcher is not running "
                            f"here; perfkit watch stops waiting (its run.json still says running)")
        sleep(interval)


def _live(watcher, interval: float) -> None:  # type: ignore[no-untyped-def]
    from rich.console import Console
    from rich.live import Live

    from perfkit.live import render
    from perfkit.live.snapshot import RunState

    console = Console()
    snap = watcher.poll()
    # keys first: a key pressed while the view is first drawn is kept, not flushed by the mode change
    with _keys() as key, Live(render.view(snap), console=console, auto_refresh=False, transient=False) as live:
        while snap.state is not RunState.FINISHED:
            if key(interval) == "q":
                return
            snap = watcher.poll()
            live.update(render.view(snap), refresh=True)
    console.print(render.headline(snap))


@contextlib.contextmanager
def _keys() -> Iterator[Callable[[float], str | None]]:
    """A reader of single keys from a terminal (None after ``timeout`` without one); without a terminal it
    only waits."""
    if not sys.stdin.isatty():
        yield lambda timeout: time.sleep(timeout)  # type: ignore[func-returns-value]
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd, termios.TCSANOW)

        def key(timeout: float) -> str | None:
            ready, _, _ = select.select([fd], [], [], timeout)
            return sys.stdin.read(1) if ready else None

        yield key
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _run_dir(run: str | None, results_dir: Path) -> Path:
    from perfkit.config import sanitize_id
    from perfkit.errors import UsageError
    from perfkit.live.watcher import find_running
    from perfkit.results import RUN_FILE

    if run is None:
        if not results_dir.is_dir():
            raise UsageError(f"RUN: none named and --results-dir {results_dir} is not a directory; name a run "
                             f"directory: perfkit watch RUN_DIR")
        return find_running(results_dir)
    path = Path(run)
    if not (path / RUN_FILE).is_file() and "/" not in run:
        path = results_dir / sanitize_id(run, "RUN")
    if not (path / RUN_FILE).is_file():
        raise UsageError(f"RUN: {run!r} is not a run directory (no readable {RUN_FILE}) nor a run id under "
                         f"{results_dir}")
    return path


def _baseline(name: str, results_dir: Path) -> tuple[str, float]:
    """The baseline's id and steady samples/s."""
    from perfkit.analysis.summary import summarize
    from perfkit.errors import UsageError
    from perfkit.results import RunRecord

    path = _run_dir(name, results_dir)
    record = RunRecord.load(path)
    rate = summarize(record).steady_samples_per_s
    if not (math.isfinite(rate) and rate > 0):
        raise UsageError(f"--baseline: {name} has no steady epoch to set the throughput against (still "
                         f"running, or failed before one)")
    return record.run_id, float(rate)
