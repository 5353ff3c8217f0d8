"""What ``perfkit.record`` runs inside a user's process: this worker's part of a run (``WorkerPart``), and,
when no launcher made the run, the run itself (``OwnRun``). The pieces are perfkit's own worker's: the step
recorder, trace window, scalars, ``status.json`` and the per-epoch table saver (``trainer/worker_main.py``).
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfkit.profiler import scalars, trace
from perfkit.profiler.steps import StepLog, keras_callback
from perfkit.trainer.worker_main import Status, StatusObserver, close_part, error_line, open_part

log = logging.getLogger(__name__)


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
        self.capture: trace.TraceCapture | None = None
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
        window = trace.resolve(self.ctx.profile_steps, steps_per_epoch, epochs)
        if window is None:
            return
        # One process alone may try a failed capture again later; the workers of a cluster must trace the
        # same steps, so there a lost capture is not retried in-process.
        retries = self.ctx.profile_retries if self.ctx.num_workers == 1 else 0
        target = trace.CaptureTarget(self.run_dir, session=self.ctx.run_id, host_name=f"{self.ctx.host}-w{self.ctx.index}")
        self.capture = trace.tf_capture(window, target, lambda r: self.status.write(
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
                self.inner = trace.keras_callback(part.capture, int(params["steps"]))

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


def command_identity(argv: list[str]) -> dict[str, Any]:
    """A user's command as a workload identity: a single and a multi run of the same command match."""
    return {"spec": "command", "name": "command", "version": "", "params": {"command": shlex.join(argv)}}


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
        from perfkit.profiler.traces import finish_traces

        sampled = self.sampler.stop()
        self.run.write_frame("cpu.parquet", sampled.cpu)
        self.run.write_frame("system.parquet", sampled.system)
        config = {**self.run.meta["config"], **plan_config(part.plan)}
        record = part.worker_record()
        self.run.finish(outcome[0], outcome[1], sampler=sampled.stats, workers=[record], config=config)
        captured = {str(self.context.index): record["profile"]} if record["profile"] else {}
        finish_traces(self.run, self.context.profile_steps, captured)


def plan_config(plan: dict[str, Any] | None) -> dict[str, Any]:
    """What the analysis reads of a run's config, from what fit said (epochs) and the recorder was told."""
    if not plan:
        return {}
    return {"epochs": plan["epochs"], "batch_size": plan["global_batch"], "steps_per_epoch": plan["steps_per_epoch"]}


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
