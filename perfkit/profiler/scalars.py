"""Epoch scalars (every numeric value the model logs: for the bot detector loss, accuracy, AUC and their
validation twins; and this process's mean CPU%) as TensorBoard
events, so the Scalars tab compares runs and workers side by side. Like the trace window, a failure to
write them is logged once and never stops training."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)



class CpuMeter:
    """Mean CPU% of this process (100 = one core) between two calls."""

    def __init__(self) -> None:
        import psutil

        self._proc = psutil.Process()
        self._last = self._read()

    def _read(self) -> tuple[float, float]:
        t = self._proc.cpu_times()
        return time.monotonic(), t.user + t.system

    def lap(self) -> float:
        now = self._read()
        (w0, c0), (w1, c1) = self._last, now
        self._last = now
        return 100.0 * (c1 - c0) / (w1 - w0) if w1 > w0 else math.nan


def epoch_values(logs: Mapping[str, Any], cpu_percent: float, epoch_s: float) -> dict[str, float]:
    """Every numeric value the model logged (for the bot detector: loss, accuracy, AUC, precision, recall and their
    validation twins), this process's CPU% and the epoch's seconds."""
    from perfkit.profiler.steps import log_number

    values = {str(k): v for k, v in ((k, log_number(x)) for k, x in logs.items()) if v is not None}
    values["cpu_percent"] = cpu_percent
    values["epoch_s"] = epoch_s
    return {k: v for k, v in values.items() if not math.isnan(v)}


class EpochScalars:
    """One TensorBoard point per epoch for each scalar, into ``logdir`` (one TensorBoard run per process);
    driven by the Keras callback below or by a custom loop's epochs."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self._writer: Any = None
        self._broken = False
        self._meter = CpuMeter()
        self._t0 = time.monotonic()

    def open(self) -> None:
        """Create the event file now (a few hundred ms the first time in a process), before the epochs are timed."""
        if self._writer is not None or self._broken:
            return
        from perfkit._tf import tf

        try:
            self._writer = tf().summary.create_file_writer(str(self.logdir))
        except Exception as exc:  # noqa: BLE001 - scalars are a courtesy, training goes on
            self._broken = True
            log.warning("could not write TensorBoard scalars to %s: %s", self.logdir, exc)

    def begin(self) -> None:
        self._meter.lap()
        self._t0 = time.monotonic()

    def end(self, epoch: int, logs: Mapping[str, Any]) -> None:
        if self._broken:
            return
        from perfkit._tf import tf

        values = epoch_values(logs, self._meter.lap(), time.monotonic() - self._t0)
        try:
            if self._writer is None:
                self._writer = tf().summary.create_file_writer(str(self.logdir))
            with self._writer.as_default():
                for name, value in values.items():
                    tf().summary.scalar(f"epoch/{name}", value, step=epoch + 1)
            self._writer.flush()
        except Exception as exc:  # noqa: BLE001 - scalars are a courtesy, training goes on
            self._broken = True
            log.warning("could not write TensorBoard scalars to %s: %s", self.logdir, exc)

    def close(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("could not close the TensorBoard writer: %s", exc)
            self._writer = None


def keras_callback(logdir: Path, base: type | None = None) -> Any:
    """``EpochScalars`` as a Keras callback (``base``: the Keras in use's Callback class; tf-keras by default)."""
    from perfkit._tf import keras

    class _EpochScalars(base or keras().callbacks.Callback):  # type: ignore[misc]
        _supports_tf_logs = True  # epoch_values reads tensors as numbers

        def __init__(self) -> None:
            super().__init__()
            self.scalars = EpochScalars(logdir)

        def on_train_begin(self, logs: Any = None) -> None:
            self.scalars.open()

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.scalars.begin()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.scalars.end(epoch, logs or {})

        def on_train_end(self, logs: Any = None) -> None:
            self.scalars.close()

    return _EpochScalars()
