"""`perfkit launch`: your own training command, once per worker, under perfkit's launcher."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from perfkit.cli import _options as opt
from perfkit.cli import app
from perfkit.config import Mode
from perfkit.errors import UsageError


@app.command("launch", context_settings={"allow_interspersed_args": False})
def launch_command(
    command: Annotated[list[str], typer.Argument(help="The command to run per worker, after '--'.",
                                                 show_default=False, metavar="-- COMMAND...")],
    mode: Annotated[Mode, typer.Option(help="multi: one process per worker with its own TF_CONFIG; single: "
                                       "the command once, no TF_CONFIG (the baseline).")] = Mode.multi,
    workers: opt.Workers = None,
    cluster: opt.ClusterFile = None,
    emulate: opt.Emulate = False,
    pin: opt.Pin = True,
    results_dir: opt.ResultsDir = Path("results"),
    run_id: opt.RunId = None,
    label: opt.Label = None,
    sample_interval: opt.SampleInterval = 0.5,
    connect_timeout: Annotated[float, typer.Option(help="multi: seconds for every worker's TF server to come "
                                                   "up.")] = 120.0,
    stall_timeout: Annotated[float, typer.Option(help="Fail when no worker shows progress (status or CPU) for "
                                                 "this many seconds.")] = 600.0,
    max_restarts: Annotated[int, typer.Option(help="Start the command again up to K times after a worker dies "
                                              "(resuming is the script's own, e.g. BackupAndRestore).")] = 0,
    profile_steps: Annotated[str, typer.Option(help="Trace window for perfkit.record: global steps 'A-B', "
                                               "'auto' or 'off'.")] = "auto",
    no_profile: opt.NoProfile = False,
    cluster_from: opt.ClusterFrom = None,
    base_port: opt.BasePort = None,
    allow_unenforced: opt.AllowUnenforced = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the run directory.")] = False,
) -> None:
    """Run COMMAND once per worker (perfkit launch --workers 2 -- python train.py ARGS); a script using
    perfkit.record gets steps, epochs and a trace window, any other gets CPU, memory and exit status."""
    from perfkit.cli.run import multi_options, print_summary, progress_observer
    from perfkit.profiler.trace import check_spec
    from perfkit.trainer.command import UserCommand
    from perfkit.trainer.launch import LaunchOptions, run_launch

    if not 0.05 <= sample_interval <= 60:
        raise UsageError("--sample-interval: must be between 0.05 and 60 seconds")
    if stall_timeout <= 0:
        raise UsageError("--stall-timeout: must be > 0 seconds")
    if mode is Mode.ps:
        raise UsageError("--mode: ps is for perfkit run (perfkit's own chief, workers and parameter servers); "
                         "perfkit launch runs your command with --mode single or multi")
    if mode is Mode.multi:
        opts = multi_options(workers, cluster, None, None, emulate, pin, connect_timeout, max_restarts,
                             cluster_from, base_port)
    else:
        if workers not in (None, 1) or cluster is not None or emulate or cluster_from is not None:
            raise UsageError("--workers/--cluster/--emulate/--cluster-from: only with --mode multi")
        opts = multi_options(1, None, None, None, False, pin, connect_timeout, max_restarts)
    passed_on = opts.scheduler.tf_config if opts.scheduler is not None else None
    lopts = LaunchOptions(UserCommand.checked(command, mode is Mode.multi, passed_on), mode,
                          "off" if no_profile else check_spec(profile_steps), sample_interval=sample_interval,
                          label=label)
    opts = replace(opts, stall_timeout=stall_timeout, allow_unenforced=allow_unenforced)
    console = Console(quiet=quiet)
    observer = progress_observer(console, quiet)
    try:
        path = run_launch(lopts, opts, results_dir, observer, run_id)
    finally:
        if hasattr(observer, "close"):
            observer.close()
    if quiet:
        typer.echo(str(path))
    else:
        print_summary(console, path)
