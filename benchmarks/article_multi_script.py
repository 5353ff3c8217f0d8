"""The article's multi-worker training script, in its shape (seeds/000): ``MultiWorkerMirroredStrategy`` when
``TF_CONFIG`` names a cluster (``perfkit launch`` sets it), the LSTM on 7 days x 18 features,
``from_tensor_slices(...).shuffle(10000).batch(global_batch).repeat()`` and ``model.fit(...,
steps_per_epoch=..., class_weight={1: 4, 0: 1})``. The data are random arrays of the article's shapes
(nothing is downloaded); ``--units`` shrinks the LSTM for tests (the article's: 256 and 128, ~440k
parameters). ``--finite`` feeds fit a dataset that ends each epoch instead (no ``repeat()``, no
``steps_per_epoch``). It imports nothing of perfkit: the healthy-runs benchmark and the tests launch it
unmodified, as a user's own script.

    perfkit launch --workers 4 -- python -m benchmarks.article_multi_script --samples 60000 --epochs 3
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # the article's tf.keras was Keras 2
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FIT_BEGAN_MARK = "fit began at "
LAST_STEP_MARK = "last step ended at "


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=60_000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--global-batch", type=int, default=1024)
    p.add_argument("--units", type=int, nargs=2, default=(256, 128), help="the two LSTM layers' units")
    p.add_argument("--finite", action="store_true", help="a dataset that ends each epoch, no steps_per_epoch")
    p.add_argument("--after-fit", type=float, default=0.0, metavar="S",
                   help="seconds of the script's own work after fit (a model being saved), slept")
    args = p.parse_args(argv)

    import numpy as np
    import tensorflow as tf

    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    multi = len(cluster.get("worker", [])) + len(cluster.get("chief", [])) > 1
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if multi else tf.distribute.MirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.samples, 7, 18)).astype("float32")
    y = (rng.random(args.samples) < 0.2).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10000).batch(args.global_batch)
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input((7, 18)), tf.keras.layers.LSTM(args.units[0], return_sequences=True),
            tf.keras.layers.LSTM(args.units[1]), tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(1, activation="sigmoid")])
        model.compile("adam", "binary_crossentropy", metrics=["accuracy"])
    steps = None if args.finite else args.samples // args.global_batch
    # When fit began and its last step ended, wall clock: what a benchmark needs to time this process's exit
    # after its last step when it runs bare, and to place that step among tf.data's autotuner passes.
    mark = tf.keras.callbacks.LambdaCallback(
        on_train_begin=lambda logs: print(f"{FIT_BEGAN_MARK}{time.time():.3f}", flush=True),
        on_train_end=lambda logs: print(f"{LAST_STEP_MARK}{time.time():.3f}", flush=True))
    history = model.fit(ds if args.finite else ds.repeat(), epochs=args.epochs, steps_per_epoch=steps,
                        class_weight={1: 4, 0: 1}, verbose=0, callbacks=[mark])
    print(f"trained {len(history.history['loss'])} epochs, {model.count_params()} parameters", flush=True)
    time.sleep(args.after_fit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
