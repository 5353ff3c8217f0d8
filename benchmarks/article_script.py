"""The article's single-machine training script, in its own style (benchmark ``trainer``'s side A).

Kept as the article wrote it (seeds/000: "实操TF单机模式MirroredStrateg..."): ``get_strategy()`` returns a
plain MirroredStrategy, ``create_dataset(batch_size, num_workers, c_data)`` builds element-wise tf.data
pipelines (``from_tensor_slices`` -> ``shuffle`` -> ``batch`` -> ``repeat``, the TF tutorials' recipe of
the time; the article does not show its body), ``build_and_compile_cnn_model()`` the model, and
``model.fit(..., steps_per_epoch=..., shuffle=True, class_weight={1:4,0:1}, validation_data=...,
validation_steps=...)`` with TensorFlow's default threading.

Three deliberate departures, each so that only the training engine is compared:
- the data is perfkit's (``get_data`` reads the same cached, standardised table ``perfkit run`` uses)
  instead of the article's private CSV;
- the model is perfkit's ``build_model`` (identical layers, optimiser and metrics on both sides);
- ``verbose=0`` plus one epoch timer instead of the progress bar, which would time terminal output.
Keras is tf-keras (Keras 2) on both sides, as the article's TF 2.0 ``tf.keras`` was.

    python -m benchmarks.article_script --preset quick --cache-dir results/datasets
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

# Before TensorFlow is imported: the article's tf.keras was Keras 2; TF 2.21's tf.keras is Keras 3 unless
# this is set (perfkit sets it too, so both sides run the same Keras).
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from perfkit.config import PRESETS, get_preset  # noqa: E402
from perfkit.workloads.botdetector.params import SEQUENCE_LENGTH, BotParams  # noqa: E402

BUFFER_SIZE = 10000  # the TF distributed-training tutorials' shuffle buffer


def get_strategy() -> Any:
    """
    单机模式
    :return:
    """
    import tensorflow as tf
    strategy = tf.distribute.MirroredStrategy()
    return strategy


def get_data(preset: str, cache_dir: Path, train_players: int | None = None, test_players: int | None = None) -> Any:
    from perfkit.workloads.botdetector.data import prepare

    p = BotParams.for_preset(preset, train_players=train_players, test_players=test_players)
    return prepare(data_path=None, cache_dir=cache_dir, train_players=p.train_players,
                   test_players=p.test_players, seed=get_preset(preset).seed, sequence_length=p.sequence_length)


def clean_data(data: Any, sequence_length: int) -> tuple[Any, ...]:
    assert data.x_train.shape[1] == sequence_length
    return data.x_train, data.y_train.astype("float32"), data.x_test, data.y_test.astype("float32")


def create_dataset(batch_size: int, num_workers: int, c_data: tuple[Any, ...]) -> tuple[Any, Any, int, int]:
    import tensorflow as tf
    train_x, train_y, test_x, test_y = c_data
    global_batch_size = batch_size * num_workers
    train_datasets = tf.data.Dataset.from_tensor_slices((train_x, train_y)).shuffle(BUFFER_SIZE) \
        .batch(global_batch_size).repeat()
    test_datasets = tf.data.Dataset.from_tensor_slices((test_x, test_y)).batch(global_batch_size)
    steps_per_epoch_size = len(train_x) // global_batch_size
    test_steps = len(test_x) // global_batch_size
    return train_datasets, test_datasets, steps_per_epoch_size, test_steps


def build_and_compile_cnn_model() -> Any:
    from perfkit.workloads.botdetector.model import build_model
    return build_model(sequence_length, 18)


def main(argv: list[str] | None = None) -> int:
    global sequence_length
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=list(PRESETS), default="quick")
    p.add_argument("--cache-dir", type=Path, default=Path("results/datasets"))
    p.add_argument("--train-players", type=int, default=None, help="override the preset's (as perfkit run)")
    p.add_argument("--test-players", type=int, default=None, help="override the preset's (as perfkit run)")
    args = p.parse_args(argv)
    preset = get_preset(args.preset)

    epochs = preset.epochs  # 总轮次 (article: 5)
    batch_size = preset.batch_size  # 单次训练batch (article: 1024)
    num_workers = 1  # 机器个数
    sequence_length = SEQUENCE_LENGTH  # 样本时间步长 (article: 7)
    strategy = get_strategy()
    data = get_data(args.preset, args.cache_dir, args.train_players, args.test_players)
    c_data = clean_data(data, sequence_length)
    train_datasets, test_datasets, steps_per_epoch_size, test_steps = create_dataset(batch_size, num_workers, c_data)
    print("steps_per_epoch_size,test_steps:", steps_per_epoch_size, test_steps)
    with strategy.scope():
        model = build_and_compile_cnn_model()
    print('start fit model')
    from time import time

    from perfkit.trainer.worker.bare import emit, epoch_timer
    timer = epoch_timer()
    start = time()
    model.fit(train_datasets, epochs=epochs, steps_per_epoch=steps_per_epoch_size, shuffle=True,
              class_weight={1: 4, 0: 1}, validation_data=test_datasets, validation_steps=test_steps,
              callbacks=[timer], verbose=0)
    fit_s = time() - start
    print('Time: {:5.2f}s'.format(fit_s))
    emit({"script": "article_script", "preset": args.preset, "steps_per_epoch": steps_per_epoch_size,
          "batch_size": batch_size * num_workers, "params": int(model.count_params()), "fit_s": fit_s,
          "data": data.info["path"], "epochs": timer.epochs})
    return 0


sequence_length = 7

if __name__ == "__main__":
    raise SystemExit(main())
