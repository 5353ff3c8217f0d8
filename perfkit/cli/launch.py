"""`perfkit launch`: your own training command, once per worker, under perfkit's launcher."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from perfkit.cli import _shared as opt
from perfkit.cli._shared import app, with_progress
from perfkit.config import Mode


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
    hang_timeout: Annotated[str, typer.Option(help="Call the cluster hung when no worker ends a step for "
                                              "this many seconds and name the stuck worker; 'auto': 10x the "
                                              "longest pause between steps seen, at least 30 s (before the first "
                                              "step, the connect timeout). Not after a worker's last step: its exit has "
                                              "300 s of its own.")] = "auto",
    max_restarts: Annotated[int, typer.Option(help="Start the command again up to K times after a worker dies "
                                              "(resuming is the script's own, e.g. BackupAndRestore).")] = 0,
    profile_steps: Annotated[str, typer.Option(help="Trace window of the recorded steps: global steps 'A-B', "
                                               "'auto' or 'off'.")] = "auto",
    no_profile: opt.NoProfile = False,
    no_auto_record: Annotated[bool, typer.Option("--no-auto-record", help="Do not record a script's Keras fit or "
                                                 "custom loop through perfkit's start-up hook (CPU, memory and exit "
                                                 "status only, unless it uses perfkit.record).")] = False,
    step_function: Annotated[Optional[str], typer.Option(help="A custom loop's training step: the name of the "
                                                         "tf.function to time (default: the one that calls "
                                                         "Strategy.run).", show_default=False)] = None,
    cluster_from: opt.ClusterFrom = None,
    base_port: opt.BasePort = None,
    allow_unenforced: opt.AllowUnenforced = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the run directory.")] = False,
) -> None:
    """Run COMMAND once per worker (perfkit launch --workers 2 -- python train.py ARGS): a Python script's Keras
    fit or custom loop is recorded as it is (steps, epochs, a trace window); any command gets CPU, memory and
    exit status."""
    from perfkit.trainer.command import run_launch
    from perfkit.trainer.options import launch_options

    lopts, opts = launch_options(command, mode, workers=workers, cluster=cluster, emulate=emulate, pin=pin,
                                 connect_timeout=connect_timeout, hang_timeout=hang_timeout,
                                 max_restarts=max_restarts, cluster_from=cluster_from, base_port=base_port,
                                 allow_unenforced=allow_unenforced,
                                 profile_steps="off" if no_profile else profile_steps,
                                 sample_interval=sample_interval, label=label, auto_record=not no_auto_record,
                                 step_function=step_function)
    path = with_progress(quiet, lambda observer: run_launch(lopts, opts, results_dir, observer, run_id))
    if quiet:
        typer.echo(str(path))  # scripts get the run directory and nothing else
