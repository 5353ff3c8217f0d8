"""The built-in workload trained with none of perfkit's instruments: the bare side of ``perfkit check overhead``.

The same data (perfkit's cache), input pipeline, strategy (MirroredStrategy), model and ``fit`` arguments as
a ``perfkit run --mode single`` worker, but no CPU sampler thread, no step recorder, no TensorBoard scalars
and no trace window. One callback times each epoch; it has no batch hook, so Keras skips its per-step
callback machinery exactly as in a ``fit`` nobody instruments. The result is one line on stdout, after
``RESULT_MARK``, which TensorFlow's own output never starts with.

    python -m perfkit.trainer.worker.bare --preset quick --cache-dir results/datasets
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from perfkit.config import PRESETS, Mode, RunConfig
from perfkit.workloads.botdetector.params import BotParams, configure

RESULT_MARK = "PERFKIT_RESULT "


def epoch_timer() -> Any:
    """A Keras callback recording, per epoch, its wall time (begin -> end), training and validation time."""
    from perfkit._tf import keras

    class EpochTimer(keras().callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.epochs: list[dict[str, Any]] = []
            self._t0 = self._v0 = self._v1 = 0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._t0, self._v0, self._v1 = time.monotonic_ns(), 0, 0

        def on_test_begin(self, logs: Any = None) -> None:
            self._v0 = time.monotonic_ns()

        def on_test_end(self, logs: Any = None) -> None:
            self._v1 = time.monotonic_ns()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            end, logs = time.monotonic_ns(), logs or {}
            self.epochs.append({
                "epoch": epoch + 1, "wall_s": (end - self._t0) / 1e9, "train_s": ((self._v0 or end) - self._t0) / 1e9,
                "val_s": (self._v1 - self._v0) / 1e9 if self._v0 and self._v1 else 0.0,
                "loss": _number(logs.get("loss")), "val_accuracy": _number(logs.get("val_accuracy")),
            })

    return EpochTimer()


def _number(x: Any) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def train(cfg: RunConfig, cache_dir: Path, strategy: Any = None) -> dict[str, Any]:
    """Train ``cfg``'s built-in workload bare under ``strategy`` (default: MirroredStrategy, as single mode);
    what was trained and each epoch's times."""
    from perfkit.trainer.worker.strategy import mirrored
    from perfkit.workloads import pipeline
    from perfkit.workloads.botdetector.data import prepare
    from perfkit.workloads.botdetector.model import build_model

    bot = BotParams.of(cfg)
    data = prepare(data_path=None, cache_dir=cache_dir, train_players=bot.train_players,
                   test_players=bot.test_players, seed=cfg.seed, sequence_length=bot.sequence_length)
    if strategy is None:
        strategy, _ = mirrored()
    steps = pipeline.steps_per_epoch(len(data.y_train), cfg.batch_size)
    val_steps = pipeline.steps_per_epoch(len(data.y_test), cfg.batch_size, "validation")
    train_ds = pipeline.train_input(data.x_train, data.y_train, cfg.batch_size, cfg.seed, bot.class_weight)
    val_ds = pipeline.eval_input(data.x_test, data.y_test, cfg.batch_size)
    with strategy.scope():
        model = build_model(data.x_train.shape[1], data.x_train.shape[2])
    timer = epoch_timer()
    start = time.perf_counter()
    with pipeline.device_datasets_without_autotune():  # as a perfkit worker's fit: no autotuner wait at the end
        model.fit(train_ds, epochs=cfg.epochs, steps_per_epoch=steps, validation_data=val_ds,
                  validation_steps=val_steps, callbacks=[timer], verbose=0)
    return {"script": "bare", "preset": cfg.preset, "steps_per_epoch": steps, "batch_size": cfg.batch_size,
            "params": int(model.count_params()), "fit_s": time.perf_counter() - start,
            "data": data.info["path"], "epochs": timer.epochs}


def emit(result: dict[str, Any]) -> None:
    print(RESULT_MARK + json.dumps(result), flush=True)


def read_result(stdout: str) -> dict[str, Any] | None:
    """The last result line a script printed with ``emit`` among TensorFlow's output, or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            try:
                return json.loads(line[len(RESULT_MARK):])
            except ValueError:
                return None
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perfkit.trainer.worker.bare", description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=list(PRESETS), default="quick")
    p.add_argument("--cache-dir", type=Path, default=Path("results/datasets"))
    p.add_argument("--epochs", type=int, default=None, help="override the preset's (as perfkit run)")
    p.add_argument("--train-players", type=int, default=None, help="override the preset's (as perfkit run)")
    p.add_argument("--test-players", type=int, default=None, help="override the preset's (as perfkit run)")
    args = p.parse_args(argv)
    cfg = configure(RunConfig.from_preset(Mode.single, args.preset, epochs=args.epochs),
                    train_players=args.train_players, test_players=args.test_players)
    emit(train(cfg, args.cache_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
