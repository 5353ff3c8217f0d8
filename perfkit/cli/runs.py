"""`perfkit runs`: the runs under a results directory, one line each."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from perfkit.cli._shared import app
from perfkit.results import RunMeta


@app.command("runs")
def runs_command(
    results_dir: Annotated[Path, typer.Option(help="Where run directories live.")] = Path("results"),
) -> None:
    """List runs with status, mode, preset, epochs, steady epoch time and trace captures."""
    from perfkit.analysis.renderers.console import fmt
    from perfkit.analysis.summary import summarize
    from perfkit.errors import ResultsError, UsageError
    from perfkit.results import RunRecord, iter_run_dirs

    if results_dir.exists() and not results_dir.is_dir():
        raise UsageError(f"--results-dir: {results_dir} is not a directory")
    paths = list(iter_run_dirs(results_dir))
    table = Table(title=f"runs in {results_dir}")
    # Run ids are what users copy into other commands: never wrap or truncate them.
    table.add_column("run id", no_wrap=True, min_width=max((len(p.name) for p in paths), default=6))
    table.add_column("status", no_wrap=True, min_width=11)
    for col in ("mode", "preset", "epochs", "steady epoch s", "val acc", "trace"):
        table.add_column(col, justify="right" if col in ("epochs", "steady epoch s", "val acc") else "left")
    count = 0
    for path in paths:
        count += 1
        try:
            record = RunRecord.load(path, samples=False)  # the listing shows no CPU figure
            s = summarize(record)
        except ResultsError as exc:
            table.add_row(path.name, "[red]unreadable[/red]", "", "", "", "", "", str(exc)[:60])
            continue
        status = s.status if s.status == "complete" else f"[yellow]{s.status}[/yellow]"
        table.add_row(path.name, status, s.mode, s.preset, str(s.epochs), fmt(s.steady_epoch_s, ".1f"),
                      fmt(s.val_accuracy, ".4f"), trace_status(record.run))
    # Piped output (scripts, tests) gets a fixed width instead of rich's 80-column fallback.
    console = Console(width=None if sys.stdout.isatty() else 120)
    if count == 0:
        console.print(f"no runs in {results_dir}")
        return
    console.print(table)


def trace_status(meta: RunMeta) -> str:
    """Captures per worker as run.json records them ("2/2", "1/2 (1 crashed)", "off"); a listing parses
    nothing, so a capture that is there but damaged shows only when the run is analysed."""
    profile = meta.profile
    if not profile:
        return ""
    if profile.get("spec") == "off":
        return "off"
    workers = [w for w in (profile.get("workers") or {}).values() if isinstance(w, dict)]
    if not workers:
        return "none"
    total = meta.cluster.num_workers or len(meta.workers) or len(workers)
    captured = sum(w.get("status") == "captured" for w in workers)
    others = Counter(str(w.get("status")) for w in workers if w.get("status") != "captured")
    more = ", ".join(f"{n} {status}" for status, n in sorted(others.items()))
    return f"{captured}/{total}" + (f" ({more})" if more else "")

