"""The CPU tables' and the straggler figures' per-group arithmetic against pandas' own group-by, on
random tables (NaN, ties, groups of one, rows in any order): the faster paths must give pandas' answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfkit.analysis.groups import Groups, quantile


def _table(seed: int, rows: int = 5000, groups: int = 17) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    values = rng.gamma(2.0, 40.0, rows)
    values[rng.random(rows) < 0.02] = np.nan
    values[rng.random(rows) < 0.1] = 100.0  # ties
    key = rng.integers(0, groups, rows) * 1009 + 7  # sparse, unsorted keys
    key[:3] = -1  # a group of the launcher's few rows
    return pd.DataFrame({"key": key, "v": values, "n": rng.integers(0, 10**9, rows),
                         "s": [f"h{k % 3}" for k in key]})


@pytest.mark.parametrize("seed", range(5))
def test_group_figures_are_pandas_group_by_figures(seed: int) -> None:
    df = _table(seed)
    g = Groups.of(df["key"])
    ref = df.groupby("key", sort=True)
    assert list(g.keys) == list(ref.size().index)
    assert list(g.sizes) == list(ref.size())
    assert list(g.first(df["s"])) == list(ref["s"].first())
    assert list(g.max(df["n"])) == list(ref["n"].max())
    np.testing.assert_allclose(g.mean(df["v"]), ref["v"].mean().to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(g.sum(df["v"]), ref["v"].sum().to_numpy(), rtol=1e-12)
    for q in (0.0, 0.5, 0.95, 1.0):  # the same interpolation, so the same float, not merely close
        assert list(g.quantile(df["v"].to_numpy(), q)) == list(ref["v"].quantile(q).to_numpy())


def test_rows_of_a_group_keep_their_order_and_cover_the_table() -> None:
    df = _table(9, rows=300, groups=4)
    g = Groups.of(df["key"])
    seen = np.concatenate([g.rows(i) for i in range(len(g))])
    assert sorted(seen) == list(range(len(df)))
    for i in range(len(g)):
        assert (np.diff(g.rows(i)) > 0).all() and (df["key"].to_numpy()[g.rows(i)] == g.keys[i]).all()


def test_quantile_of_nothing_or_only_nan_is_nan() -> None:
    assert np.isnan(quantile(np.array([], dtype=float), 0.95))
    assert np.isnan(quantile(np.array([np.nan, np.nan]), 0.5))
    assert quantile(np.array([3, 1, 2]), 0.5) == 2.0


def test_straggler_figures_match_a_pandas_group_by_of_the_same_steps() -> None:
    """stragglers() reduces a (steps x workers) matrix; the reference is the group-by it replaced."""
    from perfkit.analysis.stragglers import STEP_KEY, StepBlocks, _finish, _full_steps

    rng = np.random.default_rng(3)
    workers, steps = 5, 400
    rows = pd.DataFrame({"worker": np.repeat(np.arange(workers), steps), "epoch": 1,
                         "step": np.tile(np.arange(steps), workers)})
    rows["step_s"] = rng.gamma(5, 0.02, len(rows))
    rows["busy_s"] = np.round(rows["step_s"] * rng.uniform(0.5, 0.9, len(rows)), 3)  # rounded: ties
    rows["collective_s"] = rows["step_s"] - rows["busy_s"]
    rows["input_s"] = np.where(rng.random(len(rows)) < 0.05, np.nan, 0.001)
    rows = rows.drop(index=rng.choice(len(rows), 30, replace=False))  # some steps miss a worker
    rows = rows.sample(frac=1.0, random_state=1).sort_values("worker", kind="stable")  # worker-major, steps shuffled
    split = _finish(rows.assign(collective_total_s=np.nan, overlap_s=np.nan), "trace", workers)
    df = split.steps

    full = rows.groupby("step")["worker"].transform("size") == workers
    assert len(df) == int(full.sum()) and len(df) % workers == 0
    assert (_full_steps(df, workers)).all()
    ref_transfer = df.groupby(STEP_KEY)["collective_s"].transform("min")
    np.testing.assert_array_equal(df["transfer_s"].to_numpy(), ref_transfer.to_numpy())

    blocks = StepBlocks.of(df, workers)
    by_step = df.groupby(STEP_KEY)
    np.testing.assert_array_equal(np.median(blocks.matrix(df["busy_s"]), axis=1), by_step["busy_s"].median())
    is_max = df["busy_s"] == by_step["busy_s"].transform("max")
    ref_slowest = df.loc[is_max, [STEP_KEY, "worker"]].drop_duplicates(STEP_KEY)["worker"].value_counts()

    from perfkit.analysis.stragglers import _worker_table

    busy = blocks.matrix(df["busy_s"])
    table = _worker_table(df, blocks, busy, float(np.median(busy.min(axis=1))), blocks.steps).set_index("worker")
    expected = (ref_slowest.reindex(table.index, fill_value=0) / blocks.steps).to_numpy()
    np.testing.assert_array_equal(table["straggler_share"].to_numpy(), expected)
