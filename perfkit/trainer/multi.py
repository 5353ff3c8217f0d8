"""Multi mode entry: check everything before starting, lay out the run, launch, record how it ended.

Three uses, one code path: ``--workers N`` (a local cluster on 127.0.0.1), ``--cluster FILE`` with
every address local or ``--emulate`` (unequal hosts emulated with CPU budgets), and ``--cluster FILE
--host NAME`` / ``--task-index I`` on each real host, all with the same ``--run-id``. A host's part of a
run lands in ``<run-id>--<host>`` so parts copied from several hosts sit side by side.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfkit._atomic import DISK_REASONS, disk_refuses, is_disk_error, write_error
from perfkit._started import begin_run
from perfkit.cluster import ClusterSpec
from perfkit.config import RunConfig, sanitize_id
from perfkit.errors import UsageError
from perfkit.events import NullObserver, Observer
from perfkit.machine import command_started_ns, hostname, machine_info, versions
from perfkit.profiler.sampler import Sampler, Target
from perfkit.profiler.tracewindow import finish_traces
from perfkit.results import RUN_FILE, RunDir, new_run_id
from perfkit.runmeta import ClusterRecord, RunMeta, fit_plan
from perfkit.trainer.faultnaming import Failure
from perfkit.trainer.forkserver import WorkerStart, start_fork_server
from perfkit.trainer.hosts.hostenv import HostEnv
from perfkit.trainer.processes import Launcher, write_launch_file
from perfkit.trainer.supervise import raise_for, supervise

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MultiOptions:
    cluster: ClusterSpec
    local_workers: tuple[int, ...]  # indices started on this machine
    part: str | None = None  # host name (or w<i>) when this machine runs only part of the cluster
    emulate: bool = False
    pin: bool = True
    connect_timeout: float = 120.0
    max_restarts: int = 0
    hang_timeout: float | None = None  # None: derived from the run's own steps (trainer/hang.py)
    allow_unenforced: bool = False
    scheduler: Any = None  # perfkit.schedulers.Task when a scheduler (Slurm, TF_CONFIG) gave the cluster


def select_local(cluster: ClusterSpec, host: str | None, task_index: int | None) -> tuple[tuple[int, ...], str | None]:
    if host is not None and task_index is not None:
        raise UsageError("--host and --task-index: give one of them, not both")
    tasks = cluster.tasks
    if task_index is not None:
        if not 0 <= task_index < len(tasks):
            what = "task (worker, ps, chief)" if cluster.is_ps else "worker"
            raise UsageError(f"--task-index: {task_index} is not a {what} index 0..{len(tasks) - 1}")
        return (task_index,), f"w{task_index}"
    if host is not None:
        cluster.host(host)  # unknown host -> one-line error listing the hosts
        return tuple(t.index for t in tasks if t.host == host), host
    return tuple(t.index for t in tasks), None


def run_multi(cfg: RunConfig, opts: MultiOptions, results_dir: str | Path, observer: Observer | None = None,
              run_id: str | None = None, extra_meta: dict[str, Any] | None = None) -> Path:
    """One multi-worker run; ``extra_meta`` goes into run.json as given (e.g. what a verification checks)."""
    observer = observer or NullObserver()
    n = opts.cluster.num_workers
    begin_run()  # its "command to first step" counts from here when the command ran a run before
    if cfg.mode.value == "ps":
        n = 1  # each step is one worker's step on the whole global batch
    elif cfg.batch_size % n:
        raise UsageError(f"--batch-size: the global batch {cfg.batch_size} does not divide among {n} workers")
    results_dir = Path(results_dir)
    rid = run_dir_id(run_id, opts, cfg.mode.value, cfg.label)
    dir_name = f"{rid}--{sanitize_id(opts.part)}" if opts.part else rid
    RunDir.path_for(results_dir, dir_name)
    # TensorFlow's import, once for every local worker, goes on while the data and the hosts are prepared.
    forks = start_fork_server(results_dir / f".{dir_name}.forkserver.log")
    if forks.server is None and forks.why.startswith("no fork server"):
        observer.warning(f"each worker imports TensorFlow itself: {forks.why}")
    try:
        observer.phase("preparing data")
        data_info = _ensure_data(cfg, results_dir / "datasets", n)
        env = HostEnv.setup(opts.cluster, opts.local_workers, opts.part, opts.emulate, opts.pin,
                            opts.allow_unenforced, dir_name, defer_budgets=True)  # (docs/multi-worker.md)
    except BaseException:
        forks.close()
        raise
    try:
        warn_setup(env, observer)
        run = RunDir.create(results_dir, dir_name, _meta(cfg, opts, env, rid, data_info).changed(**(extra_meta or {})))
        forks.move_log(run.path / "forkserver.log")
        observer.run_opened(run.path)
        # Temporary folders, removed on every exit path (by the janitor, so even after a SIGKILL).
        env.janitor.register("glob", run.path / "tensorboard" / ".capture-*")
        env.janitor.register("dir", run.path / "backup")
        env.janitor.register("run", run.path)  # marked interrupted by the janitor if this process dies
        return _launch(cfg, opts, run, env, observer, results_dir, forks)
    finally:
        forks.close()
        for line in env.close():
            observer.warning(f"could not remove {line}")


def run_dir_id(run_id: str | None, opts: MultiOptions, mode: str, label: str | None) -> str:
    """The run id: the user's, else the scheduler's job id (every task the same), else a new one."""
    if run_id:
        return sanitize_id(run_id)
    if opts.scheduler is not None and opts.scheduler.run_id:
        return opts.scheduler.run_id
    return new_run_id(mode, label)


def warn_setup(env: HostEnv, observer: Observer) -> None:
    if env.sandbox.mechanism == "none":
        observer.warning(f"TensorFlow's worker servers listen on every interface of this machine: no private "
                         f"network for them ({env.sandbox.reason})")
    if env.unenforced:
        observer.warning(f"CPU budgets not enforced (--allow-unenforced): {env.unenforced}")


@dataclass(frozen=True)
class Supervision:
    """How a run's local workers are started and watched: the same for perfkit's workers and a user's command."""

    payload: Callable[[int, str | None], dict[str, Any]]  # launch.json of an attempt, given its trace window
    sample_interval: float
    profile_spec: str
    recover_profiler: bool = False
    profile_retries: int = 0
    spawn: Any = None  # None: perfkit's own worker (launcher.PerfkitWorker)
    forks: WorkerStart | None = None  # how perfkit's own workers start: forked with TensorFlow imported, or not


