"""One worker process of a multi-worker run: ``python -m perfkit.trainer.worker_main RUN_DIR INDEX``.

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
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perfkit.cluster import ClusterSpec, cluster_from_dict
from perfkit.config import RunConfig
from perfkit.profiler.steps import StepLog
from perfkit.results import write_json, write_parquet
from perfkit.trainer.guard import die_with_launcher

log = logging.getLogger("perfkit.worker")



class Status:
    """``workers/<i>/status.json``, rewritten atomically; step updates are throttled."""

    def __init__(self, path: Path, index: int) -> None:
        self.index = index
        self.path, self._state = path, {"index": index, "pid": os.getpid(), "state": "starting"}
        self._last = 0.0
        self._lock = threading.Lock()  # a ps chief's progress thread writes too
        self.write()

    def write(self, force: bool = True, **fields: Any) -> None:
        with self._lock:
            self._state.update(fields, t_wall_ns=time.time_ns())
            now = time.monotonic()
            if force or now - self._last >= 0.5:
                self._last = now
                try:
                    write_json(self.path, self._state)
                except OSError as exc:  # a status file is a courtesy; training goes on without it
                    log.warning("could not write %s: %s", self.path, exc)


def apply_cpu_limits(threads: int | None, cores: list[int] | None) -> None:
    """Pin this process (and every thread TF starts later) and cap TF's thread pools."""
    if cores:
        try:
            os.sched_setaffinity(0, cores)
        except (AttributeError, OSError) as exc:
            log.warning("could not pin to cores %s: %s", cores, exc)
    if threads:
        from perfkit._tf import tf

        t = tf()
        t.config.threading.set_intra_op_parallelism_threads(threads)
        t.config.threading.set_inter_op_parallelism_threads(max(1, min(2, threads)))


class StatusObserver:
    """Forwards progress into status.json and saves the tables after every epoch."""

    def __init__(self, status: Status, save: Callable[[], None]) -> None:
        self.status, self.save = status, save

    def phase(self, text: str) -> None:
        self.status.write(phase=text)

    def warning(self, text: str) -> None:
        self.status.write(warning=text)

    def training_started(self, epochs: int, steps_per_epoch: int, cpu: Callable[[], float | None]) -> None:
        self.status.write(state="training", epochs=epochs, steps_per_epoch=steps_per_epoch)

    def step(self, epoch: int, step: int, logs: Mapping[str, Any]) -> None:
        self.status.write(force=False, epoch=epoch, step=step, loss=_float(logs.get("loss")),
                          accuracy=_float(logs.get("accuracy")))

    def epoch(self, epoch: int, row: Mapping[str, Any]) -> None:
        self.save()
        self.status.write(epochs_done=epoch + 1, last_epoch={k: _float(v) for k, v in row.items()})

    def training_finished(self) -> None:
        pass


def _float(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def tables_saver(wdir: Path, steplog: StepLog, attempt: int) -> Callable[[], None]:
    """Save this attempt's rows beside those of earlier attempts (a restarted cluster resumes an epoch)."""
    import pandas as pd

    earlier = {}
    for name in ("steps", "epochs"):
        path = wdir / f"{name}.parquet"
        if path.is_file():
            df = pd.read_parquet(path)
            earlier[name] = df[df["attempt"] < attempt] if "attempt" in df else df.assign(attempt=0)

    def save() -> None:
        for name, frame in (("steps", steplog.steps_frame()), ("epochs", steplog.epochs_frame())):
            frame = frame.assign(attempt=attempt)
            if name in earlier and not earlier[name].empty:
                frame = pd.concat([earlier[name], frame], ignore_index=True)
            write_parquet(wdir / f"{name}.parquet", frame)

    return save


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
            from perfkit.trainer.ps import serve

            serve(cluster, index, status)  # until the launcher stops it
        elif cluster.is_ps:
            from perfkit.trainer.ps import train_chief

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


def open_part(status: Status, wdir: Path, steplog: StepLog, host: str, attempt: int) -> Callable[[], None]:
    """This worker's clock anchor and host in status.json; the saver of its step and epoch tables. The same
    for perfkit's own worker and for a user's script under perfkit.record."""
    status.write(anchor_wall_ns=steplog.anchor.wall_ns, anchor_mono_ns=steplog.anchor.mono_ns, host=host,
                 attempt=attempt)
    return tables_saver(wdir, steplog, attempt)


def close_part(status: Status, save: Callable[[], None], exc: BaseException | None) -> str:
    """Save what was recorded and say in status.json how the worker ended: done, interrupted or failed."""
    save()
    if exc is None:
        status.write(state="done")
        return "done"
    if isinstance(exc, KeyboardInterrupt):
        status.write(state="interrupted")
        return "interrupted"
    status.write(state="failed", error=error_line(exc))
    return "failed"


def error_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"


def _train(run_dir: Path, cfg: RunConfig, cluster: ClusterSpec, launch: dict[str, Any], status: Status,
           steplog: StepLog, save: Callable[[], None]) -> None:
    from perfkit.profiler.trace import CaptureTarget
    from perfkit.trainer.strategy import multi_worker
    from perfkit.trainer.worker import Instruments, fit
    from perfkit.workloads import prepare_workload, resolve

    status.write(state="loading-data")
    workload = resolve(cfg)  # the user named it: importing their module here is what they asked for
    prepare_workload(workload, cfg.workload, Path(launch["cache_dir"]), trains_here=False)
    status.write(state="connecting")
    strategy, info = multi_worker()
    status.write(state="joined", replicas=info.replicas)
    backup = Path(launch["backup_dir"]) if launch.get("backup_dir") else None
    index, host = status.index, launch["workers"][str(status.index)]["host"]
    instruments = Instruments(
        capture=CaptureTarget(run_dir, session=str(launch.get("run_id", run_dir.name)), host_name=f"{host}-w{index}"),
        scalars_dir=run_dir / "tensorboard" / f"w{index}", on_capture=lambda r: status.write(profile={**r, "attempt": int(launch.get("attempt", 0))}))
    fit(cfg, workload, strategy, steplog, StatusObserver(status, save), cpu=lambda: None,
        num_workers=cluster.num_workers, backup_dir=backup, instruments=instruments,
        after_fit=lambda model: _calibrate(strategy, model, status) if cluster.num_workers > 1 else None)


def _calibrate(strategy: Any, model: Any, status: Status) -> None:
    from perfkit.trainer.calibrate import allreduce_calibration

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
