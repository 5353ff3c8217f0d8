"""Every training step and every epoch, timed from Keras callbacks.

``StepLog`` is plain Python (testable without TensorFlow); ``keras_callback`` wraps it in a tf-keras
Callback. Times are ``time.monotonic_ns()``; the wall-clock anchor taken at the same instant lets
workers on different hosts be lined up later (wall = anchor_wall_ns + t - anchor_mono_ns).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

METRICS = ("loss", "accuracy", "auc", "precision", "recall")
_TIMES = frozenset(("epoch", "t_start_ns", "t_end_ns", "train_s", "val_s"))  # ours: a log of that name is not kept


def log_number(value: Any) -> float | None:
    """A log value as a float when it is one number (a Python or numpy scalar, a 0-d tensor)."""
    try:
        if hasattr(value, "numpy"):
            value = value.numpy()
        if getattr(value, "ndim", 0):
            return None
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out
EPOCH_METRIC_COLUMNS = METRICS + tuple(f"val_{m}" for m in METRICS)


@dataclass(frozen=True)
class ClockAnchor:
    wall_ns: int
    mono_ns: int

    @classmethod
    def now(cls) -> ClockAnchor:
        return cls(wall_ns=time.time_ns(), mono_ns=time.monotonic_ns())

    def to_wall_ns(self, mono_ns: int) -> int:
        return self.wall_ns + (mono_ns - self.mono_ns)


class StepLog:
    """Live step and epoch records of one process. ``samples_per_step`` is this process's batch.

    A record is one call of the training function: one batch, or with Keras' ``steps_per_execution`` K
    one execution of up to K batches, whose ``step`` is its first batch (the ``step_num`` of tf-keras'
    ``train`` trace marker around it) and whose samples are its batches x ``samples_per_step``."""

    def __init__(self, samples_per_step: int, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.samples_per_step = samples_per_step
        self.anchor = ClockAnchor.now()
        self._clock = clock
        self._steps: list[tuple[int, int, int, int]] = []
        self._batches: list[int] = []  # batches of each record (1 unless several run per execution)
        self._batch_total = 0  # their sum, kept as they come: a heartbeat reads it each second
        self._epochs: list[dict[str, Any]] = []
        self._epoch = 0
        self._epoch_start = 0
        self._step_start = 0
        self._step_first: int | None = None  # the first batch of the running execution, when told
        self._last_step_end = 0
        self._val_start: int | None = None
        self._val_end: int | None = None
        # Every event counts once: what a heartbeat reports as progress (trainer/worker/heartbeat.py).
        self.events = 0

    def epoch_begin(self, epoch: int, at_ns: int | None = None) -> None:
        self.events += 1
        self._epoch, self._epoch_start = epoch, self._clock() if at_ns is None else at_ns
        self._val_start = self._val_end = None

    def step_begin(self, step: int | None = None) -> None:
        """A step (or an execution starting at batch ``step``) begins."""
        self.events += 1
        self._step_start = self._clock()
        self._step_first = step

    def step_end(self, step: int) -> None:
        """The step ends; ``step`` is the last batch it ran. Told where it began (``step_begin(first)``),
        the record is of batches first..step, numbered ``first``."""
        self.events += 1
        self._last_step_end = self._clock()
        first = self._step_first if self._step_first is not None and self._step_first <= step else step
        self._step_first = None
        self._steps.append((self._epoch, first, self._step_start, self._last_step_end))
        self._batches.append(step - first + 1)
        self._batch_total += step - first + 1

    def timed_step(self, step: int, start_ns: int, end_ns: int) -> None:
        """A step of the current epoch timed by the caller (a custom loop's step function call)."""
        self.events += 1
        self._last_step_end = end_ns
        self._steps.append((self._epoch, step, start_ns, end_ns))
        self._batches.append(1)
        self._batch_total += 1

    def add_step(self, epoch: int, step: int, start_ns: int, end_ns: int) -> None:
        """A step timed elsewhere (a ParameterServerStrategy worker times its own steps in the graph)."""
        self.events += 1
        self._steps.append((epoch, step, start_ns, end_ns))
        self._batches.append(1)
        self._batch_total += 1

    def validation_begin(self) -> None:
        self.events += 1
        self._val_start = self._clock()

    def validation_batch(self) -> None:
        self.events += 1

    def validation_end(self) -> None:
        self.events += 1
        self._val_end = self._clock()

    def epoch_end(self, epoch: int, logs: Mapping[str, Any] | None) -> dict[str, Any]:
        self.events += 1
        end = self._clock()
        # Without step callbacks (ParameterServerStrategy allows none) training ends where validation begins.
        train_end = self._last_step_end if self._last_step_end >= self._epoch_start else (self._val_start or end)
        val_s = (self._val_end - self._val_start) / 1e9 if self._val_start and self._val_end else 0.0
        row: dict[str, Any] = {
            "epoch": epoch,
            "t_start_ns": self._epoch_start,
            "t_end_ns": end,
            "train_s": (train_end - self._epoch_start) / 1e9,
            "val_s": val_s,
        }
        logs = logs or {}
        for name in EPOCH_METRIC_COLUMNS:  # the bot detector's, always present (NaN when not logged)
            row[name] = math.nan
        for name, value in logs.items():  # and every numeric value the model logged, whatever the workload
            number = log_number(value)
            if number is not None and name not in _TIMES:
                row[str(name)] = number
        self._epochs.append(row)
        return row

    @property
    def current_epoch(self) -> int:
        return self._epoch

    def position(self) -> dict[str, Any]:
        """How far this process got, for its heartbeat: events so far, the epoch, the last step recorded,
        the batches recorded in all (a watcher's steps/s: ``perfkit watch``) and whether it validates now."""
        last = self._steps[-1][1] + self._batches[-1] - 1 if self._steps else None
        validating = self._val_start is not None and self._val_end is None
        return {"progress": self.events, "epoch": self._epoch, "step": last, "batches": self._batch_total,
                "samples": self._batch_total * self.samples_per_step, "validating": validating}

    @property
    def steps_recorded(self) -> int:
        return len(self._steps)

    @property
    def epochs_recorded(self) -> int:
        return len(self._epochs)

    def steps_frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self._steps, columns=["epoch", "step", "t_start_ns", "t_end_ns"])
        df = df.astype({"epoch": "int32", "step": "int32", "t_start_ns": "int64", "t_end_ns": "int64"})
        df["duration_s"] = (df["t_end_ns"] - df["t_start_ns"]) / 1e9
        df["samples"] = pd.Series([b * self.samples_per_step for b in self._batches], dtype="int64")
        return df

    def epochs_frame(self) -> pd.DataFrame:
        columns = ["epoch", "t_start_ns", "t_end_ns", "train_s", "val_s", *EPOCH_METRIC_COLUMNS]
        extra = sorted({k for row in self._epochs for k in row} - set(columns))
        df = pd.DataFrame(self._epochs, columns=columns + extra)
        # Times and metrics are floats even with no row: an attempt that died before its first epoch end
        # would otherwise give object columns, whose concat with earlier attempts turns NaN into null.
        floats = {c: "float64" for c in df.columns if c not in ("epoch", "t_start_ns", "t_end_ns")}
        return df.astype({"epoch": "int32", "t_start_ns": "int64", "t_end_ns": "int64", **floats})


