"""The one callback the plain benchmark scripts add: epoch, training and validation times.

It overrides no batch hook, so Keras keeps skipping its per-step callback machinery exactly as in an
uninstrumented ``fit`` (tf-keras calls batch hooks only when some callback implements them). Training time
is epoch begin -> validation begin, validation time its begin -> end, as perfkit's step recorder measures
them; ``wall_s`` is epoch begin -> epoch end.
"""

from __future__ import annotations

import json
import time
from typing import Any

from benchmarks._runs import JSON_MARK


def epoch_timer() -> Any:
    from perfkit._tf import keras

    class EpochTimer(keras().callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.epochs: list[dict[str, Any]] = []
            self._t0 = self._v0 = self._v1 = 0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._t0 = time.monotonic_ns()
            self._v0 = self._v1 = 0

        def on_test_begin(self, logs: Any = None) -> None:
            self._v0 = time.monotonic_ns()

        def on_test_end(self, logs: Any = None) -> None:
            self._v1 = time.monotonic_ns()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            end = time.monotonic_ns()
            train_end = self._v0 or end
            logs = logs or {}
            self.epochs.append({
                "epoch": epoch + 1,
                "wall_s": (end - self._t0) / 1e9,
                "train_s": (train_end - self._t0) / 1e9,
                "val_s": (self._v1 - self._v0) / 1e9 if self._v0 and self._v1 else 0.0,
                "loss": _num(logs.get("loss")),
                "val_accuracy": _num(logs.get("val_accuracy")),
            })

    return EpochTimer()


def _num(x: Any) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def emit(result: dict[str, Any]) -> None:
    """The script's result as one stdout line the benchmark finds among TensorFlow's output."""
    print(JSON_MARK + json.dumps(result), flush=True)