def _launch(cfg: RunConfig, opts: MultiOptions, run: RunDir, env: HostEnv, observer: Observer,
            results_dir: Path, forks: WorkerStart) -> Path:
    def payload(attempt: int, profile_spec: str | None) -> dict[str, Any]:
        config = {**cfg.to_dict(), "profile_steps": profile_spec or cfg.profile_steps}
        # A backup also lets a cluster resume after TF's profiler crashed a worker (see supervise).
        # (ParameterServerStrategy: restarts are not supported and it records no trace window.)
        backup = cfg.mode.value == "multi" and (opts.max_restarts > 0 or cfg.profile_steps != "off")
        return {"run_id": run.meta.run_id, "config": config, "cluster": env.cluster.to_dict(),
                "cache_dir": str(results_dir / "datasets"), "connect_timeout": opts.connect_timeout,
                "launcher_pid": os.getpid(), "attempt": attempt,
                "backup_dir": str(run.path / "backup") if backup else None,
                "workers": placements_payload(env)}

    # One host of a cluster cannot restart its workers alone.
    supervise_run(run, env, opts, observer, Supervision(
        payload, cfg.sample_interval, cfg.profile_steps,
        recover_profiler=cfg.profile_steps != "off" and opts.part is None, profile_retries=cfg.profile_retries,
        forks=forks))
    return run.path


def placements_payload(env: HostEnv) -> dict[str, dict[str, Any]]:
    return {str(p.index): {"host": p.host, "threads": p.threads, "cores": p.cores} for p in env.placements}


