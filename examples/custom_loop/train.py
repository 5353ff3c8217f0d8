"""A multi-worker custom training loop on synthetic MNIST-shaped data, written as TensorFlow's tutorial
writes it.

A plain training script with no perfkit import, shaped like "Custom training loop with Keras and
MultiWorkerMirroredStrategy" (tensorflow.org/tutorials/distribute/multi_worker_with_ctl): a per-worker
dataset from ``strategy.distribute_datasets_from_function``, model and optimizer made under
``strategy.scope()``, a ``tf.function`` step that runs ``strategy.run`` and sums the replicas' losses, and
a Python loop over epochs and steps. The data are generated (28x28 "pixels", 10 classes), so nothing is
downloaded. Without TF_CONFIG the strategy is one local worker. One difference from the tutorial: one
iterator serves every epoch (``--iterator-per-epoch`` makes a new one each epoch, as the tutorial does).

    python examples/custom_loop/train.py [--epochs 3 --steps-per-epoch 20 --per-worker-batch 64]
    perfkit launch --mode single -- python examples/custom_loop/train.py
    perfkit launch --workers 2 -- python examples/custom_loop/train.py

It prints one line per epoch, timed by the script itself, and the number of steps it trained:

    epoch 2/3: loss 1.2345 accuracy 0.5600 time 0.8123 s
    trained 60 steps
"""

import argparse
import os
import time

# tf.keras must be tf-keras (Keras 2), as under perfkit launch: the tutorial's optimizer and metric are
# tf-keras objects, and Keras 3 does not train under MultiWorkerMirroredStrategy (keras-team/keras#20585).
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf

IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10
POOL_SIZE = 4096  # distinct samples; the dataset repeats them, as the tutorial repeats MNIST
SHUFFLE_BUFFER = 1024


def synthetic_pixels(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """MNIST-shaped samples in [0, 1]: each class a fixed random template under noise, so the
    loss falls as on real digits. Same seed on every worker, so the shards split one data set."""
    rng = np.random.default_rng(seed)
    templates = rng.uniform(size=(NUM_CLASSES, *IMAGE_SHAPE)).astype("float32")
    labels = rng.integers(0, NUM_CLASSES, size=POOL_SIZE).astype("int64")
    noise = rng.uniform(size=(POOL_SIZE, *IMAGE_SHAPE)).astype("float32")
    return 0.3 * templates[labels] + 0.7 * noise, labels


def dataset_fn(global_batch: int, input_context: tf.distribute.InputContext) -> tf.data.Dataset:
    """One worker's input pipeline: its own shard, batched to its share of the global batch."""
    batch = input_context.get_per_replica_batch_size(global_batch)
    x, y = synthetic_pixels()
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.shuffle(SHUFFLE_BUFFER, seed=0).repeat().batch(batch)


def build_model() -> tf.keras.Model:
    return tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=IMAGE_SHAPE),
        tf.keras.layers.Reshape((*IMAGE_SHAPE, 1)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(NUM_CLASSES),
    ])


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps-per-epoch", type=int, default=20)
    ap.add_argument("--per-worker-batch", type=int, default=64)
    ap.add_argument("--iterator-per-epoch", action="store_true",
                    help="a new iterator every epoch, as the tutorial makes one (its creation is then timed too)")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.per_worker_batch * strategy.num_replicas_in_sync
    dataset = strategy.distribute_datasets_from_function(lambda ctx: dataset_fn(global_batch, ctx))

    with strategy.scope():  # variables made here are mirrored on every worker
        model = build_model()
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
        train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
    # NONE: each replica's per-example losses, averaged over the *global* batch by compute_average_loss.
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE)

    def step_fn(inputs: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        x, y = inputs
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_object(y, logits), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_accuracy.update_state(y, logits)
        return loss

    @tf.function
    def train_step(iterator: tf.distribute.DistributedIterator) -> tf.Tensor:
        per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    steps = 0
    # One iterator over the repeated dataset. The tutorial makes a new one each epoch; here that costs
    # 50-400 ms, erratically, which the epoch times would measure instead of the steps.
    iterator = iter(dataset)
    for epoch in range(args.epochs):
        start = time.perf_counter()
        if args.iterator_per_epoch:
            iterator = iter(dataset)
        total_loss, num_batches = 0.0, 0
        while num_batches < args.steps_per_epoch:
            total_loss += train_step(iterator)
            num_batches += 1
        train_loss = float(total_loss / num_batches)  # reading the value waits for the last step
        elapsed = time.perf_counter() - start
        steps += num_batches
        print(f"epoch {epoch + 1}/{args.epochs}: loss {train_loss:.4f} "
              f"accuracy {float(train_accuracy.result()):.4f} time {elapsed:.4f} s", flush=True)
        train_accuracy.reset_state()
    print(f"trained {steps} steps", flush=True)


if __name__ == "__main__":
    main()
