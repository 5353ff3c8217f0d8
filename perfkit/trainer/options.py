"""A run's options from what the user gave (flags, a cluster file, a scheduler's environment), checked
before anything starts: the library's side of ``perfkit run``, ``launch`` and ``compare``, so that every
command validates the same way and the CLI only parses. ``train`` runs one configuration.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfkit import schedulers
from perfkit._tf import check_supported
from perfkit.cluster import UNKNOWN_CORES, ClusterSpec, check_mode, load_cluster, local_cluster
from perfkit.config import KNOB_FLAGS, Knobs, Mode, RunConfig
from perfkit.errors import UsageError
from perfkit.events import Observer
from perfkit.profiler.tracewindow import check_spec
from perfkit.trainer.command import LaunchOptions, UserCommand
from perfkit.trainer.hosts.cpubudget import available_cores
from perfkit.trainer.multi import MultiOptions, run_multi, select_local
from perfkit.trainer.single import run_single

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class ClusterFlags:
    """Where a run's workers run and how they are watched, as the user gave it (``perfkit run`` and ``launch``;
    ``compare`` and ``sweep`` fill in theirs): checked by ``for_mode``, ``launch_options`` and ``multi_options``
    against the mode. The defaults are the commands' own."""

    workers: int | None = None
    cluster: Path | None = None
    host: str | None = None  # this host's part of --cluster
    task_index: int | None = None  # this worker of --cluster
    emulate: bool = False
    pin: bool = True
    connect_timeout: float = 120.0
    hang_timeout: str = "auto"
    max_restarts: int = 0
    cluster_from: str | None = None
    base_port: int | None = None
    ps: int | None = None
    allow_unenforced: bool = False


@dataclass(frozen=True)
class RecordFlags:
    """How ``perfkit launch`` records a command: its trace window, CPU sampling, label and start-up hook."""

    profile_steps: str = "auto"
    sample_interval: float = 0.5
    label: str | None = None
    auto_record: bool = True
    step_function: str | None = None


def train(cfg: RunConfig, opts: MultiOptions | None, results_dir: Path, observer: Observer, run_id: str | None = None,
          extra_meta: dict[str, object] | None = None) -> Path:
    """One run: in this process (``opts`` None: single mode) or on a cluster of worker processes."""
    if opts is not None:
        return run_multi(cfg, opts, results_dir, observer, run_id=run_id, extra_meta=extra_meta)
    return run_single(cfg, results_dir, observer, run_id=run_id, extra_meta=extra_meta)


def for_mode(cfg: RunConfig, mode: Mode, flags: ClusterFlags) -> tuple[RunConfig, MultiOptions | None]:
    """``perfkit run``'s configuration and cluster for ``mode`` (no cluster in single mode), every flag
    checked against the mode."""
    check_supported()
    cfg.knobs.check_mode(mode.value)  # a knob this strategy has no such setting for: said, not ignored
    check_knobs(cfg.knobs, [mode.value])
    if mode is not Mode.ps and flags.ps is not None:
        raise UsageError("--ps: only with --mode ps")
    if mode is Mode.ps:
        cfg = ps_config(cfg, cfg.profile_steps, flags.max_restarts)
    if mode is Mode.single:
        no_multi_flags(workers=flags.workers, cluster=flags.cluster, host=flags.host, task_index=flags.task_index,
                       allow_unenforced=flags.allow_unenforced or None, cluster_from=flags.cluster_from,
                       base_port=flags.base_port)
        return cfg, None
    return cfg, supervised(multi_options(flags, mode), flags.hang_timeout, flags.allow_unenforced)


def check_knobs(knobs: Knobs, modes: list[str]) -> None:
    """What the knobs need of this machine, checked before anything runs: NCCL all-reduce needs GPUs
    (counted without importing TensorFlow: ``perfkit.machine.nvidia_gpus``)."""
    from perfkit.machine import nvidia_gpus

    if knobs.all_reduce == "nccl" and "multi" in modes and nvidia_gpus() == 0:
        raise UsageError(f"{KNOB_FLAGS['all_reduce']}: nccl needs NVIDIA GPUs and this machine shows none "
                         f"(/proc/driver/nvidia/gpus, /dev/nvidia*, CUDA_VISIBLE_DEVICES); use ring or auto")


