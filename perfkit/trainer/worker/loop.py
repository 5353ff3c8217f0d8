"""A custom training loop's steps recorded into the worker's part, the same files as a Keras ``fit``'s: the
steps are the calls of the function ``chooser.StepChooser`` picked; epochs end where the loop shows one
ending (a new iterator over a dataset, a metric reset); the trace window is placed as for ``fit`` and each
traced step carries Keras' ``train`` marker, so the trace split reads it the same way.
"""

from __future__ import annotations

import contextlib
from typing import Any

from perfkit.profiler import ondemand, scalars, tracewindow
from perfkit.profiler.steps import StepLog
from perfkit.trainer.worker.chooser import StepChooser
from perfkit.trainer.worker.part import Status, StatusObserver, close_part, open_part

NO_EPOCH_AFTER = 50  # an "auto" trace window waits this many steps for the first epoch to end


class LoopPart:
    """A custom loop's steps, epochs, trace window and scalars in ``workers/<i>/`` of ``ctx.run_dir``."""

    def __init__(self, ctx: Any, global_batch: int | None, chooser: StepChooser) -> None:
        self.ctx, self.chooser = ctx, chooser
        per_worker = global_batch // ctx.num_workers if global_batch else 0
        self.steplog = StepLog(samples_per_step=per_worker)
        wdir = ctx.run_dir / "workers" / str(ctx.index)
        wdir.mkdir(parents=True, exist_ok=True)
        self.status = Status(wdir / "status.json", ctx.index)
        self.save = open_part(self.status, wdir, self.steplog, ctx.host, ctx.attempt)
        self.observer = StatusObserver(self.status, self.save)
        self.scalars = scalars.EpochScalars(ctx.run_dir / "tensorboard" / f"w{ctx.index}")
        self.plan: dict[str, Any] = {"epochs": 0, "steps_per_epoch": None, "global_batch": global_batch,
                                     "step_function": chooser.describe()}
        self.epoch = self.in_epoch = self.total = 0
        self._lengths: list[int] = []
        self.target = tracewindow.CaptureTarget(ctx.run_dir, session=ctx.run_id, host_name=f"{ctx.host}-w{ctx.index}")
        self.capture = ondemand.Captures(None, ondemand.OnDemand(
            self.target, lambda traces: self.status.write(traces_now=traces)))
        spec = ctx.profile_steps
        self._window_pending = spec == "auto"
        if spec not in ("auto", "off"):
            first, last = (int(x) for x in spec.split("-"))
            self._place(tracewindow.Window(first, last), 0)
        self.status.write(state="training", plan=self.plan)
        self.scalars.open()
        if not global_batch:
            self.status.write(warning="samples per step unknown: the loop's dataset batch could not be read")

    def before_step(self) -> Any:
        """A step is about to run: the trace window; the step marker while tracing."""
        self.capture.step_begin(self.total + 1)
        if not self.capture.active:
            return contextlib.nullcontext()
        from perfkit._tf import tf

        return tf().profiler.experimental.Trace("train", epoch_num=self.epoch, step_num=self.in_epoch, _r=1)

    def step(self, start_ns: int, end_ns: int) -> None:
        if self.in_epoch == 0:  # an epoch starts with its first step (a pass's set-up is not training)
            self.steplog.epoch_begin(self.epoch, at_ns=start_ns)
            self.scalars.begin()
        self.steplog.timed_step(self.in_epoch, start_ns, end_ns)
        self.in_epoch += 1
        self.total += 1
        self.capture.step_end(self.total)
        self.status.write(force=False, epoch=self.epoch, step=self.in_epoch - 1)
        if self._window_pending and self.epoch == 0 and self.in_epoch >= NO_EPOCH_AFTER:
            self._place_auto(self.in_epoch)

    def boundary(self) -> None:
        """The loop began a new pass (a new iterator, a metric reset): the epoch in progress ends here."""
        if self.in_epoch == 0:
            return
        self.capture.epoch_boundary()
        row = self.steplog.epoch_end(self.epoch, {})
        self.scalars.end(self.epoch, {})
        self._lengths.append(self.in_epoch)
        same = len(set(self._lengths)) == 1
        self.plan.update(epochs=len(self._lengths), steps_per_epoch=self._lengths[0] if same else None,
                         step_function=self.chooser.describe())
        self.status.write(plan=self.plan)
        self.observer.epoch(self.epoch, row)
        if self._window_pending and self.epoch == 0:
            self._place_auto(self.in_epoch)
        self.epoch, self.in_epoch = self.epoch + 1, 0

    def _place_auto(self, steps_per_epoch: int) -> None:
        """``auto`` as for fit (early in the second epoch), once the first epoch's length is known."""
        self._window_pending = False
        window = tracewindow.resolve("auto", steps_per_epoch, 2)
        if window is not None:
            self._place(window, steps_per_epoch)

    def _place(self, window: tracewindow.Window, steps_per_epoch: int) -> None:
        # As for fit: a lone process may retry a lost capture an epoch later; a cluster's workers never do.
        retries = self.ctx.profile_retries if self.ctx.num_workers == 1 and steps_per_epoch else 0
        self.capture.scheduled = tracewindow.tf_capture(window, self.target, lambda r: self.status.write(
            profile={**r, "attempt": self.ctx.attempt}), retries, steps_per_epoch, 1 << 30)

    def end(self, exc: BaseException | None) -> None:
        """The process is ending: close the epoch in progress, stop a capture, save everything."""
        self.boundary()
        self.capture.finish()
        if self.capture.scheduled is None and self._window_pending:
            self.status.write(profile={"status": "skipped", "window": None, "file": None,
                                       "error": "training ended before the first epoch's length was known",
                                       "attempt": self.ctx.attempt})
        self.scalars.close()
        self.status.write(plan={**self.plan, "step_function": self.chooser.describe()})
        close_part(self.status, self.save, exc)
