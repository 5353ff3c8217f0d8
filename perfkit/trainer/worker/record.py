"""``perfkit.record``: your own training script's ``model.fit`` recorded the way perfkit records its own.

    import perfkit
    with perfkit.record(global_batch=256) as rec:
        model.fit(train, epochs=3, validation_data=val, callbacks=rec.callbacks)

Under ``perfkit launch`` (``PERFKIT_RUN_DIR`` and ``PERFKIT_WORKER_INDEX`` set) it records this worker's
part of the launcher's run: steps and epochs (``workers/<i>/``, saved after every epoch), the trace window,
TensorBoard scalars and ``status.json``, from which the launcher follows its progress; the launcher samples
CPU and writes run.json. Run alone (``python train.py``) it is its own launcher for one process: it creates
the run directory, samples this process's CPU and marks the run complete, failed or interrupted on exit.
A ``TF_CONFIG`` naming several workers is read, never changed; each task then writes its part
``<run-id>--w<i>`` of one run id (``run_id=`` or ``PERFKIT_RUN_ID``), merged by ``perfkit analyze``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from perfkit.errors import UsageError
from perfkit.profiler import scalars, tracewindow
from perfkit.profiler.steps import StepLog, keras_callback
from perfkit.trainer.worker.part import (INDEX_VAR, RUN_DIR_VAR, Status, StatusObserver, close_part, command_identity,
                                         error_line, open_part, plan_config)

log = logging.getLogger(__name__)

RUN_ID_VAR = "PERFKIT_RUN_ID"


@dataclass(frozen=True)
class Context:
    """Where this process's records go and how it is to be traced."""

    run_dir: Path | None  # None until a run alone creates its own
    index: int
    num_workers: int
    host: str
    run_id: str
    profile_steps: str = "auto"
    profile_retries: int = 3
    attempt: int = 0
    launched: bool = False
    endpoints: tuple[str, ...] = ()  # every worker's host:port, from TF_CONFIG (a run alone, several tasks)

    @classmethod
    def from_launcher(cls, run_dir: Path, index: int) -> Context:
        launch_file = run_dir / "launch.json"
        try:
            launch = json.loads(launch_file.read_text(encoding="utf-8"))
            me = launch["workers"][str(index)]
        except (OSError, ValueError, KeyError) as exc:
            raise UsageError(f"{RUN_DIR_VAR}/{INDEX_VAR}: {launch_file} has no worker {index} "
                             f"({type(exc).__name__}); were they set by perfkit launch?") from None
        cfg = launch.get("config") or {}
        return cls(run_dir, index, len(launch["cluster"]["workers"]), me["host"],
                   str(launch["run_id"]), str(cfg.get("profile_steps", "auto")), int(cfg.get("profile_retries", 3)),
                   int(launch.get("attempt", 0)), launched=True)

    @classmethod
    def alone(cls, run_id: str | None, profile_steps: str, label: str | None) -> Context:
        from perfkit.config import sanitize_id
        from perfkit.machine import hostname
        from perfkit.results import new_run_id
        from perfkit.schedulers import from_tf_config

        text = os.environ.get("TF_CONFIG")
        task = from_tf_config(text, 0.0) if text else None
        if task is None or task.cluster.num_workers <= 1:
            rid = sanitize_id(run_id) if run_id else new_run_id("single", label)
            return cls(None, 0, 1, hostname(), rid, profile_steps)
        n = task.cluster.num_workers
        rid = run_id or os.environ.get(RUN_ID_VAR)
        if not rid:
            raise UsageError(f"TF_CONFIG names {n} workers: give every task the same run id (perfkit.record("
                             f"run_id=...) or {RUN_ID_VAR}), so that their parts form one run")
        return cls(None, task.index, n, hostname(), sanitize_id(rid), profile_steps,
                   endpoints=tuple(w.endpoint for w in task.cluster.workers))


def check_keras() -> None:
    """tf-keras is what perfkit records (Keras 3's fit fails under MultiWorkerMirroredStrategy,
    keras-team/keras#20585). Before TensorFlow is imported this process is switched to it; after, the
    Keras in use is checked and never changed."""
    if "tensorflow" not in sys.modules:
        from perfkit._tf import prepare_env

        prepare_env()
        return
    model_class = getattr(getattr(sys.modules["tensorflow"], "keras", None), "Model", None)
    if str(getattr(model_class, "__module__", "")).startswith("tf_keras"):
        return
    keras = sys.modules.get("keras")
    version = getattr(keras, "__version__", "unknown")
    raise UsageError(f"perfkit.record: this process imported TensorFlow with Keras {version}, not tf-keras; "
                     f"perfkit records tf-keras models: set TF_USE_LEGACY_KERAS=1 before importing tensorflow "
                     f"(perfkit launch sets it) and pip install tf-keras")