def knobs_for_modes(knobs: Knobs, modes: list[str]) -> dict[str, tuple[Knobs, dict[str, Any]]]:
    """``perfkit compare``: each mode's knobs (those its strategy has no setting for back at their defaults)
    and what its run.json records of the rest (``knobs_not_applied``), so that one set of flags serves
    every run of the comparison."""
    check_knobs(knobs, modes)
    out: dict[str, tuple[Knobs, dict[str, Any]]] = {}
    for m in modes:
        dropped = knobs.not_applied(m)
        meta = {"knobs_not_applied": {"knobs": dropped, "reason": f"--mode {m} has no such setting; "
                                      f"compare applied them to the runs that have"}} if dropped else {}
        out[m] = (knobs.for_mode(m), meta)
    return out


def supervised(opts: MultiOptions, hang_timeout: str, allow_unenforced: bool) -> MultiOptions:
    return replace(opts, hang_timeout=parse_hang_timeout(hang_timeout), allow_unenforced=allow_unenforced)


def parse_hang_timeout(value: str) -> float | None:
    """``--hang-timeout``: ``auto`` (None: derived from the run's own steps, trainer/hang.py) or seconds > 0."""
    if str(value).strip().lower() == "auto":
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise UsageError(f"--hang-timeout: {value!r} is not 'auto' or a number of seconds > 0")
    return seconds


def launch_options(command: list[str], mode: Mode, flags: ClusterFlags, record: RecordFlags,
                   cluster_spec: ClusterSpec | None = None,
                   env: tuple[tuple[str, str], ...] = ()) -> tuple[LaunchOptions, MultiOptions]:
    """``perfkit launch``'s options: the command (its program found now), and the workers it runs as: all of
    them, or with ``flags.host`` / ``flags.task_index`` this host's part of ``flags.cluster`` (or of
    ``cluster_spec``, the cluster a launching host sent over SSH)."""
    check_supported()
    check_launch_flags(mode, record.sample_interval, record.auto_record, record.step_function)
    f = flags
    if mode is not Mode.ps and f.ps is not None:
        raise UsageError("--ps: only with --mode ps")
    profile_steps = ps_profile_steps(record.profile_steps, f.max_restarts) if mode is Mode.ps else record.profile_steps
    if mode is not Mode.single and cluster_spec is not None:
        local, part = select_local(cluster_spec, f.host, f.task_index)
        opts = MultiOptions(cluster_spec, local, part, False, f.pin, f.connect_timeout, f.max_restarts)
    elif mode is not Mode.single:
        opts = multi_options(f, mode)
    else:
        if f.workers not in (None, 1) or f.cluster is not None or f.emulate or f.cluster_from is not None:
            raise UsageError("--workers/--cluster/--emulate/--cluster-from: only with --mode multi or ps")
        no_multi_flags(host=f.host, task_index=f.task_index)
        opts = multi_options(ClusterFlags(workers=1, pin=f.pin, connect_timeout=f.connect_timeout,
                                          max_restarts=f.max_restarts))
    passed_on = opts.scheduler.tf_config if opts.scheduler is not None else None
    user = UserCommand.checked(command, mode is not Mode.single, passed_on, record.auto_record, record.step_function,
                               env)
    lopts = LaunchOptions(user, mode, check_spec(profile_steps), sample_interval=record.sample_interval,
                          label=record.label)
    return lopts, supervised(opts, f.hang_timeout, f.allow_unenforced)


def check_launch_flags(mode: Mode, sample_interval: float, auto_record: bool, step_function: str | None) -> None:
    """The flags of ``perfkit launch`` that mean the same wherever the command runs."""
    if not 0.05 <= sample_interval <= 60:
        raise UsageError("--sample-interval: must be between 0.05 and 60 seconds")
    if step_function is not None and not _IDENTIFIER.fullmatch(step_function):
        raise UsageError(f"--step-function: {step_function!r} is not a function name (e.g. train_step or "
                         f"Trainer.train_step)")
    if step_function is not None and not auto_record:
        raise UsageError("--step-function: names the step for perfkit's start-up hook, which --no-auto-record "
                         "turns off; give one or the other")