def supervise_run(run: RunDir, env: HostEnv, opts: MultiOptions, observer: Observer, sup: Supervision) -> None:
    """Start, watch and (re)start the local workers until the run ends, then record how it ended; raises
    RunFailed / RunInterrupted when it did not complete."""
    sampler = Sampler(sup.sample_interval, [Target(os.getpid(), -1, "launcher", hostname())])
    launcher = Launcher(run, env.cluster, env.placements, env, sampler, observer, opts.connect_timeout,
                        opts.hang_timeout, sup.spawn, sup.forks.server if sup.forks else None)
    sampler.start()
    failure, restarts = None, []
    try:
        failure, restarts = supervise(launcher, opts.max_restarts,
                                      lambda attempt, spec=None: write_launch_file(run, sup.payload(attempt, spec)),
                                      recover_profiler=sup.recover_profiler, profile_retries=sup.profile_retries)
    except KeyboardInterrupt:  # between two waits, e.g. while workers were being started
        launcher.interrupt()
        failure = Failure("interrupted", "interrupted (Ctrl-C, SIGTERM or SIGHUP)", {})
    except OSError as exc:  # the results disk full or read-only: the launcher's own writes (launch.json, logs)
        failure = Failure("failed", write_error(exc), {"disk": write_error(exc)}) if is_disk_error(exc) else \
            _launcher_error(exc)
    except Exception as exc:  # noqa: BLE001 - recorded in run.json, then reported as a failed run
        failure = _launcher_error(exc)
    finally:
        launcher.stop()
        for note in launcher.end_notes():
            observer.warning(note)
        try:
            observer.training_finished()
        except OSError as exc:  # a closed terminal (SIGHUP): the run must still be recorded
            log.warning("could not show the end of training: %s", exc)
        failure = _finish(run, sup.profile_spec, env, launcher, sampler, failure, restarts,
                          sup.forks.record() if sup.forks else None)
    raise_for(failure, run)


def _launcher_error(exc: Exception) -> Failure:
    log.exception("launcher failed")
    return Failure("failed", f"launcher error: {type(exc).__name__}: {exc}", {})


def _finish(run: RunDir, profile_spec: str, env: HostEnv, launcher: Launcher, sampler: Sampler,
            failure: Failure | None, restarts: list[dict[str, Any]],
            start: dict[str, Any] | None = None) -> Failure | None:
    """Record how the run ended; the failure to report, which is a full or read-only results disk when the
    run's own tables or run.json could not be written (nothing half-written: every write is atomic)."""
    sampled = sampler.stop()
    refused = disk_refuses(run.path) if failure is not None else None  # before the space below is freed
    if refused:  # a worker on a full disk dies unable to write why: the disk says it
        failure = _disk_failure(failure, f"the results disk of {run.path} refuses writes: {refused}", {})
    # Temporary folders go first: their space lets run.json be written on a full disk.
    for leftover in [*(run.path / "tensorboard").glob(".capture-*"), run.path / "backup"]:
        shutil.rmtree(leftover, ignore_errors=True)
    run.release_reserve()
    lost = []
    for name, frame in (("cpu.parquet", sampled.cpu), ("system.parquet", sampled.system)):
        try:
            run.write_frame(name, frame)
        except OSError as exc:
            lost.append(write_error(exc, run.path / name))
    if lost:
        failure = _disk_failure(failure, lost[0], {"not_written": lost})
    status = "complete" if failure is None else failure.status
    records = launcher.worker_records()
    plan = fit_plan(records)  # perfkit's own workers say their fit's plan, as single mode does
    try:
        run.finish(status, failure.message if failure else None, sampler=sampled.stats, restarts=restarts,
                   failure=failure.details if failure else None, workers=records, **({"plan": plan} if plan else {}),
                   **({"worker_start": start} if start else {}),
                   cluster=replace(run.meta.cluster, cpu_budget=env.budget_meta()))
    except OSError as exc:
        return _unrecorded(run, failure, exc)
    finish_traces(run, profile_spec, _captures([w.to_dict() for w in records], restarts))
    return failure


def _unrecorded(run: RunDir, failure: Failure | None, exc: OSError) -> Failure:
    """run.json could not say how the run ended: the report says so, with the run's own failure."""
    text = f"{write_error(exc, run.path / RUN_FILE)}, so it still says 'running'"
    if failure is not None and any(r in failure.message for r in DISK_REASONS):
        text = f"{run.path / RUN_FILE} could not be written either, so it still says 'running'"
        return Failure("failed", f"{failure.message}; {text}", {**failure.details, "run_file": text})
    return _disk_failure(failure, text, {"run_file": text})


