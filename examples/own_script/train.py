"""A training script of your own, put under perfkit with two lines (see docs/own-script.md).

    perfkit launch --mode single -- python examples/own_script/train.py
    perfkit launch --workers 2  -- python examples/own_script/train.py
    perfkit analyze

It uses MultiWorkerMirroredStrategy when TF_CONFIG names a cluster (perfkit launch sets it, as Kubeflow's
TFJob or Vertex AI would) and the default strategy otherwise. ``--no-record`` runs it without perfkit.record:
perfkit then knows only each process's CPU, memory and exit status.
"""

import argparse
import contextlib
import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf-keras: what MultiWorkerMirroredStrategy trains with

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--samples", type=int, default=40_000)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()

    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    multi = len(cluster.get("worker", [])) + len(cluster.get("chief", [])) > 1
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if multi else tf.distribute.get_strategy()

    rng = np.random.default_rng(7)
    x = rng.normal(size=(args.samples, 32)).astype("float32")
    y = (x[:, :4].sum(axis=1) + 0.5 * rng.normal(size=args.samples) > 0).astype("float32")
    split = args.samples * 4 // 5
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA

    def batches(lo: int, hi: int) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((x[lo:hi], y[lo:hi])).batch(args.global_batch, drop_remainder=True)
        return ds.with_options(options)

    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(256, activation="relu"),
                                     tf.keras.layers.Dense(256, activation="relu"),
                                     tf.keras.layers.Dense(1, activation="sigmoid")])
        model.compile("adam", "binary_crossentropy", metrics=["accuracy"])

    recording = contextlib.nullcontext(None)
    if not args.no_record:
        import perfkit

        recording = perfkit.record(global_batch=args.global_batch)
    with recording as rec:
        model.fit(batches(0, split).repeat(), epochs=args.epochs, steps_per_epoch=split // args.global_batch,
                  validation_data=batches(split, args.samples), callbacks=rec.callbacks if rec else [], verbose=0)


if __name__ == "__main__":
    main()