def no_multi_flags(**given: object) -> None:
    used = [name for name, value in given.items() if value is not None]
    if used:
        raise UsageError(f"--{used[0].replace('_', '-')}: only with --mode multi or ps")


def ps_config(cfg: RunConfig, profile_steps: str, max_restarts: int) -> RunConfig:
    """ParameterServerStrategy's run config: no trace window (every worker's steps are timed in the step's
    graph instead, trainer/worker/ps.py) and no restarts (the chief cannot resume from a backup)."""
    return replace(cfg, profile_steps=ps_profile_steps(profile_steps, max_restarts))


def ps_profile_steps(profile_steps: str, max_restarts: int) -> str:
    """``--mode ps`` (run and launch): no trace window, since each worker's steps are timed apart from a
    trace (perfkit's workers in the step's graph, a script's where TensorFlow's coordinator runs them), and
    no restarts (TF's chief cannot resume from a backup)."""
    if profile_steps not in ("auto", "off"):
        raise UsageError("--profile-steps: --mode ps records no trace window (each worker's steps are timed "
                         "without one); leave it at auto or pass --no-profile")
    if max_restarts:
        raise UsageError("--max-restarts: --mode ps does not restart a cluster (TF's chief cannot resume from a "
                         "backup); leave it at 0")
    return "off"


def multi_options(flags: ClusterFlags, mode: Mode = Mode.multi, workers_only: bool = False) -> MultiOptions:
    """The cluster of a multi or ps run, checked against the strategy; ``workers_only``: a ps cluster file's
    hosts without their parameter servers and chief (compare's synchronous run on the same file)."""
    if mode is Mode.ps and flags.cluster is not None and flags.ps is not None:
        raise UsageError("--ps: not with --cluster (each host's ps = K in the file says where they run)")
    if flags.ps is not None and flags.ps < 1:
        raise UsageError("--ps: must be at least 1")
    opts = _cluster_options(flags, (flags.ps or 1) if mode is Mode.ps else 0, workers_only)
    check_mode(opts.cluster, mode.value, cores=float(len(available_cores())) if opts.emulate else None)
    return opts


def _cluster_options(flags: ClusterFlags, ps: int, workers_only: bool = False) -> MultiOptions:
    workers, cluster, host, task_index, emulate = flags.workers, flags.cluster, flags.host, flags.task_index, \
        flags.emulate
    pin, connect_timeout, max_restarts = flags.pin, flags.connect_timeout, flags.max_restarts
    cluster_from, base_port = flags.cluster_from, flags.base_port
    if cluster_from is None and workers is None and cluster is None and schedulers.detect(os.environ):
        cluster_from = "auto"  # under srun or a TF_CONFIG-setting scheduler, with no cluster named
    if cluster_from is not None:
        if workers is not None or cluster is not None or host is not None or task_index is not None or emulate:
            raise UsageError("--cluster-from: not with --workers/--cluster/--host/--task-index/--emulate (the "
                             "scheduler gives the cluster and this task)")
        task = schedulers.from_environment(cluster_from, os.environ, float(len(available_cores())),
                                           base_port or schedulers.DEFAULT_BASE_PORT, ps)
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
    if any(h.cores == UNKNOWN_CORES for h in spec.hosts):  # ssh hosts started by hand: as many cores as this one
        spec = ClusterSpec(tuple(replace(h, cores=h.cores or float(len(available_cores()))) for h in spec.hosts),
                           spec.source)
    local, part = select_local(spec, host, task_index)
    emulated = emulate or (part is None and spec.is_local())
    return MultiOptions(spec, local, part, emulated, pin, connect_timeout, max_restarts)


