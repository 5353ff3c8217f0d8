"""`perfkit run`: train once under a strategy and record everything into a run directory."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console

from perfkit.cli import _options as opt
from perfkit.cli import app
from perfkit.config import DEFAULT_CLASS_WEIGHT, PRESETS, Mode, RunConfig, parse_class_weight
from perfkit.errors import UsageError

if TYPE_CHECKING:
    from perfkit.trainer.multi import MultiOptions

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
    data: Annotated[Optional[Path], typer.Option(help="Your own Parquet/CSV (player_id, day, 18 features, label).")] = None,
    workload: Annotated[Optional[str], typer.Option(help="What to train: botdetector (the article's, default), or "
                                                    "your module:attr or path/to/file.py:attr (docs/workloads.md).",
                                                    show_default=False)] = None,
    results_dir: opt.ResultsDir = Path("results"),
    run_id: opt.RunId = None,
    label: opt.Label = None,
    sample_interval: opt.SampleInterval = 0.5,
    workers: opt.Workers = None,
    ps: Annotated[Optional[int], typer.Option("--ps", help="ps, with --workers: parameter servers (default 1); "
                                              "more than one shards each variable over them.",
                                              show_default=False)] = None,
    cluster: opt.ClusterFile = None,
    host: Annotated[Optional[str], typer.Option(help="multi: start only this host's workers of --cluster.")] = None,
    task_index: Annotated[Optional[int], typer.Option(help="multi: start only this worker of --cluster.")] = None,
    emulate: opt.Emulate = False,
    pin: opt.Pin = True,
    connect_timeout: Annotated[float, typer.Option(help="multi: seconds for the cluster to form.")] = 120.0,
    stall_timeout: Annotated[float, typer.Option(help="multi: fail when no worker reports progress for this "
                                                 "many seconds (a hung peer or collective).")] = 600.0,
    max_restarts: Annotated[int, typer.Option(help="multi: restart the cluster up to K times after a worker "
                                              "dies; training resumes from the last completed epoch.")] = 0,
    profile_steps: Annotated[str, typer.Option(help="TF profiler trace window on every worker: global steps "
                                               "'A-B' (1-based), or 'auto' (10 steps early in epoch 2).")] = "auto",
    no_profile: opt.NoProfile = False,
    profile_retries: Annotated[int, typer.Option(help="Try a lost capture again this many times (multi: a "
                                                 "cluster restart each, from the last completed epoch).")] = 3,
    cluster_from: opt.ClusterFrom = None,
    base_port: opt.BasePort = None,
    allow_unenforced: opt.AllowUnenforced = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress or summary; print only the run directory.")] = False,
) -> None:
    """Train a workload (default: the article's bot-player LSTM) once and record steps, epochs and CPU% under
    RESULTS_DIR/<run-id>."""
    from perfkit.workloads import config_overrides

    chosen = config_overrides(workload, preset, seed, batch_size, data=data, train_players=train_players,
                              test_players=test_players, sequence_length=sequence_length,
                              class_weight=None if class_weight == _CW_DEFAULT else class_weight)
    cfg = RunConfig.from_preset(
        mode, preset, epochs=epochs, batch_size=chosen.pop("batch_size", batch_size), train_players=train_players,
        test_players=test_players, sequence_length=sequence_length, seed=seed,
        class_weight=parse_class_weight(class_weight), data_path=str(data) if data is not None else None,
        sample_interval=sample_interval, label=label, profile_steps="off" if no_profile else profile_steps,
        profile_retries=profile_retries, **chosen,
    )
    opts = None
    if mode is not Mode.ps and ps is not None:
        raise UsageError("--ps: only with --mode ps")
    if mode is Mode.ps:
        cfg = ps_config(cfg, profile_steps if not no_profile else "off", max_restarts)
    if mode is not Mode.single:
        opts = multi_options(workers, cluster, host, task_index, emulate, pin, connect_timeout, max_restarts,
                             cluster_from, base_port, mode=mode, ps=ps)
        if stall_timeout <= 0:
            raise UsageError("--stall-timeout: must be > 0 seconds")
        opts = replace(opts, stall_timeout=stall_timeout, allow_unenforced=allow_unenforced)
    else:
        _no_multi_flags(workers=workers, cluster=cluster, host=host, task_index=task_index,
                        allow_unenforced=allow_unenforced or None, cluster_from=cluster_from, base_port=base_port)
    path = train_once(cfg, opts, results_dir, run_id, quiet)
    if quiet:
        typer.echo(str(path))  # scripts get the run directory and nothing else


def train_once(cfg: RunConfig, opts: MultiOptions | None, results_dir: Path, run_id: str | None,
               quiet: bool, extra_meta: dict[str, object] | None = None) -> Path:
    """One run with the live progress display, then its summary (both silenced by ``quiet``)."""
    console = Console(stderr=False, quiet=quiet)
    observer = progress_observer(console, quiet)
    try:
        if opts is not None:
            from perfkit.trainer.multi import run_multi

            path = run_multi(cfg, opts, results_dir, observer, run_id=run_id, extra_meta=extra_meta)
        else:
            from perfkit.trainer.single import run_single

            path = run_single(cfg, results_dir, observer, run_id=run_id)
    finally:
        if hasattr(observer, "close"):
            observer.close()
    if not quiet:
        print_summary(console, path)
    return path


def _no_multi_flags(**given: object) -> None:
    used = [name for name, value in given.items() if value is not None]
    if used:
        raise UsageError(f"--{used[0].replace('_', '-')}: only with --mode multi or ps")


def ps_config(cfg: RunConfig, profile_steps: str, max_restarts: int) -> RunConfig:
    """ParameterServerStrategy's run config: no trace window (every worker's steps are timed in the step's
    graph instead, trainer/ps.py) and no restarts (the chief cannot resume from a backup)."""
    if profile_steps not in ("auto", "off"):
        raise UsageError("--profile-steps: --mode ps records no trace window (each worker times its own steps); "
                         "leave it at auto or pass --no-profile")
    if max_restarts:
        raise UsageError("--max-restarts: --mode ps does not restart a cluster (TF's chief cannot resume from a "
                         "backup); leave it at 0")
    return replace(cfg, profile_steps="off")


def multi_options(workers: int | None, cluster: Path | None, host: str | None, task_index: int | None,
                   emulate: bool, pin: bool, connect_timeout: float, max_restarts: int,
                   cluster_from: str | None = None, base_port: int | None = None, mode: Mode = Mode.multi,
                   ps: int | None = None, workers_only: bool = False) -> MultiOptions:
    """The cluster of a multi or ps run, checked against the strategy; ``workers_only``: a ps cluster file's
    hosts without their parameter servers and chief (compare's synchronous run on the same file)."""
    from perfkit.cluster import check_mode
    from perfkit.trainer.cpubudget import available_cores

    if mode is Mode.ps and cluster_from is not None:
        raise UsageError("--cluster-from: --mode ps takes its cluster from --workers/--ps or --cluster FILE")
    if mode is Mode.ps and cluster is not None and ps is not None:
        raise UsageError("--ps: not with --cluster (each host's ps = K in the file says where they run)")
    if ps is not None and ps < 1:
        raise UsageError("--ps: must be at least 1")
    opts = _cluster_options(workers, cluster, host, task_index, emulate, pin, connect_timeout, max_restarts,
                            cluster_from, base_port, (ps or 1) if mode is Mode.ps else 0, workers_only)
    check_mode(opts.cluster, mode.value, cores=float(len(available_cores())) if opts.emulate else None)
    return opts


def _cluster_options(workers: int | None, cluster: Path | None, host: str | None, task_index: int | None,
                     emulate: bool, pin: bool, connect_timeout: float, max_restarts: int,
                     cluster_from: str | None, base_port: int | None, ps: int,
                     workers_only: bool = False) -> MultiOptions:
    import os

    from perfkit import schedulers
    from perfkit.cluster import load_cluster, local_cluster
    from perfkit.trainer.cpubudget import available_cores
    from perfkit.trainer.multi import MultiOptions, select_local

    if cluster_from is None and workers is None and cluster is None and schedulers.detect(os.environ):
        cluster_from = "auto"  # under srun or a TF_CONFIG-setting scheduler, with no cluster named
    if cluster_from is not None:
        if workers is not None or cluster is not None or host is not None or task_index is not None or emulate:
            raise UsageError("--cluster-from: not with --workers/--cluster/--host/--task-index/--emulate (the "
                             "scheduler gives the cluster and this task)")
        task = schedulers.from_environment(cluster_from, os.environ, float(len(available_cores())),
                                           base_port or schedulers.DEFAULT_BASE_PORT)
        return MultiOptions(task.cluster, (task.index,), f"w{task.index}", False, pin, connect_timeout, max_restarts,
                            scheduler=task)
    if base_port is not None:
        raise UsageError("--base-port: only with --cluster-from slurm")
    if (workers is None) == (cluster is None):
        raise UsageError(f"--mode {'ps' if ps else 'multi'}: give either --workers N or --cluster FILE (or "
                         f"--cluster-from under a scheduler)")
    if connect_timeout <= 0:
        raise UsageError("--connect-timeout: must be > 0 seconds")
    if max_restarts < 0:
        raise UsageError("--max-restarts: must be >= 0")
    if cluster is None:
        if host is not None or task_index is not None or emulate:
            raise UsageError("--host/--task-index/--emulate: only with --cluster FILE")
        spec = local_cluster(int(workers or 0), float(len(available_cores())), ps=ps)
        return MultiOptions(spec, tuple(t.index for t in spec.tasks), None, False, pin, connect_timeout,
                            max_restarts)
    spec = load_cluster(cluster)
    spec = spec.workers_only() if workers_only else spec
    local, part = select_local(spec, host, task_index)
    emulated = emulate or (part is None and spec.is_local())
    return MultiOptions(spec, local, part, emulated, pin, connect_timeout, max_restarts)


def progress_observer(console: Console, quiet: bool):  # type: ignore[no-untyped-def]
    from perfkit.cli._render import ProgressObserver, WarningsOnly

    return WarningsOnly() if quiet else ProgressObserver(console)


def print_summary(console: Console, path: Path) -> None:
    from perfkit.analysis.summary import epoch_table, summarize, worker_table
    from perfkit.cli._render import summary_table, trace_lines, worker_lines
    from perfkit.results import RunRecord

    record = RunRecord.load(path)
    if record.steps.empty:  # a launched command that does not use perfkit.record
        console.print(f"no steps recorded (the command does not use perfkit.record): only CPU, memory and "
                      f"exit status\nrun directory: {path}")
        return
    console.print(summary_table(summarize(record), epoch_table(record)))
    workers = worker_table(record)
    if len(workers) > 1:
        console.print(worker_lines(workers))
    for line in trace_lines(record.run.profile or None, path):
        console.print(line)
    console.print(f"run directory: {path}")
