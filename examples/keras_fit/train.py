"""Multi-worker Keras ``fit`` on synthetic MNIST-shaped data, written as TensorFlow's tutorial writes it.

A plain training script with no perfkit import, shaped like "Multi-worker training with Keras"
(tensorflow.org/tutorials/distribute/multi_worker_with_keras): ``MultiWorkerMirroredStrategy``, a global
batch of per-worker batch x workers, a small CNN built and compiled under ``strategy.scope()``, and
``model.fit(dataset, epochs=..., steps_per_epoch=...)``. The data are generated (28x28 "pixels", 10
classes), so nothing is downloaded. Without TF_CONFIG the strategy is one local worker.

    python examples/keras_fit/train.py [--epochs 3 --steps-per-epoch 20 --per-worker-batch 64]
    perfkit launch --mode single -- python examples/keras_fit/train.py
    perfkit launch --workers 2 -- python examples/keras_fit/train.py

It prints one line per epoch, timed by the script itself, and the number of steps it trained:

    epoch 2/3: loss 1.2345 accuracy 0.5600 time 0.8123 s
    trained 60 steps
"""

import argparse
import os
import time

# tf.keras must be tf-keras (Keras 2): Keras 3's fit fails under MultiWorkerMirroredStrategy
# (keras-team/keras#20585). The tutorial sets this too; perfkit launch sets it, a user's own value wins.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf

IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10
POOL_SIZE = 4096  # distinct samples; the dataset repeats them, as the tutorial repeats MNIST
SHUFFLE_BUFFER = 1024


def synthetic_pixels(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """MNIST-shaped samples in [0, 1]: each class a fixed random template under noise, so the
    loss falls as on real digits. Same seed on every worker, so each shard sees the same data set."""
    rng = np.random.default_rng(seed)
    templates = rng.uniform(size=(NUM_CLASSES, *IMAGE_SHAPE)).astype("float32")
    labels = rng.integers(0, NUM_CLASSES, size=POOL_SIZE).astype("int64")
    noise = rng.uniform(size=(POOL_SIZE, *IMAGE_SHAPE)).astype("float32")
    return 0.3 * templates[labels] + 0.7 * noise, labels


def make_dataset(global_batch: int) -> tf.data.Dataset:
    x, y = synthetic_pixels()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(SHUFFLE_BUFFER, seed=0).repeat().batch(global_batch)
    # In-memory tensors have no files to shard by: say DATA rather than have AUTO fall back with a warning.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def build_and_compile_model() -> tf.keras.Model:
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=IMAGE_SHAPE),
        tf.keras.layers.Reshape((*IMAGE_SHAPE, 1)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(NUM_CLASSES),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.05), metrics=["accuracy"])
    return model


class EpochLine(tf.keras.callbacks.Callback):
    """Prints each epoch's loss, accuracy and wall time. Only epoch hooks: a callback with batch hooks
    would make Keras run its per-step callback machinery and slow every step."""

    def __init__(self, epochs: int) -> None:
        super().__init__()
        self.epochs = epochs
        self._start = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        elapsed = time.perf_counter() - self._start
        logs = logs or {}
        print(f"epoch {epoch + 1}/{self.epochs}: loss {logs.get('loss', float('nan')):.4f} "
              f"accuracy {logs.get('accuracy', float('nan')):.4f} time {elapsed:.4f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps-per-epoch", type=int, default=20)
    ap.add_argument("--per-worker-batch", type=int, default=64)
    args = ap.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.per_worker_batch * strategy.num_replicas_in_sync
    dataset = make_dataset(global_batch)
    with strategy.scope():  # variables made here are mirrored on every worker
        model = build_and_compile_model()
    model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=0,
              callbacks=[EpochLine(args.epochs)])
    # The optimizer counts the steps that really ran, not the ones asked for.
    print(f"trained {int(model.optimizer.iterations.numpy())} steps", flush=True)


if __name__ == "__main__":
    main()
