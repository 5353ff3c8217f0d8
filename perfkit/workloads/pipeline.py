"""tf.data input for every strategy: one input pipeline per worker, each reading only its own shard.

Keras gets a ``DatasetCreator``: the strategy calls the function once per input pipeline with an
``InputContext`` saying which shard this worker reads and its per-replica batch. That is how each worker
of a multi-worker cluster feeds only its own rows (AUTO/DATA sharding would make every worker run the
whole pipeline and drop most of it), and single mode goes through exactly the same code.

Batches are gathered by index (shuffle a range, batch the indices, ``tf.gather`` the rows) rather than
shuffling and batching 716k single elements; ``repeat()`` with ``steps_per_epoch`` keeps one iterator for
the whole fit instead of rebuilding it at every epoch start. Class weights become per-sample weights
inside the pipeline, which is what Keras' ``class_weight`` does, and works under every strategy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from perfkit._tf import keras, tf
from perfkit.errors import UsageError

log = logging.getLogger(__name__)


def steps_per_epoch(n_samples: int, global_batch: int, what: str = "training") -> int:
    steps = n_samples // global_batch
    if steps < 1:
        raise UsageError(f"--batch-size: {global_batch} is larger than the {n_samples} {what} samples")
    return steps


def pipeline(x: np.ndarray, y: np.ndarray, global_batch: int, seed: int | None,
              class_weight: Mapping[int, float] | None, prefetch: int | str = "auto") -> Callable[[Any], Any]:
    """The bot detector's input: ``prefetch`` is the last stage's buffer (``--prefetch``): "auto" is
    ``ds.prefetch(tf.data.AUTOTUNE)``, N > 0 ``ds.prefetch(N)`` batches, 0 no prefetch stage at all."""
    def make(ctx: Any) -> Any:
        t = tf()
        xs = t.constant(x)
        ys = t.constant(y.astype(np.float32).reshape(-1, 1))
        idx = t.data.Dataset.range(int(x.shape[0]))
        if ctx.num_input_pipelines > 1:
            idx = idx.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        if seed is not None:
            idx = idx.shuffle(-(-int(x.shape[0]) // ctx.num_input_pipelines), seed=seed + ctx.input_pipeline_id,
                              reshuffle_each_iteration=True)
        batch = ctx.get_per_replica_batch_size(global_batch)
        ds = idx.repeat().batch(batch, drop_remainder=True)
        if class_weight is None:
            ds = ds.map(lambda i: (t.gather(xs, i), t.gather(ys, i)), num_parallel_calls=t.data.AUTOTUNE)
        else:
            w0, w1 = float(class_weight[0]), float(class_weight[1])

            def rows(i: Any) -> Any:
                yb = t.gather(ys, i)
                return t.gather(xs, i), yb, t.where(yb[:, 0] > 0.5, w1, w0)

            ds = ds.map(rows, num_parallel_calls=t.data.AUTOTUNE)
        # No autotuner: its thread is joined when the iterator is destroyed (see device_datasets_without_autotune)
        # and the step is compute-bound (input get-next ~0.3 ms); AUTOTUNE values get TF's default parallelism.
        if prefetch == "auto":
            ds = ds.prefetch(t.data.AUTOTUNE)
        elif int(prefetch) > 0:
            ds = ds.prefetch(int(prefetch))
        return ds.with_options(_without_autotune())

    return make


def _without_autotune() -> Any:
    options = tf().data.Options()
    options.autotune.enabled = False
    return options


def train_input(x: np.ndarray, y: np.ndarray, global_batch: int, seed: int,
                class_weight: Mapping[int, float]) -> Any:
    """Endless, reshuffled-every-epoch, class-weighted training batches, one shard per worker."""
    return keras().utils.experimental.DatasetCreator(pipeline(x, y, global_batch, seed, class_weight))


def eval_input(x: np.ndarray, y: np.ndarray, global_batch: int) -> Any:
    """Validation batches in order, sharded like training; run for ``steps_per_epoch(len(x), batch)`` steps."""
    return keras().utils.experimental.DatasetCreator(pipeline(x, y, global_batch, None, None))


def creator(make: Callable[[Any, int], Any], global_batch: int, spec: str, what: str,
            prefetch: int | None = None) -> Any:
    """A ``DatasetCreator`` over a workload's ``make(input_context, global_batch)``: repeated (steps per epoch
    bound each epoch), and checked to batch at the per-replica size, which a synchronous step needs on
    every worker. ``prefetch`` N > 0 adds ``ds.prefetch(N)`` after it (``--prefetch`` with a user's
    workload, whose own pipeline perfkit does not change)."""
    def build(ctx: Any) -> Any:
        ds = make(ctx, global_batch)
        check_batch(ds, ctx.get_per_replica_batch_size(global_batch), spec, what)
        ds = ds if _endless(ds) else ds.repeat()
        return ds.prefetch(prefetch) if prefetch else ds

    return keras().utils.experimental.DatasetCreator(build)


def _endless(ds: Any) -> bool:
    try:
        return int(ds.cardinality()) == int(tf().data.INFINITE_CARDINALITY)
    except Exception:  # noqa: BLE001 - in a graph the cardinality is a symbolic tensor: repeat to be safe
        return False


def check_batch(ds: Any, expected: int, spec: str, what: str) -> None:
    """A UsageError when ``ds``'s static batch size is not ``expected`` (an unknown size is not checked)."""
    t = tf()
    if not isinstance(ds, t.data.Dataset):
        raise UsageError(f"--workload {spec}: {what} returned a {type(ds).__name__}, not a tf.data.Dataset")
    first = t.nest.flatten(ds.element_spec)[0]
    shape = getattr(first, "shape", None)
    size = shape[0] if shape is not None and shape.rank else None
    if size is not None and int(size) != expected:
        raise UsageError(f"--workload {spec}: {what} gives batches of {int(size)}, expected the per-replica "
                         f"batch {expected} (input_context.get_per_replica_batch_size(global_batch))")


@contextmanager
def device_datasets_without_autotune() -> Iterator[bool]:
    """While inside, the strategy's per-device datasets get no tf.data autotuner.

    Every distributed dataset is read through a MultiDeviceIterator whose per-device datasets (a generator
    and a one-element prefetch: nothing to tune) carry TensorFlow's default options, autotune on, whatever
    ours say. Destroying their iterators at the end of ``fit`` joins the autotuner's thread, which sleeps up
    to a minute between passes: a 10-60 s tail at 0% CPU after the last epoch (py-spy:
    ``~RootDataset::Iterator`` -> ``~LogicalThreadWrapper``). No public option reaches those datasets
    (per-replica input would, but MultiWorkerMirroredStrategy refuses it), so the private factory is wrapped
    for the duration of ``fit``; if TensorFlow renames it, training runs as before and the tail is logged.
    Yields whether it applied. A launched script's fit gets it too (``trainer/worker/auto.py``).
    """
    from tensorflow.python.data.ops import multi_device_iterator_ops as mdi

    original = getattr(mdi, "_create_device_dataset", None)
    if original is None:
        log.warning("tf.data: no _create_device_dataset in this TensorFlow; fit may wait for tf.data's "
                    "autotuner thread after the last epoch")
        yield False
        return

    def device_dataset(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs).with_options(_without_autotune())

    mdi._create_device_dataset = device_dataset
    try:
        yield True
    finally:
        mdi._create_device_dataset = original
