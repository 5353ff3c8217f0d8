"""Parameter-server training on synthetic data, written the way TensorFlow's tutorial runs it on a real cluster.

A plain training script with no perfkit import, shaped like "Parameter server training with
ParameterServerStrategy" (tensorflow.org/tutorials/distribute/parameter_server_training), section "Clusters in
the real world": one program started once per task, its role read from ``TF_CONFIG``. Workers and parameter
servers start a ``tf.distribute.Server`` and block in ``server.join()``; the chief builds the strategy and
trains, either with Keras ``fit`` (``--loop fit``, the default) or with a custom loop that schedules each step
on whichever worker is free through ``ClusterCoordinator.schedule`` and joins at each epoch's end
(``--loop custom``). The data are generated (a noisy linear rule over 16 features), so nothing is downloaded.

    perfkit launch --mode ps --workers 1 --ps 1 -- python examples/ps_training/train.py   # a baseline
    perfkit launch --mode ps --workers 2 --ps 1 -- python examples/ps_training/train.py
    perfkit launch --mode ps --workers 2 -- python examples/ps_training/train.py --loop custom

With no ps task in TF_CONFIG the same Keras fit trains synchronously (MultiWorkerMirroredStrategy), and without
TF_CONFIG alone, so that asynchronous training can be set against both:

    perfkit launch --mode single -- python examples/ps_training/train.py                  # the baseline
    perfkit launch --workers 2 -- python examples/ps_training/train.py

The chief prints one line per epoch, timed by the script itself, and the steps it trained:

    epoch 2/3: loss 0.3456 accuracy 0.8600 time 1.2345 s
    trained 60 steps
"""

import argparse
import os
import sys
import time

# Keras 2 (tf-keras): the tutorial's optimizer and DatasetCreator are tf-keras APIs.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf

FEATURES = 16
POOL_SIZE = 8192  # distinct samples; the dataset repeats them


def synthetic(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Samples whose label is a noisy linear rule of the features: the loss falls as the model learns it."""
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=FEATURES).astype("float32")
    x = rng.normal(size=(POOL_SIZE, FEATURES)).astype("float32")
    y = ((x @ weights + rng.normal(scale=0.5, size=POOL_SIZE)) > 0).astype("int64")
    return x, y


def dataset_fn(global_batch: int):
    """The per-worker dataset: each worker reads its own shuffled copy (the tutorial's input_context form)."""
    x, y = synthetic()

    def make(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        batch = input_context.get_per_replica_batch_size(global_batch)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(POOL_SIZE, seed=input_context.input_pipeline_id)
        return ds.repeat().batch(batch).prefetch(2)

    return make


def build_model(units: int) -> tf.keras.Model:
    return tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
        tf.keras.layers.Dense(units, activation="relu"),
        tf.keras.layers.Dense(units, activation="relu"),
        tf.keras.layers.Dense(2),
    ])


def serve(resolver: tf.distribute.cluster_resolver.ClusterResolver) -> None:
    """A worker or parameter server: serve the chief until the job is stopped."""
    # The tutorial's setting: a call to an unavailable peer fails fast, so the chief can reschedule it.
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc", start=True)
    server.join()


def train_fit(strategy, args) -> int:
    with strategy.scope():
        model = build_model(args.units)
        model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.05), metrics=["accuracy"],
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      steps_per_execution=1)
    data = tf.keras.utils.experimental.DatasetCreator(dataset_fn(args.global_batch))
    timer = EpochLine(args.epochs)
    model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=0, callbacks=[timer])
    return int(model.optimizer.iterations.numpy())


class EpochLine(tf.keras.callbacks.Callback):
    """Each epoch's loss, accuracy and wall time (epoch hooks only: ParameterServerStrategy refuses batch hooks)."""

    def __init__(self, epochs: int) -> None:
        super().__init__()
        self.epochs, self._start = epochs, 0.0

    def on_epoch_begin(self, epoch: int, logs=None) -> None:
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs=None) -> None:
        logs = logs or {}
        print(f"epoch {epoch + 1}/{self.epochs}: loss {float(logs.get('loss', np.nan)):.4f} accuracy "
              f"{float(logs.get('accuracy', np.nan)):.4f} time {time.perf_counter() - self._start:.4f} s", flush=True)


def train_custom(strategy, args) -> int:
    """The tutorial's custom loop: schedule steps on whichever worker is free, join at each epoch's end."""
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = build_model(args.units)
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
        accuracy = tf.keras.metrics.SparseCategoricalAccuracy()
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn(args.global_batch))

    per_worker_iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    @tf.function
    def step_fn(iterator):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=args.global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            accuracy.update_state(y, logits)
            return loss

        losses = strategy.run(replica_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    for epoch in range(args.epochs):
        accuracy.reset_state()
        start = time.perf_counter()
        for _ in range(args.steps_per_epoch):
            loss = coordinator.schedule(step_fn, args=(per_worker_iterator,))
        coordinator.join()
        print(f"epoch {epoch + 1}/{args.epochs}: loss {float(loss.fetch()):.4f} accuracy "
              f"{float(accuracy.result()):.4f} time {time.perf_counter() - start:.4f} s", flush=True)
    return int(optimizer.iterations.numpy())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loop", choices=("fit", "custom"), default="fit")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps-per-epoch", type=int, default=20)
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--units", type=int, default=256)
    args = ap.parse_args()

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if not resolver.cluster_spec().as_dict().get("ps"):
        # No parameter servers: the same model trained synchronously (MultiWorkerMirroredStrategy, each worker
        # a share of the global batch) or, without TF_CONFIG, alone: what asynchronous training is compared with.
        if args.loop != "fit":
            sys.exit("--loop custom schedules steps through ClusterCoordinator: it needs ps tasks in TF_CONFIG")
        alone = not resolver.cluster_spec().as_dict()
        strategy = tf.distribute.get_strategy() if alone else tf.distribute.MultiWorkerMirroredStrategy()
        print(f"trained {train_fit(strategy, args)} steps", flush=True)
        return
    if resolver.task_type in ("worker", "ps"):
        serve(resolver)
        return
    if resolver.task_type != "chief":
        sys.exit(f"TF_CONFIG: task type {resolver.task_type!r}; this script runs as chief, worker or ps")
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    steps = train_fit(strategy, args) if args.loop == "fit" else train_custom(strategy, args)
    print(f"trained {steps} steps", flush=True)


if __name__ == "__main__":
    main()