def keras_callback(log: StepLog, on_step: Callable[[int, int, Mapping[str, Any]], None] | None = None,
                   on_epoch: Callable[[int, Mapping[str, Any]], None] | None = None, batches: bool = True,
                   base: type | None = None) -> Any:
    """A tf-keras Callback feeding ``log``; optional hooks let a progress display follow along. With
    ``batches=False`` it times epochs and validation only: ParameterServerStrategy refuses any callback
    that defines batch hooks. ``base``: the Callback class of the Keras in use (tf-keras by default).

    With ``compile(steps_per_execution=K)`` tf-keras calls ``on_train_batch_begin(first)`` and
    ``on_train_batch_end(first + n - 1)`` once per execution of n <= K batches: one record each, of n
    batches; ``on_step`` is told the last batch done, so a progress display counts batches as before."""
    from perfkit._tf import keras

    class _EpochRecorder(base or keras().callbacks.Callback):  # type: ignore[misc]
        # Logs as tensors: tf-keras would otherwise turn every step's logs into numbers, a wait per step.
        _supports_tf_logs = True

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            log.epoch_begin(epoch)

        def on_test_begin(self, logs: Any = None) -> None:
            log.validation_begin()

        def on_test_end(self, logs: Any = None) -> None:
            log.validation_end()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            row = log.epoch_end(epoch, logs)
            if on_epoch is not None:
                on_epoch(epoch, row)

    class _StepRecorder(_EpochRecorder):
        def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
            log.validation_batch()  # a long validation is progress, not a hang

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            log.step_begin(batch)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            log.step_end(batch)
            if on_step is not None:
                on_step(log.current_epoch, batch, logs or {})

    return _StepRecorder() if batches else _EpochRecorder()
