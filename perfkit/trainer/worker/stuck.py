"""A plain multi-worker Keras fit whose worker ``--stuck-worker`` gets stuck in its own code at batch
``--at-batch`` of the first epoch: ``sleep`` (a long time.sleep) or ``lock`` (acquiring a lock it already holds,
a deadlock). The script ``perfkit check faults`` launches for its ``sleep`` and ``lock`` faults (run by its
path, as a user's script): the stuck worker must be named, its peers as waiting for it."""

import argparse
import json
import os
import threading
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


class GetStuck(tf.keras.callbacks.Callback):
    def __init__(self, at_batch: int, how: str) -> None:
        super().__init__()
        self.at_batch, self.how = at_batch, how

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if batch != self.at_batch:
            return
        print(f"stuck at batch {batch} ({self.how})", flush=True)
        if self.how == "lock":
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()  # never returns
        time.sleep(3600)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stuck-worker", type=int, default=1)
    ap.add_argument("--at-batch", type=int, default=20)
    ap.add_argument("--how", choices=("sleep", "lock"), default="sleep")
    ap.add_argument("--steps-per-epoch", type=int, default=60)
    args = ap.parse_args()
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index", 0)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(1024, 16)).astype("float32"), rng.integers(0, 2, size=1024)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu", input_shape=(16,)),
                                     tf.keras.layers.Dense(2)])
        model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), optimizer="sgd")
    callbacks = [GetStuck(args.at_batch, args.how)] if task == args.stuck_worker else []
    model.fit(ds, epochs=2, steps_per_epoch=args.steps_per_epoch, verbose=0, callbacks=callbacks)


if __name__ == "__main__":
    main()
