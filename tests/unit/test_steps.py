from __future__ import annotations

import math

from perfkit.profiler.steps import ClockAnchor, StepLog


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_000

    def __call__(self) -> int:
        self.t += 1_000_000  # 1 ms per reading
        return self.t


def test_steps_and_epochs_are_recorded_with_train_and_validation_split() -> None:
    log = StepLog(samples_per_step=256, clock=FakeClock())
    for epoch in range(2):
        log.epoch_begin(epoch)
        for step in range(3):
            log.step_begin()
            log.step_end(step)
        log.validation_begin()
        log.validation_end()
        log.epoch_end(epoch, {"loss": 0.5, "accuracy": 0.9, "val_accuracy": 0.8})
    steps, epochs = log.steps_frame(), log.epochs_frame()
    assert len(steps) == 6 and steps["samples"].eq(256).all()
    assert steps["duration_s"].tolist() == [0.001] * 6
    assert (steps["t_end_ns"] > steps["t_start_ns"]).all()
    assert epochs["epoch"].tolist() == [0, 1]
    # begin(1) + 3 steps x 2 readings -> last step ends 6 ms after the epoch began
    assert epochs["train_s"].tolist() == [0.006, 0.006] and epochs["val_s"].tolist() == [0.001, 0.001]
    assert epochs.loc[0, "accuracy"] == 0.9 and math.isnan(epochs.loc[0, "auc"])


def test_epoch_without_validation_has_zero_val_time() -> None:
    log = StepLog(8, clock=FakeClock())
    log.epoch_begin(0)
    log.step_begin()
    log.step_end(0)
    row = log.epoch_end(0, None)
    assert row["val_s"] == 0.0 and math.isnan(row["loss"])


def test_anchor_maps_monotonic_to_wall() -> None:
    a = ClockAnchor(wall_ns=1_700_000_000_000_000_000, mono_ns=500)
    assert a.to_wall_ns(1_500) == 1_700_000_000_000_001_000


def test_an_attempt_without_epochs_keeps_float_metrics_beside_earlier_ones(tmp_path) -> None:
    """A restarted attempt that died before an epoch ended has no epoch rows; joined to an earlier attempt's
    all-NaN metric (a model without AUC), the column must stay float NaN, not become null."""
    import pandas as pd

    from perfkit.results import write_parquet

    empty = StepLog(samples_per_step=8).epochs_frame()
    assert empty["val_auc"].dtype == "float64" and empty["train_s"].dtype == "float64"
    earlier = pd.DataFrame({"epoch": [0], "t_start_ns": [1], "t_end_ns": [2], "train_s": [1.0], "val_s": [0.1],
                            **{c: [float("nan")] for c in empty.columns if c.startswith(("val_", "loss", "acc",
                                                                                          "auc", "prec", "rec"))
                               and c != "val_s"}})
    write_parquet(tmp_path / "e.parquet", pd.concat([earlier, empty], ignore_index=True))
    back = pd.read_parquet(tmp_path / "e.parquet")
    assert back["val_auc"].dtype == "float64" and back["val_auc"].isna().all()
