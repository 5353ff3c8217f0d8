"""`perfkit run`: train once under a strategy and record everything into a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from perfkit.cli import _shared as opt
from perfkit.cli._shared import app, train_once
from perfkit.config import PRESETS, Mode, RunConfig
from perfkit.workloads.botdetector.params import DEFAULT_CLASS_WEIGHT

_CW_DEFAULT = ",".join(f"{k}:{v:g}" for k, v in DEFAULT_CLASS_WEIGHT.items())


@app.command("run")
def run_command(
    mode: Annotated[Mode, typer.Option(help="single: MirroredStrategy in one process; multi: "
                                       "MultiWorkerMirroredStrategy over worker processes; ps: "
                                       "ParameterServerStrategy (a chief, workers, parameter servers; "
                                       "asynchronous).")] = Mode.single,
    preset: Annotated[str, typer.Option(help=f"Workload size: {', '.join(PRESETS)}.")] = "quick",
    epochs: Annotated[Optional[int], typer.Option(help="Override the preset's epochs.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Global batch (article: 1024).")] = None,
    train_players: Annotated[Optional[int], typer.Option(help="Training sequences (players).")] = None,
    test_players: Annotated[Optional[int], typer.Option(help="Validation sequences (players).")] = None,
    sequence_length: Annotated[Optional[int], typer.Option(help="Days per sequence (article: 7).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Data generation and shuffling seed.")] = None,
    class_weight: Annotated[str, typer.Option(help="Class weights as '0:W0,1:W1'.")] = _CW_DEFAULT,
    data: Annotated[Optional[Path], typer.Option(help="Your own Parquet/CSV (player_id, day, 18 features, "
                                                 "label).")] = None,
    workload: Annotated[Optional[str], typer.Option(help="What to train: botdetector (the article's, default), or "
                                                    "your module:attr or path/to/file.py:attr (docs/workloads.md).",
                                                    show_default=False)] = None,
    results_dir: opt.ResultsDir = Path("results"),
    run_id: opt.RunId = None,
    label: opt.Label = None,
    sample_interval: opt.SampleInterval = 0.5,
    workers: opt.Workers = None,
    replicas: Annotated[int, typer.Option(help="single: MirroredStrategy over N logical CPU devices of the one "
                                          "process, the global batch split among them (docs/scaling.md).")] = 1,
    ps: Annotated[Optional[int], typer.Option("--ps", help="ps, with --workers: parameter servers (default 1); "
                                              "more than one shards each variable over them.",
                                              show_default=False)] = None,
    cluster: opt.ClusterFile = None,
    host: Annotated[Optional[str], typer.Option(help="multi: start only this host's workers of --cluster.")] = None,
    task_index: Annotated[Optional[int], typer.Option(help="multi: start only this worker of --cluster.")] = None,
    emulate: opt.Emulate = False,
    pin: opt.Pin = True,
    connect_timeout: Annotated[float, typer.Option(help="multi: seconds for the cluster to form.")] = 120.0,
    hang_timeout: opt.HangTimeout = "auto",
    max_restarts: Annotated[int, typer.Option(help="multi: restart the cluster up to K times after a worker "
                                              "dies; training resumes from the last completed epoch.")] = 0,
    profile_steps: Annotated[str, typer.Option(help="TF profiler trace window on every worker: global steps "
                                               "'A-B' (1-based), 'auto' (10 steps early in epoch 2), or 'off' (none, "
                                               "as --no-profile).")] = "auto",
    no_profile: opt.NoProfile = False,
    profile_retries: Annotated[int, typer.Option(help="Try a lost capture again this many times (multi: a "
                                                 "cluster restart each, from the last completed epoch).")] = 3,
    cluster_from: opt.ClusterFrom = None,
    base_port: opt.BasePort = None,
    allow_unenforced: opt.AllowUnenforced = False,
    steps_per_execution: opt.StepsPerExecution = 1,
    metrics: opt.Metrics = "full",
    bytes_per_pack: opt.BytesPerPack = 0,
    all_reduce: opt.AllReduce = "ring",
    prefetch: opt.Prefetch = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q",
                                        help="No progress or summary; print only the run directory.")] = False,
    live: opt.Live = False,
) -> None:
    """Train a workload (default: the article's bot-player LSTM) once and record steps, epochs and CPU% under
    RESULTS_DIR/<run-id>."""
    from perfkit.trainer.options import ClusterFlags, for_mode
    from perfkit.workloads import checked, config_overrides

    chosen = config_overrides(workload, preset, seed, batch_size, data=data, train_players=train_players,
                              test_players=test_players, sequence_length=sequence_length,
                              class_weight=None if class_weight == _CW_DEFAULT else class_weight)
    cfg = checked(RunConfig.from_preset(
        mode, preset, epochs=epochs, batch_size=chosen.pop("batch_size", batch_size), seed=seed,
        sample_interval=sample_interval, label=label, profile_steps="off" if no_profile else profile_steps,
        profile_retries=profile_retries, replicas=replicas,
        knobs=opt.knobs(steps_per_execution, metrics, bytes_per_pack, all_reduce, prefetch), **chosen,
    ))
    cfg, opts = for_mode(cfg, mode, ClusterFlags(
        workers=workers, cluster=cluster, host=host, task_index=task_index, emulate=emulate, pin=pin,
        connect_timeout=connect_timeout, hang_timeout=hang_timeout, max_restarts=max_restarts,
        cluster_from=cluster_from, base_port=base_port, ps=ps, allow_unenforced=allow_unenforced))
    path = train_once(cfg, opts, results_dir, run_id, opt.Display.of(quiet, live))
    if quiet:
        typer.echo(str(path))  # scripts get the run directory and nothing else