def _disk_failure(failure: Failure | None, text: str, details: dict[str, Any]) -> Failure:
    """The run failed of its results disk: said once, even when a worker already said it."""
    if failure is None:
        return Failure("failed", text, {"disk": text, **details})
    said = failure.details.get("disk") or any(r in failure.message for r in DISK_REASONS)
    return Failure("failed", failure.message if said else f"{failure.message}; {text}",
                   {**failure.details, "disk": failure.details.get("disk") or text, **details})


def _captures(workers: list[dict[str, Any]], restarts: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each worker's capture from the last attempt that traced, with the outcome of every earlier traced
    attempt under ``attempts``. A capture a worker finished in an attempt that TF's profiler crashed on
    another worker is lost with that attempt: the workers' traces must come from the same steps."""
    history: dict[str, list[dict[str, Any]]] = {}
    for r in restarts:
        for k, entry in (r.get("profiles") or {}).items():
            if entry and entry.get("status") not in ("skipped", "pending"):
                history.setdefault(k, []).append(_lost(entry, r) if r.get("profiler_crash") else dict(entry))
    for w in workers:
        entry = w.get("profile")
        if entry and (entry.get("status") not in ("skipped", "pending") or str(w["index"]) not in history):
            history.setdefault(str(w["index"]), []).append(dict(entry))
    out = {}
    for k, entries in history.items():
        last = dict(entries[-1])
        earlier = [{f: e.get(f) for f in ("attempt", "status", "error", "window")} for e in entries[:-1]]
        out[k] = {**last, "attempts": earlier + list(last.get("attempts") or [])} if earlier else last
    return out


def _lost(entry: dict[str, Any], restart: dict[str, Any]) -> dict[str, Any]:
    crash = f"TensorFlow's profiler crashed a worker: {restart['after']}"
    if entry.get("status") == "captured":
        return {**entry, "status": "crashed", "error": f"captured, but lost with its attempt ({crash})"}
    return {**entry, "status": "crashed", "error": f"{crash}; the cluster resumed from the last completed epoch"}


def _ensure_data(cfg: RunConfig, cache_dir: Path, num_workers: int) -> dict[str, Any]:
    """The workload's data made (or the user's file checked) once, before any worker starts reading it; a
    user's workload is tried first (model, datasets) so that a fault is one line, not a failed cluster."""
    from perfkit.workloads import info, preflight, prepare_workload, resolve

    workload = resolve(cfg)
    data = prepare_workload(workload, cfg.workload, cache_dir, trains_here=False)
    preflight(workload, cfg, num_workers)
    return {"data": data, "workload": info(cfg.workload, workload).to_dict()}


def _meta(cfg: RunConfig, opts: MultiOptions, env: HostEnv, run_id: str, data_info: dict[str, Any]) -> RunMeta:
    return RunMeta.new(
        run_id, mode=cfg.mode.value, preset=cfg.preset,
        strategy="ParameterServerStrategy" if cfg.mode.value == "ps" else "MultiWorkerMirroredStrategy",
        config=cfg.to_dict(), **data_info, **placement_meta(opts, env))


def placement_meta(opts: MultiOptions, env: HostEnv) -> dict[str, Any]:
    """run.json's account of where the workers ran (``RunMeta.changed``'s values): part, cluster, budgets,
    network, machine."""
    return {
        "part": {"name": opts.part, "workers": list(opts.local_workers)} if opts.part else None,
        "scheduler": opts.scheduler.source if opts.scheduler is not None else None,
        "cluster": ClusterRecord.of(env.cluster.to_dict(), num_workers=env.cluster.num_workers,
                                    local_workers=opts.local_workers, emulated=opts.emulate, pinned=opts.pin,
                                    declared=opts.cluster.to_dict() if env.cluster != opts.cluster else None,
                                    cpu_budget=env.budget_meta()),
        "network": env.sandbox.to_dict(),
        "versions": versions(), "machine": machine_info(), "command_started_wall_ns": command_started_ns(),
        "clock_anchor": {"wall_ns": time.time_ns(), "mono_ns": time.monotonic_ns()},
    }
