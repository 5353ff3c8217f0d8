"""A ParameterServerStrategy chief's training recorded as TensorFlow's ``ClusterCoordinator`` runs it, for a
script perfkit did not write (``perfkit launch --mode ps``).

Under ParameterServerStrategy no step runs in the chief: Keras ``fit`` and a custom loop alike hand each step to
``ClusterCoordinator.schedule``, which queues a *closure* that one of the coordinator's threads (one per
worker) runs on its worker and waits for, then takes the next. So the start-up hook times each closure where
the coordinator runs it (``Worker._process_closure``: the chief's monotonic clock from the call sent to the
worker until the worker's result is copied back and the closure queue is told it finished) and knows which
worker ran it. That gives each worker's steps and its share of them (the asynchronous counterpart of a straggler) with
no code in the workers, whatever the script; the times include the call's round trip, which perfkit's own
``--mode ps`` clock (``ps.py``, timed inside the step's graph) does not.

A closure that fails on its worker (the worker died or was cut off, while the step ran or while its result was
fetched) is put back by TensorFlow and runs on another worker: counted as lost on the worker where it failed.
Epochs are Keras' own under ``fit``; in a custom loop an epoch ends where the loop calls
``ClusterCoordinator.join()`` after scheduling steps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

from perfkit.profiler.steps import StepLog, keras_callback
from perfkit.results import write_parquet
from perfkit.trainer.worker.chooser import function_name
from perfkit.trainer.worker.part import Status, StatusObserver, close_part, error_line, open_part

log = logging.getLogger("perfkit.worker")

KERAS_STEP = "train_function"  # what tf-keras' fit schedules for each step (its evaluate: test_function)


class CoordinatorPart:
    """The chief's part (``workers/<chief>/``: status, heartbeat, epochs) and each worker's steps
    (``workers/<w>/steps.parquet``, on the chief's clock: the chief's part carries them)."""

    def __init__(self, ctx: Any, step_function: str | None, keras: bool) -> None:
        self.ctx, self.keras = ctx, keras
        self.run_dir = ctx.run_dir
        wdir = self.run_dir / "workers" / str(ctx.index)
        wdir.mkdir(parents=True, exist_ok=True)
        self.steplog = StepLog(samples_per_step=0)  # the chief's epochs; its steps run on the workers
        self.status = Status(wdir / "status.json", ctx.index)
        self.logs = [StepLog(samples_per_step=0) for _ in range(ctx.num_workers)]
        for steplog in self.logs:
            steplog.anchor = self.steplog.anchor
        self.lock = threading.Lock()
        self.completed, self.in_epoch, self.open_epoch = 0, 0, False
        self.lost: Counter[int] = Counter()
        self.lost_errors: dict[int, str] = {}
        self.scheduled: Counter[str] = Counter()
        self.step_name = step_function or (KERAS_STEP if keras else None)
        self.rule = "--step-function" if step_function else ("Keras fit" if keras else None)
        self.plan: dict[str, Any] = {"epochs": 0, "steps_per_epoch": None, "global_batch": None}
        self.ended = False
        save_chief = open_part(self.status, wdir, self.steplog, ctx.host, ctx.attempt, progress=self.position)

        def save() -> None:
            save_chief()
            self._save_workers()

        self.save = save
        self.observer = StatusObserver(self.status, save)
        self.status.write(state="training", plan=self._plan())

    # -- the coordinator's calls --------------------------------------------------------------------------
    def closure_made(self, fn: Any) -> tuple[int, int, int] | None:
        """A step is being scheduled (the script's thread): its epoch and number, or None for another function."""
        name = function_name(fn)
        with self.lock:
            self.scheduled[name] += 1
            if self.step_name is None:  # a custom loop: the first function it schedules is its step
                self.step_name, self.rule = name, "scheduled first"
            if name != self.step_name or self.ended:
                return None
            if not self.keras and not self.open_epoch:
                self.steplog.epoch_begin(self.steplog.epochs_recorded, at_ns=time.monotonic_ns())
                self.open_epoch = True
            self.in_epoch += 1
            return self.steplog.current_epoch, self.in_epoch - 1, time.monotonic_ns()

    def executed(self, worker: int, tag: tuple[int, int, int], start_ns: int, end_ns: int) -> None:
        """A coordinator thread ran a step on ``worker`` (from the call sent to its result back)."""
        with self.lock:
            if self.ended or not 0 <= worker < len(self.logs):
                return
            self.logs[worker].add_step(tag[0], tag[1], start_ns, end_ns)
            self.completed += 1
        self.status.write(force=False, epoch=tag[0], step=tag[1], steps_per_worker=self.counts())

    def failed(self, worker: int, exc: BaseException) -> None:
        """A step failed on ``worker``; TensorFlow puts it back for another worker (or fails the script)."""
        with self.lock:
            self.lost[worker] += 1
            self.lost_errors.setdefault(worker, error_line(exc))
        self.status.write(lost_steps={str(w): n for w, n in self.lost.items()})

    def joined(self) -> None:
        """``ClusterCoordinator.join()`` returned: in a custom loop, the epoch in progress ends here."""
        if self.keras or not self.open_epoch or self.ended:
            return
        with self.lock:
            epoch, length = self.steplog.current_epoch, self.in_epoch
            row = self.steplog.epoch_end(epoch, {})
            self.open_epoch, self.in_epoch = False, 0
        lengths = self.plan.setdefault("_lengths", [])
        lengths.append(length)
        self.plan.update(epochs=len(lengths), steps_per_epoch=length if len(set(lengths)) == 1 else None)
        self.status.write(plan=self._plan())
        self.observer.epoch(epoch, row)

    # -- Keras fit ---------------------------------------------------------------------------------------------
    def callbacks(self, base: type) -> list[Any]:
        """Epoch-level callbacks only: ParameterServerStrategy refuses batch hooks on the chief."""
        part = self

        class _Plan(base):  # type: ignore[misc,valid-type]
            _supports_tf_logs = True

            def on_train_begin(self, logs: Any = None) -> None:
                params = self.params or {}
                part.plan.update(epochs=int(params.get("epochs") or 0), steps_per_epoch=params.get("steps"))
                part.status.write(plan=part._plan(), epochs=part.plan["epochs"],
                                  steps_per_epoch=part.plan["steps_per_epoch"] or 0)

            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                with part.lock:
                    part.in_epoch = 0

            def on_train_end(self, logs: Any = None) -> None:
                part.finishing()

        epochs = keras_callback(self.steplog, on_epoch=self.observer.epoch, batches=False, base=base)
        return [epochs, _Plan()]

    def batch_seen(self, global_batch: int | None) -> None:
        """Samples per step (one worker's step on one batch of its dataset), once known."""
        if global_batch and not self.plan.get("global_batch"):
            self.plan["global_batch"] = global_batch
            for steplog in self.logs:
                steplog.samples_per_step = global_batch

    # -- the end -----------------------------------------------------------------------------------------------
    def finishing(self) -> None:
        try:
            self.save()
        except OSError as exc:
            log.warning("could not save the steps at the end of fit: %s", exc)
        self.status.write(state="finishing")

    def end(self, exc: BaseException | None) -> None:
        if self.ended:
            return
        self.joined()  # a custom loop that ends without a last join: its last epoch still counts
        with self.lock:
            self.ended = True
        self.status.write(plan=self._plan())
        close_part(self.status, self.save, exc)

    # -- records -----------------------------------------------------------------------------------------------
    def counts(self) -> list[int]:
        return [steplog.steps_recorded for steplog in self.logs]

    def position(self) -> dict[str, Any]:
        """The heartbeat's progress: the chief's epoch events and every step a worker finished."""
        return {**self.steplog.position(), "progress": self.steplog.events + self.completed}

    def _plan(self) -> dict[str, Any]:
        plan = {k: v for k, v in self.plan.items() if not k.startswith("_")}
        if not self.keras or self.rule != "Keras fit":
            plan["step_function"] = {"name": self.step_name, "rule": self.rule,
                                     "scheduled": dict(self.scheduled.most_common(10))}
        plan["coordinator"] = {"steps_per_worker": self.counts(),
                               "lost_steps": {str(w): n for w, n in self.lost.items()},
                               "lost_errors": {str(w): e for w, e in self.lost_errors.items()}}
        return plan

    def _save_workers(self) -> None:
        with self.lock:
            frames = [(i, steplog.steps_frame()) for i, steplog in enumerate(self.logs)]
        for i, frame in frames:
            wdir = self.run_dir / "workers" / str(i)
            wdir.mkdir(parents=True, exist_ok=True)
            write_parquet(wdir / "steps.parquet", frame.assign(attempt=self.ctx.attempt))
