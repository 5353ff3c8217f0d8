"""`perfkit analyze`: speedup over the single-machine baseline, and why not more.

Thin: parse flags, call ``perfkit.analysis.analyze.analyze`` and the renderers. pandas, plotly and the
analysis modules are imported inside the command, so ``perfkit analyze --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from perfkit.cli._shared import Format, app, default_html_path, latest_report, write_outputs


@app.command("analyze")
def analyze_command(
    run_dirs: Annotated[Optional[list[Path]], typer.Argument(
        metavar="RUN_DIR",
        help="Run directories (a part <run-id>--<host> brings its sibling parts), or one folder of runs (then "
        "used as --results-dir); default: every run in --results-dir.", show_default=False)] = None,
    results_dir: Annotated[Path, typer.Option(help="Where run directories live.")] = Path("results"),
    baseline: Annotated[Optional[str], typer.Option(
        help="Run id of the baseline (default: the latest complete single-mode run on the same data and "
        "preset).", show_default=False)] = None,
    fmt: Annotated[Format, typer.Option("--format", help="table: verdict and tables in the terminal; json: "
                                        "every figure as JSON.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option(help="--format json: write the JSON here instead of stdout.",
                                                   show_default=False)] = None,
    html: Annotated[Optional[Path], typer.Option(
        help="Write the HTML report here (default: <results-dir>/analysis/<UTC time>/report.html).",
        show_default=False)] = None,
    no_html: Annotated[bool, typer.Option("--no-html", help="Write no HTML report.")] = False,
    csv: Annotated[Optional[Path], typer.Option(help="Also write the per-run table as CSV here.",
                                                show_default=False)] = None,
) -> None:
    """Compare runs with the baseline: speedup, efficiency, CPU, memory, stragglers, what-if, convergence."""
    from perfkit.errors import UsageError

    if output is not None and fmt is not Format.json:
        raise UsageError("--output: only with --format json (the table goes to the terminal)")
    if html is not None and no_html:
        raise UsageError("--html and --no-html: give one of them, not both")
    for flag, path in (("--output", output), ("--html", html), ("--csv", csv)):
        if path is not None and path.is_dir():
            raise UsageError(f"{flag}: {path} is a directory; give a file path")

    from perfkit.analysis import runcache
    from perfkit.analysis.analyze import analyze
    from perfkit.analysis.memory import small_pages
    from perfkit.results import is_folder_of_runs

    small_pages()  # most of a large analysis' time was page faults (analysis/memory.py)

    if run_dirs and len(run_dirs) == 1 and is_folder_of_runs(run_dirs[0]):
        results_dir, run_dirs = run_dirs[0], None  # e.g. a Slurm job's shared results folder
    with runcache.enabled():  # a run analysed before is read from its cached figures (analysis/runcache.py)
        analysis = analyze(run_dirs or None, results_dir, baseline)
    # An unchanged analysis leaves its report as it is: the one at --html, or by default the newest one.
    earlier = (html,) if html is not None else tuple(r for r in [latest_report(results_dir)] if r is not None)
    write_outputs(analysis, fmt, output, None if no_html else (html or default_html_path(results_dir)), csv,
                  same_as=earlier)
