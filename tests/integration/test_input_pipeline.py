"""The per-worker input pipeline, built by hand the way the strategy builds it (no training)."""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from perfkit.workloads.pipeline import pipeline  # noqa: E402


def _rows(n: int) -> tuple[np.ndarray, np.ndarray]:
    # Row i holds the value i everywhere, so a batch says which rows it gathered.
    x = np.repeat(np.arange(n, dtype=np.float32)[:, None, None], 3, axis=1).repeat(2, axis=2)
    y = (np.arange(n) % 5 == 0).astype(np.int64)
    return x, y


def _context(pipelines: int, index: int) -> tf.distribute.InputContext:
    return tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=index,
                                      num_replicas_in_sync=pipelines)


def test_two_workers_read_disjoint_shards_that_cover_the_data_with_class_weights() -> None:
    x, y = _rows(40)
    make = pipeline(x, y, global_batch=8, seed=7, class_weight={0: 1.0, 1: 4.0})
    seen: list[set[int]] = []
    for index in range(2):
        ds = make(_context(2, index))
        rows: set[int] = set()
        for xb, yb, wb in ds.take(5):  # 5 batches of 4 = this worker's 20 rows, one pass
            assert xb.shape == (4, 3, 2)
            ids = xb.numpy()[:, 0, 0].astype(int)
            np.testing.assert_array_equal(yb.numpy()[:, 0], (ids % 5 == 0).astype(np.float32))
            np.testing.assert_array_equal(wb.numpy(), np.where(ids % 5 == 0, 4.0, 1.0))
            rows.update(ids.tolist())
        seen.append(rows)
    assert seen[0].isdisjoint(seen[1])
    assert seen[0] | seen[1] == set(range(40))


def test_the_autotuner_is_off_so_fit_does_not_wait_for_its_thread_at_the_end() -> None:
    x, y = _rows(16)
    ds = pipeline(x, y, global_batch=4, seed=None, class_weight=None)(_context(1, 0))
    assert ds.options().autotune.enabled is False
    assert sum(1 for _ in ds.take(3)) == 3


def _device_dataset_autotune(patched: bool) -> bool | None:
    from perfkit.workloads.pipeline import device_datasets_without_autotune

    x, y = _rows(16)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    make = pipeline(x, y, global_batch=4, seed=None, class_weight=None)
    with device_datasets_without_autotune() if patched else nullcontext():
        batches = iter(strategy.distribute_datasets_from_function(make))
    xb, _ = next(batches)
    assert xb.shape == (4, 3, 2)
    # TF internals on purpose: the datasets the workaround reaches are private to the MultiDeviceIterator.
    device_iterator = batches._iterators[0]._iterator._device_iterators[0]
    return device_iterator._dataset.options().autotune.enabled  # None: unset, TF's default (on)


def test_the_strategys_per_device_datasets_get_no_autotuner_only_inside_the_context() -> None:
    from tensorflow.python.data.ops import multi_device_iterator_ops as mdi

    original = mdi._create_device_dataset
    assert _device_dataset_autotune(patched=False) in (None, True)  # TF's default, which the tail came from
    assert _device_dataset_autotune(patched=True) is False
    assert mdi._create_device_dataset is original
