"""Options that `perfkit run` and `perfkit launch` share, defined once (same flag, same help, same default)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

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
Pin = Annotated[bool, typer.Option("--pin/--no-pin", help="Pin workers to cores and cap TF threads.")]
NoProfile = Annotated[bool, typer.Option("--no-profile", help="No profiler trace window.")]
ClusterFrom = Annotated[Optional[str], typer.Option(
    help="multi: the cluster from a scheduler: slurm (srun's variables), tf-config (TF_CONFIG: TFJob, Vertex AI, "
    "SageMaker, Ray; perfkit launch passes it on unchanged) or auto (automatic when neither --workers nor "
    "--cluster is given and one is detected).", show_default=False)]
BasePort = Annotated[Optional[int], typer.Option(help="multi, --cluster-from slurm: each task's port is this + its "
                                                 "local id [default: 23456].", show_default=False)]
AllowUnenforced = Annotated[bool, typer.Option("--allow-unenforced", help="multi: run emulated hosts even where their "
                                               "CPU budgets cannot be enforced (figures that use budgets are then "
                                               "marked).")]
