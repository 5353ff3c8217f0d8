"""perfkit's single-mode workload with every instrument taken out (benchmark ``overhead``'s side A).

The same data (perfkit's cache), input pipeline (``perfkit.workloads.pipeline``), strategy (MirroredStrategy),
model and ``fit`` arguments as ``perfkit.trainer.worker.fit.fit``, but no CPU sampler thread, no step
recorder, no TensorBoard scalars and no profiler window: only ``bench._timing``'s epoch timer.

    python -m benchmarks.bare_workload --preset quick --cache-dir results/datasets
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from perfkit.config import PRESETS, Mode, RunConfig


def train(cfg: RunConfig, cache_dir: Path) -> dict[str, object]:
    from benchmarks._timing import epoch_timer
    from perfkit.trainer.worker.strategy import mirrored
    from perfkit.workloads import pipeline
    from perfkit.workloads.botdetector.data import prepare
    from perfkit.workloads.botdetector.model import build_model

    data = prepare(data_path=None, cache_dir=cache_dir, train_players=cfg.train_players,
                   test_players=cfg.test_players, seed=cfg.seed, sequence_length=cfg.sequence_length)
    strategy, _ = mirrored()
    steps = pipeline.steps_per_epoch(len(data.y_train), cfg.batch_size)
    val_steps = pipeline.steps_per_epoch(len(data.y_test), cfg.batch_size, "validation")
    train_ds = pipeline.train_input(data.x_train, data.y_train, cfg.batch_size, cfg.seed, cfg.class_weight)
    val_ds = pipeline.eval_input(data.x_test, data.y_test, cfg.batch_size)
    with strategy.scope():
        model = build_model(data.x_train.shape[1], data.x_train.shape[2])
    timer = epoch_timer()
    start = time.perf_counter()
    with pipeline.device_datasets_without_autotune():  # as worker.fit: no tf.data autotuner wait at the end
        model.fit(train_ds, epochs=cfg.epochs, steps_per_epoch=steps, validation_data=val_ds,
                  validation_steps=val_steps, callbacks=[timer], verbose=0)
    return {"script": "bare_workload", "preset": cfg.preset, "steps_per_epoch": steps, "batch_size": cfg.batch_size,
            "params": int(model.count_params()), "fit_s": time.perf_counter() - start,
            "data": data.info["path"], "epochs": timer.epochs}


def main(argv: list[str] | None = None) -> int:
    from benchmarks._timing import emit

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=list(PRESETS), default="quick")
    p.add_argument("--cache-dir", type=Path, default=Path("results/datasets"))
    p.add_argument("--train-players", type=int, default=None, help="override the preset's (as perfkit run)")
    p.add_argument("--test-players", type=int, default=None, help="override the preset's (as perfkit run)")
    args = p.parse_args(argv)
    cfg = RunConfig.from_preset(Mode.single, args.preset, train_players=args.train_players,
                                test_players=args.test_players)
    emit(train(cfg, args.cache_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
