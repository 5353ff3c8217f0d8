"""One worker's part of a run recorded from a Keras ``fit``: where it goes (``Context``: from ``perfkit
launch``'s launch.json, or a run of its own) and what records it (``WorkerPart``: the step, scalar and trace
window callbacks, status.json, the tables). Used by ``perfkit.record`` and by the start-up hook alike.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit._atomic import write_error
from perfkit.errors import UsageError
from perfkit.profiler import ondemand, scalars, tracewindow
from perfkit.profiler.steps import StepLog, keras_callback
from perfkit.runmeta import WorkerRecord
from perfkit.trainer.worker.part import (
    INDEX_VAR,
    RUN_DIR_VAR,
    Status,
    StatusObserver,
    close_part,
    error_line,
    open_part,
)

log = logging.getLogger("perfkit.worker")

RUN_ID_VAR = "PERFKIT_RUN_ID"
PART_ATTR = "_perfkit_part"  # on perfkit's callbacks: the part they record into (the start-up hook's fit looks)


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


class WorkerPart:
    """This process's records: ``workers/<i>/`` of ``ctx.run_dir``. ``global_batch`` None: learnt from what
    ``fit`` is given (``fit_given``); ``callback_base``: the Keras in use's Callback class (tf-keras by default)."""

    def __init__(self, ctx: Any, steplog: StepLog, global_batch: int | None,
                 callback_base: type | None = None) -> None:
        self.ctx, self.steplog, self.global_batch = ctx, steplog, global_batch
        self.base = callback_base
        # Keras 3 puts no "train" marker around its steps (tf-keras does): the trace window adds it.
        self.keras3 = callback_base is not None and keras_major(callback_base) >= 3
        self.ended = False
        self.run_dir: Path = ctx.run_dir
        wdir = self.run_dir / "workers" / str(ctx.index)
        wdir.mkdir(parents=True, exist_ok=True)
        self.status = Status(wdir / "status.json", ctx.index)
        self.save = open_part(self.status, wdir, steplog, ctx.host, ctx.attempt)
        self.observer = StatusObserver(self.status, self.save)
        self.capture: ondemand.Captures | None = None
        self.plan: dict[str, Any] | None = None
        self._callbacks: list[Any] | None = None
        self._device_autotune: bool | None = None  # the strategy's per-device datasets' autotuner (auto.py)

    def device_datasets(self, autotune_off: bool) -> None:
        """What the start-up hook applied to this fit's per-device datasets, for the plan."""
        self._device_autotune = not autotune_off

    def callbacks(self) -> list[Any]:
        if self._callbacks is None:
            steps = keras_callback(self.steplog, on_step=self.observer.step, on_epoch=self.observer.epoch,
                                   base=self.base)
            # The trace window comes after the step recorder, so the profiler starts and stops between steps.
            logdir = self.run_dir / "tensorboard" / f"w{self.ctx.index}"
            self._callbacks = [steps, scalars.keras_callback(logdir, self.base), _window_callback(self)]
            for callback in self._callbacks:
                setattr(callback, PART_ATTR, self)
        return list(self._callbacks)

    def fit_given(self, global_batch: int | None) -> None:
        """The global batch read from what ``fit`` was given, unless the script told it (perfkit.record)."""
        if self.global_batch is not None or global_batch is None:
            return
        self.global_batch = global_batch
        self.steplog.samples_per_step = global_batch // self.ctx.num_workers
        if global_batch % self.ctx.num_workers:
            self.status.write(warning=f"the global batch {global_batch} does not divide among "
                                      f"{self.ctx.num_workers} workers")

    def started(self, epochs: int, steps_per_epoch: int | None, steps_per_execution: int = 1) -> None:
        """fit began: its plan is known (Keras' params), the trace window can be placed. With a model compiled
        with ``steps_per_execution`` K > 1 Keras' batch hooks run once per execution: the window counts
        executions, and the plan says so."""
        self.plan = {"epochs": epochs, "steps_per_epoch": steps_per_epoch, "global_batch": self.global_batch}
        if self._device_autotune is not None:
            self.plan["device_datasets_autotune"] = self._device_autotune
        per_epoch = steps_per_epoch
        if steps_per_execution > 1:
            if steps_per_epoch:
                per_epoch = tracewindow.executions_per_epoch(steps_per_epoch, steps_per_execution)
            self.plan.update(steps_per_execution=steps_per_execution, executions_per_epoch=per_epoch)
            self.status.write(executions_per_epoch=per_epoch)
        self.status.write(plan=self.plan)
        self.observer.training_started(epochs, steps_per_epoch or 0, lambda: None)
        if not steps_per_epoch:
            self.status.write(profile={"status": "skipped",
                                       "error": "steps per epoch unknown (give fit steps_per_epoch)",
                                       "window": None, "file": None, "attempt": self.ctx.attempt})
            return
        window = tracewindow.resolve(self.ctx.profile_steps, per_epoch, epochs, steps_per_execution)
        # One process alone may try a failed capture again later; the workers of a cluster must trace the
        # same steps, so there a lost capture is not retried in-process.
        retries = self.ctx.profile_retries if self.ctx.num_workers == 1 else 0
        target = tracewindow.CaptureTarget(self.run_dir, session=self.ctx.run_id,
                                           host_name=f"{self.ctx.host}-w{self.ctx.index}")
        scheduled = None if window is None else tracewindow.tf_capture(window, target, lambda r: self.status.write(
            profile={**r, "attempt": self.ctx.attempt}), retries, per_epoch, epochs)
        asked = ondemand.OnDemand(target, lambda traces: self.status.write(traces_now=traces))
        self.capture = ondemand.Captures(scheduled, asked)

    def finishing(self) -> None:
        """fit ran its last step: the tables saved now and status.json says ``finishing``, while Keras and
        TensorFlow take fit down (the launcher gives that its own limit: trainer/teardown.py)."""
        try:
            self.save()
        except OSError as exc:  # said again, as the part's failure, when the part closes
            log.warning("could not save the worker's tables at the end of fit: %s", write_error(exc))
        self.status.write(state="finishing")

    def end(self, exc: BaseException | None) -> tuple[str, str | None]:
        """Stop what was started, save everything; the run's outcome as (status, error)."""
        self.ended = True
        if self.capture is not None:
            self.capture.finish()  # a failed fit may leave the profiler running
        state = close_part(self.status, self.save, exc)
        if state == "done":
            return "complete", None
        if state == "interrupted":
            return "interrupted", "interrupted by the user (Ctrl-C)"
        return "failed", error_line(exc) if exc is not None else None

    def worker_record(self) -> WorkerRecord:
        reported = self.status.reported()
        return WorkerRecord.reported(self.ctx.index,
                                     {"state": reported.get("state"), "profile": reported.get("profile")},
                                     host=self.ctx.host, pid=os.getpid(), role="trainer",
                                     anchor_wall_ns=self.steplog.anchor.wall_ns,
                                     anchor_mono_ns=self.steplog.anchor.mono_ns, plan=self.plan)


def keras_major(callback_base: type) -> int:
    """The major version of the Keras a Callback class belongs to: tf-keras and the Keras inside TensorFlow
    2.15 are 2 (they mark each step for the trace themselves), Keras 3 is 3."""
    import sys

    root = callback_base.__module__.split(".")[0]
    version = str(getattr(sys.modules.get(root), "__version__", "3" if root == "keras" else "2"))
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 3


def _window_callback(part: WorkerPart) -> Any:
    """Places the trace window once fit says how long it is, then drives it like perfkit's own workers."""
    from perfkit._tf import keras

    class _Window(part.base or keras().callbacks.Callback):  # type: ignore[misc]
        _supports_tf_logs = True  # it reads no logs

        inner: Any = None

        def on_train_begin(self, logs: Any = None) -> None:
            from perfkit.workloads.compiled import steps_per_execution_of

            params = self.params or {}
            per_call = steps_per_execution_of(self.model) if self.model is not None else 1
            part.started(int(params.get("epochs") or 0), params.get("steps"), per_call)
            if part.capture is not None:
                self.inner = tracewindow.keras_callback(part.capture, int(params["steps"]), part.base,
                                                        markers=part.keras3, steps_per_execution=per_call)

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
            part.finishing()

    return _Window()


