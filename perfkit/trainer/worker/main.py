"""One worker process of a multi-worker run: ``python -m perfkit.trainer.worker.main RUN_DIR INDEX``.

It reads ``RUN_DIR/launch.json`` (written by the launcher or by ``--task-index`` mode), joins the cluster
under MultiWorkerMirroredStrategy, trains, and keeps ``workers/<INDEX>/`` up to date: ``status.json``
(state, epoch, step, at most twice a second), and its steps and epochs after every epoch, so a worker
killed mid-run leaves everything it recorded until its last completed epoch.

Never a silent hang: the strategy constructor waits for every peer without limit and holds the GIL
while it does, so the connect timeout is enforced from outside, by the launcher process; and the kernel
kills a worker whose launcher is gone (even by kill -9) instead of leaving it waiting in a collective.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfkit.cluster import ClusterSpec, cluster_from_dict
from perfkit.config import RunConfig
from perfkit.profiler.steps import StepLog
from perfkit.trainer.worker.guard import apply_cpu_limits, die_with_launcher
from perfkit.trainer.worker.part import Status, StatusObserver, close_part, open_part

log = logging.getLogger("perfkit.worker")


def run_worker(run_dir: Path, index: int) -> int:
    launch = json.loads((run_dir / "launch.json").read_text(encoding="utf-8"))
    cfg, cluster = RunConfig.from_dict(launch["config"]), cluster_from_dict(launch["cluster"])
    me = launch["workers"][str(index)]
    wdir = run_dir / "workers" / str(index)
    wdir.mkdir(parents=True, exist_ok=True)
    status = Status(wdir / "status.json", index)
    die_with_launcher(launch.get("launcher_pid"))
    apply_cpu_limits(me.get("threads"), me.get("cores"))
    os.environ["TF_CONFIG"] = json.dumps(cluster.tf_config(index))
    role = cluster.tasks[index].role
    # Under ParameterServerStrategy a step is one worker's step on the whole global batch.
    steplog = StepLog(samples_per_step=cfg.batch_size // (1 if cluster.is_ps else cluster.num_workers))
    save = open_part(status, wdir, steplog, me["host"], int(launch.get("attempt", 0)))
    server = cluster.is_ps and role != "chief"
    if server:
        save = _nothing  # a server records no table: the chief writes its workers' steps
    try:
        if server:
            from perfkit.trainer.worker.ps import serve

            serve(cluster, index, status)  # until the launcher stops it
        elif cluster.is_ps:
            from perfkit.trainer.worker.ps import train_chief

            train_chief(run_dir, cfg, cluster, launch, status, steplog, save)
        else:
            _train(run_dir, cfg, cluster, launch, status, steplog, save)
    except KeyboardInterrupt as exc:
        close_part(status, save, exc)
        return 130
    except Exception as exc:  # noqa: BLE001 - recorded for the launcher, which reports it
        log.exception("worker %d failed", index)
        close_part(status, save, exc)
        return 1
    close_part(status, save, None)
    return 0


def _nothing() -> None:
    pass


def _train(run_dir: Path, cfg: RunConfig, cluster: ClusterSpec, launch: dict[str, Any], status: Status,
           steplog: StepLog, save: Callable[[], None]) -> None:
    from perfkit.profiler.tracewindow import CaptureTarget
    from perfkit.trainer.worker.fit import Instruments, fit
    from perfkit.trainer.worker.strategy import multi_worker
    from perfkit.workloads import prepare_workload, resolve

    status.write(state="loading-data")
    workload = resolve(cfg)  # the user named it: importing their module here is what they asked for
    prepare_workload(workload, cfg.workload, Path(launch["cache_dir"]), trains_here=False)
    status.write(state="connecting")
    strategy, info = multi_worker(cfg.knobs.bytes_per_pack, cfg.knobs.all_reduce)
    status.write(state="joined", replicas=info.replicas)
    backup = Path(launch["backup_dir"]) if launch.get("backup_dir") else None
    index, host = status.index, launch["workers"][str(status.index)]["host"]
    instruments = Instruments(
        capture=CaptureTarget(run_dir, session=str(launch.get("run_id", run_dir.name)), host_name=f"{host}-w{index}"),
        scalars_dir=run_dir / "tensorboard" / f"w{index}",
        on_capture=lambda r: status.write(profile={**r, "attempt": int(launch.get("attempt", 0))}),
        on_demand=lambda traces: status.write(traces_now=traces))
    fit(cfg, workload, strategy, steplog, StatusObserver(status, save), cpu=lambda: None,
        num_workers=cluster.num_workers, backup_dir=backup, instruments=instruments, on_plan=lambda plan: status.write(
            plan=plan.to_dict(), executions_per_epoch=plan.executions_per_epoch),
        after_fit=lambda model: _calibrate(strategy, model, status) if cluster.num_workers > 1 else None)


def _calibrate(strategy: Any, model: Any, status: Status) -> None:
    from perfkit.trainer.worker.calibrate import allreduce_calibration

    status.write(state="calibrating")
    status.write(calibration=allreduce_calibration(strategy, model))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # TF logs one INFO line per all-reduce: thousands of lines that would bury the worker's own.
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    try:
        code = run_worker(Path(args[0]), int(args[1]))
    except Exception:  # noqa: BLE001 - a broken launch file; the traceback goes to worker.log
        log.exception("worker could not start")
        code = 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # TF's exit handlers can wait on peers that already left; everything is saved, so leave now.
    os._exit(code)


if __name__ == "__main__":
    main()