class Recorder:
    """See the module docstring. ``callbacks`` go into ``model.fit``; use one recorder per fit."""

    def __init__(self, global_batch: int, results_dir: str | Path = "results", run_id: str | None = None,
                 label: str | None = None, profile_steps: str = "auto") -> None:
        from perfkit.profiler.tracewindow import check_spec

        if not isinstance(global_batch, int) or global_batch < 1:
            raise UsageError(f"perfkit.record: global_batch must be a positive int (the batch of one step over "
                             f"all workers), not {global_batch!r}")
        check_keras()
        run_dir, index = os.environ.get(RUN_DIR_VAR), os.environ.get(INDEX_VAR)
        if run_dir or index is not None:  # set by perfkit launch: both, and the index a worker's
            if not run_dir or index is None or not index.isdigit():
                raise UsageError(f"{RUN_DIR_VAR}={run_dir!r}, {INDEX_VAR}={index!r}: perfkit launch sets both, "
                                 f"the index a worker number; unset them to record a run of its own")
            self.context = Context.from_launcher(Path(run_dir), int(index))
        else:
            self.context = Context.alone(run_id, check_spec(profile_steps), label)
        if global_batch % self.context.num_workers:
            raise UsageError(f"perfkit.record: global_batch {global_batch} does not divide among "
                             f"{self.context.num_workers} workers")
        self.global_batch, self.results_dir = global_batch, Path(results_dir)
        self._part: Any = None
        self._own: Any = None

    @property
    def run_dir(self) -> Path:
        if self._part is None:
            raise UsageError("perfkit.record: use it as a context manager (with perfkit.record(...) as rec:)")
        return self._part.run_dir

    @property
    def callbacks(self) -> list[Any]:
        if self._part is None:
            raise UsageError("perfkit.record: rec.callbacks is ready inside 'with perfkit.record(...) as rec:'")
        return self._part.callbacks()

    def __enter__(self) -> Recorder:
        ctx = self.context
        if not ctx.launched:
            self._own = OwnRun.create(ctx, self.results_dir, self.global_batch)
            ctx = self._own.context
        self._part = WorkerPart(ctx, StepLog(samples_per_step=self.global_batch // ctx.num_workers),
                                self.global_batch)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        outcome = self._part.end(exc)
        if self._own is not None:
            self._own.finish(self._part, outcome)


def record(global_batch: int, results_dir: str | Path = "results", run_id: str | None = None,
           label: str | None = None, profile_steps: str = "auto") -> Recorder:
    """Record this process's ``model.fit``; ``global_batch``: samples per step over all workers."""
    return Recorder(global_batch, results_dir, run_id, label, profile_steps)


class WorkerPart:
    """This process's records: ``workers/<i>/`` of ``ctx.run_dir``."""

    def __init__(self, ctx: Any, steplog: StepLog, global_batch: int) -> None:
        self.ctx, self.steplog, self.global_batch = ctx, steplog, global_batch
        self.run_dir: Path = ctx.run_dir
        wdir = self.run_dir / "workers" / str(ctx.index)
        wdir.mkdir(parents=True, exist_ok=True)
        self.status = Status(wdir / "status.json", ctx.index)
        self.save = open_part(self.status, wdir, steplog, ctx.host, ctx.attempt)
        self.observer = StatusObserver(self.status, self.save)
        self.capture: tracewindow.TraceCapture | None = None
        self.plan: dict[str, Any] | None = None
        self._callbacks: list[Any] | None = None

    def callbacks(self) -> list[Any]:
        if self._callbacks is None:
            steps = keras_callback(self.steplog, on_step=self.observer.step, on_epoch=self.observer.epoch)
            # The trace window comes after the step recorder, so the profiler starts and stops between steps.
            self._callbacks = [steps, scalars.keras_callback(self.run_dir / "tensorboard" / f"w{self.ctx.index}"),
                               _window_callback(self)]
        return list(self._callbacks)

    def started(self, epochs: int, steps_per_epoch: int | None) -> None:
        """fit began: its plan is known (Keras' params), the trace window can be placed."""
        self.plan = {"epochs": epochs, "steps_per_epoch": steps_per_epoch, "global_batch": self.global_batch}
        self.status.write(plan=self.plan)
        self.observer.training_started(epochs, steps_per_epoch or 0, lambda: None)
        if not steps_per_epoch:
            self.status.write(profile={"status": "skipped", "error": "steps per epoch unknown (give fit steps_per_epoch)",
                                       "window": None, "file": None, "attempt": self.ctx.attempt})
            return
        window = tracewindow.resolve(self.ctx.profile_steps, steps_per_epoch, epochs)
        if window is None:
            return
        # One process alone may try a failed capture again later; the workers of a cluster must trace the
        # same steps, so there a lost capture is not retried in-process.
        retries = self.ctx.profile_retries if self.ctx.num_workers == 1 else 0
        target = tracewindow.CaptureTarget(self.run_dir, session=self.ctx.run_id, host_name=f"{self.ctx.host}-w{self.ctx.index}")
        self.capture = tracewindow.tf_capture(window, target, lambda r: self.status.write(
            profile={**r, "attempt": self.ctx.attempt}), retries, steps_per_epoch, epochs)

    def end(self, exc: BaseException | None) -> tuple[str, str | None]:
        """Stop what was started, save everything; the run's outcome as (status, error)."""
        if self.capture is not None:
            self.capture.finish()  # a failed fit may leave the profiler running
        state = close_part(self.status, self.save, exc)
        if state == "done":
            return "complete", None
        if state == "interrupted":
            return "interrupted", "interrupted by the user (Ctrl-C)"
        return "failed", error_line(exc) if exc is not None else None

    def worker_record(self) -> dict[str, Any]:
        st = self.status._state
        return {"index": self.ctx.index, "host": self.ctx.host, "pid": os.getpid(), "role": "trainer",
                "anchor_wall_ns": self.steplog.anchor.wall_ns, "anchor_mono_ns": self.steplog.anchor.mono_ns,
                "state": st.get("state"), "profile": st.get("profile"), "plan": self.plan}


def _window_callback(part: WorkerPart) -> Any:
    """Places the trace window once fit says how long it is, then drives it like perfkit's own workers."""
    from perfkit._tf import keras

    class _Window(keras().callbacks.Callback):
        inner: Any = None

        def on_train_begin(self, logs: Any = None) -> None:
            params = self.params or {}
            part.started(int(params.get("epochs") or 0), params.get("steps"))
            if part.capture is not None:
                self.inner = tracewindow.keras_callback(part.capture, int(params["steps"]))

        def _pass(self, hook: str, *args: Any) -> None:
            if self.inner is not None:
                getattr(self.inner, hook)(*args)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._pass("on_epoch_begin", epoch, logs)

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self._pass("on_train_batch_begin", batch, logs)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self._pass("on_train_batch_end", batch, logs)

        def on_test_begin(self, logs: Any = None) -> None:
            self._pass("on_test_begin", logs)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self._pass("on_epoch_end", epoch, logs)

        def on_train_end(self, logs: Any = None) -> None:
            self._pass("on_train_end", logs)

    return _Window()


class OwnRun:
    """A run that no launcher made (``python train.py`` with perfkit.record): this process writes run.json,
    samples its own CPU and records how it ended."""

    def __init__(self, run: Any, context: Any, sampler: Any, global_batch: int) -> None:
        self.run, self.context, self.sampler, self.global_batch = run, context, sampler, global_batch

    @classmethod
    def create(cls, ctx: Any, results_dir: Path, global_batch: int) -> OwnRun:
        from perfkit.profiler.sampler import Sampler, Target
        from perfkit.results import RunDir

        multi = ctx.num_workers > 1
        name = f"{ctx.run_id}--w{ctx.index}" if multi else ctx.run_id
        run = RunDir.create(results_dir, name, _meta(ctx, global_batch))
        sampler = Sampler(0.5, [Target(os.getpid(), ctx.index, "trainer", ctx.host)])
        sampler.start()
        return cls(run, replace(ctx, run_dir=run.path), sampler, global_batch)

    def finish(self, part: WorkerPart, outcome: tuple[str, str | None]) -> None:
        from perfkit.profiler.tracewindow import finish_traces

        sampled = self.sampler.stop()
        self.run.write_frame("cpu.parquet", sampled.cpu)
        self.run.write_frame("system.parquet", sampled.system)
        config = {**self.run.meta["config"], **plan_config(part.plan)}
        record = part.worker_record()
        self.run.finish(outcome[0], outcome[1], sampler=sampled.stats, workers=[record], config=config)
        captured = {str(self.context.index): record["profile"]} if record["profile"] else {}
        finish_traces(self.run, self.context.profile_steps, captured)


def _meta(ctx: Any, global_batch: int) -> dict[str, Any]:
    from perfkit.machine import machine_info, versions

    multi = ctx.num_workers > 1
    endpoints = list(ctx.endpoints)
    return {
        "mode": "multi" if multi else "single", "strategy": None, "preset": None,
        "config": {"mode": "multi" if multi else "single", "batch_size": global_batch, "epochs": None,
                   "profile_steps": ctx.profile_steps, "sample_interval": 0.5, "workload": "command"},
        "workload": command_identity(["python", *sys.argv]),
        "recorder": {"launched": False, "argv": list(sys.argv)},
        "part": {"name": f"w{ctx.index}", "workers": [ctx.index]} if multi else None,
        "cluster": {"num_workers": ctx.num_workers, "local_workers": [ctx.index], "emulated": False,
                    "workers": [{"index": i, "host": ctx.host if i == ctx.index else None, "endpoint": e}
                                for i, e in enumerate(endpoints)] or [{"index": 0, "host": ctx.host, "endpoint": None}]},
        "versions": versions(), "machine": machine_info(),
    }