def parse_modes(text: str) -> list[str]:
    """``single,multi,ps`` -> the modes in run order, single first; a one-line error for anything else."""
    given = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in given if m not in ("single", "multi", "ps")]
    if bad or "single" not in given or len(given) < 2 or len(set(given)) < len(given):
        raise UsageError(f"--modes: {text!r} must list single (the baseline) and at least one of multi, ps, each "
                         f"once, comma-separated (e.g. single,multi,ps)")
    return [m for m in ("single", "multi", "ps") if m in given]


def compare_clusters(cfgs: dict[str, RunConfig], workers: int | None, cluster: Path | None, ps: int | None, pin: bool,
                  connect_timeout: float, allow_unenforced: bool) -> dict[str, MultiOptions]:
    """The cluster options of each non-baseline mode, checked before anything runs. One cluster file serves
    both: multi runs its hosts' workers only, ps also their parameter servers and the chief."""
    if ps is not None and "ps" not in cfgs:
        raise UsageError("--ps: only with ps in --modes")
    n = workers if cluster is None and workers is not None else (None if cluster else 2)
    out: dict[str, MultiOptions] = {}
    for m in ("multi", "ps"):
        if m not in cfgs:
            continue
        o = multi_options(ClusterFlags(workers=n, cluster=cluster, pin=pin, connect_timeout=connect_timeout,
                                       ps=ps if m == "ps" else None), Mode(m), workers_only=m == "multi")
        if m == "multi" and cfgs[m].batch_size % o.cluster.num_workers:
            raise UsageError(f"--workers: the global batch {cfgs[m].batch_size} does not divide among "
                             f"{o.cluster.num_workers} workers")
        out[m] = replace(o, allow_unenforced=allow_unenforced)
    return out


def verification(analysis: Any, run: Path, cfg: RunConfig, opts: MultiOptions, what: str
                 ) -> tuple[RunConfig, MultiOptions, dict[str, Any]]:
    """The configuration that realises ``run``'s what-if (same data and workload): the equal-workers budgets,
    or the proposed workers per host at the budgets the run had; its cluster file is written into ``run``."""
    from perfkit._atomic import atomic_write
    from perfkit.analysis.cpu import requested_budgets
    from perfkit.analysis.verify import (
        equal_cluster_toml,
        placement_cluster_toml,
        prediction,
        proposed_workers,
        verification_window_of,
    )
    from perfkit.analysis.whatif import budgets_text, parse_budgets
    from perfkit.results import load_meta

    row = next(analysis.runs[analysis.runs["run_id"] == run.name].itertuples(index=False))
    meta, cores = load_meta(run), float(len(available_cores()))
    if what == "placement":
        if row.placement_epoch_s != row.placement_epoch_s:  # NaN: the proposal moves nobody
            raise UsageError(f"--verify: the placement what-if of {run.name} proposes the placement it ran with "
                             f"({row.placement_now} on {row.placement_hosts}): nothing to run")
        applied = requested_budgets(meta)  # as the run asked: the verification applies them the same way
        text = placement_cluster_toml(meta, applied, proposed_workers(row), cores)
        pred, name = prediction(row, what, budgets_text(applied)), "verify-placement.toml"
    else:
        if row.equal_epoch_s != row.equal_epoch_s:  # NaN
            raise UsageError(f"--verify: {run.name} has no equal-workers what-if to verify ({row.split_note})")
        if not isinstance(row.equal_budgets, str) or not row.equal_budgets:
            raise UsageError(f"--verify: {run.name} ran on one host: no per-host budgets realise equal workers")
        text = equal_cluster_toml(meta, parse_budgets(row.equal_budgets), cores)
        pred, name = prediction(row), "verify-cluster.toml"
    path = run / name
    atomic_write(path, lambda f: f.write(text.encode()))
    verify_opts = replace(opts, cluster=load_cluster(path))
    suffix = "verify-placement" if what == "placement" else "verify"
    window = verification_window_of(run)
    return (replace(cfg, label=f"{cfg.label}-{suffix}" if cfg.label else suffix, profile_steps=window),
            verify_opts, {"verifies": pred})
