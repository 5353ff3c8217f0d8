"""Single mode: MirroredStrategy in this process, wrapped by the CPU sampler and the step recorder.

The run directory is created only once the input data is known to be good, so a bad ``--data`` file
leaves nothing behind; from then on whatever happens (failure, Ctrl-C) the records made so far are
saved and run.json says how the run ended.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfkit._started import begin_run
from perfkit.config import RunConfig, sanitize_id
from perfkit.errors import PerfkitError, RunFailed, RunInterrupted
from perfkit.events import NullObserver, Observer, Tee
from perfkit.machine import command_started_ns, hostname, machine_info, versions
from perfkit.profiler.sampler import Sampler, SamplerResult, Target
from perfkit.profiler.steps import StepLog
from perfkit.profiler.tracewindow import CaptureTarget, finish_traces
from perfkit.results import RunDir, new_run_id
from perfkit.runmeta import ClusterRecord, RunMeta, WorkerRecord
from perfkit.trainer.worker.heartbeat import Heartbeat
from perfkit.trainer.worker.part import Status, StatusObserver, announce
from perfkit.workloads import WorkloadInfo, info, preflight, prepare_workload, resolve

log = logging.getLogger(__name__)


def run_single(cfg: RunConfig, results_dir: str | Path, observer: Observer | None = None,
               run_id: str | None = None, extra_meta: dict[str, Any] | None = None) -> Path:
    """Train once with MirroredStrategy and record it; returns the run directory. ``extra_meta`` goes into
    run.json as given (e.g. the knobs a comparison did not apply to this mode)."""
    observer = observer or NullObserver()
    begin_run()  # its "command to first step" counts from here when the command ran a run before
    results_dir = Path(results_dir)
    rid = sanitize_id(run_id) if run_id else new_run_id(cfg.mode.value, cfg.label)
    RunDir.path_for(results_dir, rid)  # a taken run id fails now, before minutes of data preparation
    observer.phase("preparing data")
    workload = resolve(cfg)
    data_info = prepare_workload(workload, cfg.workload, results_dir / "datasets", trains_here=True)
    preflight(workload, cfg, 1)
    host = hostname()
    run = RunDir.create(results_dir, rid, _initial_meta(rid, cfg, data_info, info(cfg.workload, workload),
                                                        host).changed(**(extra_meta or {})))
    observer.run_opened(run.path)
    sampler = Sampler(cfg.sample_interval, [Target(os.getpid(), 0, "trainer", host)])
    steplog = StepLog(samples_per_step=cfg.batch_size)
    run.update(workers=[_worker_meta(0, host, steplog)])
    live, beat = _live(run, steplog, host)  # also times checkpoint saves (the goodput ledger)
    sampler.start()
    captures: dict[str, dict[str, Any]] = {}
    try:
        watched = Tee(observer, StatusObserver(live, _no_save))
        status, error, raised = _train(cfg, workload, run, sampler, steplog, watched, captures)
    finally:
        beat.stop()
    live.write(state={"complete": "done"}.get(status, status))
    run.update(workers=[replace(run.meta.workers[0], checkpoints=live.reported()["checkpoints"])])
    _save(run, steplog, sampler.stop(), status, error)
    finish_traces(run, cfg.profile_steps, captures)
    if raised is not None:
        raise raised
    return run.path


def _live(run: RunDir, steplog: StepLog, host: str) -> tuple[Status, Heartbeat]:
    """What ``perfkit watch`` reads while the run trains, written as a worker of a multi run writes it:
    ``workers/0/status.json`` (its states, step, epoch) and its heartbeat. Read by no analysis: the run's
    records are run.json and the tables written at the end."""
    wdir = run.worker_dir(0)
    status = Status(wdir / "status.json", 0)
    return status, announce(status, wdir, steplog, host, 0)


def _no_save() -> None:
    """The tables are written once, at the end (``_save``)."""


def _train(cfg: RunConfig, workload: Any, run: RunDir, sampler: Sampler, steplog: StepLog,
           observer: Observer, captures: dict[str, dict[str, Any]]) -> tuple[str, str | None, PerfkitError | None]:
    from perfkit.trainer.worker.fit import Instruments, fit, worker_log
    from perfkit.trainer.worker.strategy import applied, mirrored

    log_path = run.worker_dir(0) / "worker.log"
    with worker_log(log_path):
        try:
            strategy, info = mirrored(cfg.replicas)
            run.update(strategy=info.name, replicas=info.replicas, devices=list(info.devices),
                       strategy_setup=applied(strategy))
            host = run.meta.workers[0].host
            instruments = Instruments(
                capture=CaptureTarget(run.path, session=run.path.name, host_name=f"{host}-w0"),
                scalars_dir=run.path / "tensorboard" / "w0", on_capture=lambda r: captures.update({"0": r}))
            fit(cfg, workload, strategy, steplog, observer, cpu=lambda: sampler.latest().get(0),
                on_plan=lambda plan: run.update(plan=plan.to_dict()), instruments=instruments,
                after_fit=lambda model: _calibrate(run, strategy, model, observer) if info.replicas > 1 else None)
            return "complete", None, None
        except KeyboardInterrupt:
            log.warning("interrupted by the user")
            return "interrupted", "interrupted (Ctrl-C, SIGTERM or SIGHUP)", RunInterrupted(
                f"run {run.path.name} interrupted; what was recorded is kept in {run.path}")
        except PerfkitError as exc:
            log.error("%s", exc)
            return "failed", str(exc), exc
        except Exception as exc:  # noqa: BLE001 - any training failure must still save the records
            log.exception("training failed")
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            text = f"{type(exc).__name__}: {first}"
            return "failed", text, RunFailed(f"run {run.path.name} failed: {text} (see {log_path})")


def _calibrate(run: RunDir, strategy: Any, model: Any, observer: Observer) -> None:
    """The replicas' synchronisation cost per step, timed as a cluster's workers time theirs (calibrate.py),
    into the same field (``workers[0].calibration``), so the analysis reads every mode alike."""
    from perfkit.trainer.worker.calibrate import allreduce_calibration

    observer.phase("timing the cross-replica all-reduce")
    run.update(workers=[replace(run.meta.workers[0], calibration=allreduce_calibration(strategy, model))])


def _save(run: RunDir, steplog: StepLog, sampled: SamplerResult, status: str, error: str | None) -> None:
    """Write every table that has rows, then the final run.json; one failed write does not stop the rest."""
    tables = {
        "workers/0/steps.parquet": steplog.steps_frame(),
        "workers/0/epochs.parquet": steplog.epochs_frame(),
        "cpu.parquet": sampled.cpu,
        "system.parquet": sampled.system,
    }
    for relpath, df in tables.items():
        try:
            run.write_frame(relpath, df)
        except Exception as exc:  # noqa: BLE001
            log.error("could not write %s: %s", relpath, exc)
            status, error = "failed", error or f"could not write {relpath}: {exc}"
    run.finish(status, error, sampler=sampled.stats,
               recorded={"steps": steplog.steps_recorded, "epochs": steplog.epochs_recorded})


def _worker_meta(index: int, host: str, steplog: StepLog) -> WorkerRecord:
    return WorkerRecord.reported(index, {}, host=host, pid=os.getpid(), role="trainer",
                                 anchor_wall_ns=steplog.anchor.wall_ns, anchor_mono_ns=steplog.anchor.mono_ns)


def _initial_meta(run_id: str, cfg: RunConfig, data_info: dict[str, Any], workload: WorkloadInfo,
                  host: str) -> RunMeta:
    import psutil

    cores = psutil.cpu_count(logical=True) or 1
    cluster = ClusterRecord(num_workers=1, hosts=({"name": host, "address": "127.0.0.1", "cores": cores,
                                                   "workers": 1},),
                            cpu_budget={"mechanism": "none", "note": "single process, every core of this machine"})
    return RunMeta.new(run_id, mode=cfg.mode.value, strategy="MirroredStrategy", preset=cfg.preset,
                       config=cfg.to_dict(), workload=workload.to_dict(), data=data_info, cluster=cluster,
                       versions=versions(), machine=machine_info(), command_started_wall_ns=command_started_ns())
