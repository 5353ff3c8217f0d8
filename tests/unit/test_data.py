"""The synthetic generator and the data layer: determinism, validation errors, windowing, split, scaling."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from perfkit.errors import DataError, UsageError
from perfkit.workloads.botdetector import data
from perfkit.workloads.botdetector.data import (
    DAY_COL,
    FEATURES,
    ID_COL,
    LABEL_COL,
    Standardizer,
    Windows,
    dataset_cache_path,
    load_or_generate,
    load_table,
    prepare,
    split_by_player,
    window,
)
from perfkit.workloads.botdetector.synth import COUNT_FEATURES, SHARE_FEATURES, generate


@pytest.fixture(scope="module")
def big() -> pd.DataFrame:
    return generate(20_000, seed=7)


@pytest.fixture()
def small() -> pd.DataFrame:
    return generate(30, seed=3)


# --- generator ---------------------------------------------------------------------------------------------


def test_generate_is_deterministic_per_seed() -> None:
    a, b, c = generate(500, seed=1), generate(500, seed=1), generate(500, seed=2)
    pd.testing.assert_frame_equal(a, b)
    assert not a[list(FEATURES)].equals(c[list(FEATURES)])


def test_generate_schema_and_order(big: pd.DataFrame) -> None:
    assert list(big.columns) == [ID_COL, DAY_COL, *FEATURES, LABEL_COL]
    assert len(FEATURES) == 18 and len(set(FEATURES)) == 18
    assert len(big) == 20_000 * 7
    assert big[ID_COL].dtype == np.int64 and big[LABEL_COL].dtype == np.int8
    assert pd.api.types.is_integer_dtype(big[DAY_COL])
    assert (big[list(FEATURES)].dtypes == np.float32).all()
    assert big[DAY_COL].to_numpy().reshape(-1, 7).tolist()[0] == list(range(7))
    keys = big[ID_COL].to_numpy() * 7 + big[DAY_COL].to_numpy()
    assert (np.diff(keys) > 0).all()


def test_generate_values_are_plausible(big: pd.DataFrame) -> None:
    counts = big[list(COUNT_FEATURES)].to_numpy()
    shares = big[list(SHARE_FEATURES)].to_numpy()
    assert (counts >= 0).all() and (counts == np.round(counts)).all()
    assert ((shares >= 0) & (shares <= 1)).all()
    assert (big["online_minutes"] <= 1440).all()
    assert (big["dungeon_minutes"] <= big["online_minutes"]).all()


def test_generate_bot_share_and_label_noise(big: pd.DataFrame) -> None:
    labels = big[LABEL_COL].to_numpy().reshape(-1, 7)
    assert (labels == labels[:, :1]).all()
    share = labels[:, 0].mean()
    assert 0.18 <= share <= 0.22
    noisy = generate(20_000, seed=7, label_noise=0.0)[LABEL_COL].to_numpy()[::7]
    flipped = (noisy != labels[:, 0]).mean()
    assert 0.005 <= flipped <= 0.015  # about 1% of players flipped; features unchanged
    pd.testing.assert_frame_equal(generate(50, seed=7, label_noise=0.0).iloc[:, :-1], generate(50, seed=7).iloc[:, :-1])


@pytest.mark.parametrize("kwargs", [{"n_players": 0}, {"sequence_length": 0}, {"bot_share": 1.5},
                                    {"label_noise": -0.1}])
def test_generate_rejects_bad_parameters(kwargs: dict[str, float]) -> None:
    with pytest.raises(UsageError, match="generate"):
        generate(**{"n_players": 10, "seed": 1, **kwargs})


def test_bots_are_more_regular_than_humans(big: pd.DataFrame) -> None:
    w = window(big, 7)
    day_std = np.log1p(w.x[:, :, 1]).std(axis=1)  # online minutes
    assert np.median(day_std[w.y == 1]) < 0.5 * np.median(day_std[w.y == 0])


# --- load / validate ---------------------------------------------------------------------------------------


def _write(tmp_path: Path, df: pd.DataFrame, name: str = "t.csv") -> Path:
    path = tmp_path / name
    if name.endswith(".parquet"):
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("name", ["ok.csv", "ok.parquet"])
def test_load_table_round_trip(tmp_path: Path, small: pd.DataFrame, name: str) -> None:
    shuffled = small.sample(frac=1.0, random_state=0)
    loaded = load_table(_write(tmp_path, shuffled, name))
    pd.testing.assert_frame_equal(loaded, small, check_dtype=True)


def _drop_row(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(index=df.index[(df[ID_COL] == 4) & (df[DAY_COL] == 2)])


def _dup_row(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df.loc[(df[ID_COL] == 5) & (df[DAY_COL] == 3), DAY_COL] = 2
    return df


def _set(col: str, value: object, row: int = 10) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        df[col] = df[col].astype(str) if isinstance(value, str) else df[col].astype("float64")
        df.loc[row, col] = value
        return df

    return change


BAD_CASES: list[tuple[str, Callable[[pd.DataFrame], pd.DataFrame], list[str]]] = [
    ("missing-column", lambda df: df.drop(columns=["gold_spent", "chat_messages"]), ["gold_spent", "chat_messages"]),
    ("unknown-column", lambda df: df.assign(weather=1.0), ["unknown", "weather"]),
    ("non-numeric", _set("gold_earned", "lots"), ["gold_earned", "non-numeric", "lots"]),
    ("nan", _set("exp_gained", np.nan), ["exp_gained", "NaN"]),
    ("inf", _set("sessions", np.inf), ["sessions", "infinite"]),
    ("short-player", _drop_row, ["player 4", "6 day", "expected 7"]),
    ("day-range", _set(DAY_COL, 9, row=7 * 3 + 1), ["day", "0..6", "player 3"]),
    ("duplicate", _dup_row, ["duplicate", "player 5", "day 2"]),
    ("bad-label", _set(LABEL_COL, 3), ["label", "3"]),
    ("label-change", _set(LABEL_COL, 1, row=7 * 6 + 4), ["label", "player 6", "changes"]),
    ("empty", lambda df: df.iloc[:0], ["empty"]),
]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize(("case", "corrupt", "words"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_tables_raise_one_line_error_naming_the_problem(
    tmp_path: Path,
    case: str,
    corrupt: Callable[[pd.DataFrame], pd.DataFrame],
    words: list[str],
    suffix: str,
) -> None:
    df = generate(12, seed=1)
    if case == "label-change":
        df.loc[df[ID_COL] == 6, LABEL_COL] = 0
    path = _write(tmp_path, corrupt(df), f"{case}{suffix}")
    with pytest.raises(DataError) as info:
        load_table(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_unreadable_files(tmp_path: Path) -> None:
    cases = {
        tmp_path / "absent.csv": "not found",
        tmp_path / "table.json": ".parquet or .csv",
        tmp_path / "garbage.parquet": "cannot read as Parquet",
        tmp_path / "blank.csv": "empty",
        tmp_path: "unsupported",
    }
    (tmp_path / "table.json").write_text("{}")
    (tmp_path / "garbage.parquet").write_bytes(b"not parquet at all\n" * 10)
    (tmp_path / "blank.csv").write_text("")
    for path, words in cases.items():
        with pytest.raises(DataError) as info:
            load_table(path)
        assert str(info.value).startswith(str(path)) and words in str(info.value), str(info.value)
        assert "\n" not in str(info.value)


def test_other_sequence_length(tmp_path: Path) -> None:
    df = generate(10, seed=1, sequence_length=3)
    assert load_table(_write(tmp_path, df), sequence_length=3).shape == (30, 21)
    with pytest.raises(DataError, match="player 0 has 3 day"):
        load_table(_write(tmp_path, df, "b.csv"), sequence_length=4)


# --- window / split / standardise --------------------------------------------------------------------------


def test_window_round_trip(small: pd.DataFrame) -> None:
    w = window(small.sample(frac=1.0, random_state=1), 7)
    assert w.x.shape == (30, 7, 18) and w.x.dtype == np.float32
    assert w.y.shape == (30,) and w.player_ids.tolist() == list(range(30))
    back = w.x.reshape(-1, 18)
    np.testing.assert_array_equal(back, small[list(FEATURES)].to_numpy())
    np.testing.assert_array_equal(w.y, small[LABEL_COL].to_numpy()[::7])


def test_split_by_player(big: pd.DataFrame) -> None:
    w = window(big, 7)
    train, test = split_by_player(w, test_players=4_000, seed=5)
    assert len(test) == 4_000 and len(train) == 16_000
    assert not set(train.player_ids) & set(test.player_ids)
    assert abs(train.y.mean() - test.y.mean()) < 0.01
    again, _ = split_by_player(w, test_players=4_000, seed=5)
    np.testing.assert_array_equal(again.player_ids, train.player_ids)
    other, _ = split_by_player(w, test_players=4_000, seed=6)
    assert not np.array_equal(other.player_ids, train.player_ids)
    with pytest.raises(DataError, match="test split"):
        split_by_player(w, test_players=20_000, seed=5)


def test_standardizer_uses_train_statistics_only() -> None:
    rng = np.random.default_rng(0)
    x_train = rng.gamma(2.0, 50.0, (2000, 7, 18)).astype(np.float32)
    x_train[:, :, 5] = 3.0  # a constant feature must not divide by zero
    scaler = Standardizer.fit(x_train)
    z = scaler.transform(x_train)
    assert z.dtype == np.float32 and np.isfinite(z).all()
    np.testing.assert_allclose(z.reshape(-1, 18).mean(axis=0), 0, atol=1e-3)
    np.testing.assert_allclose(np.delete(z.reshape(-1, 18).std(axis=0), 5), 1, atol=1e-3)
    shifted = scaler.transform(x_train * 10)
    assert (shifted.reshape(-1, 18).mean(axis=0)[np.arange(18) != 5] > 1).all()
    np.testing.assert_allclose(scaler.mean[0], np.log1p(x_train[:, :, 0]).mean(), rtol=1e-4)


# --- cache / prepare ---------------------------------------------------------------------------------------


def test_load_or_generate_caches_atomically(tmp_path: Path) -> None:
    df, path, generated = load_or_generate(tmp_path / "cache", 40, seed=9, sequence_length=7)
    assert generated and path == dataset_cache_path(tmp_path / "cache", 40, 9, 7) and path.exists()
    assert path.name == "synth-v1-40p-7d-seed9.parquet"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind
    again, path2, generated2 = load_or_generate(tmp_path / "cache", 40, seed=9, sequence_length=7)
    assert not generated2 and path2 == path
    pd.testing.assert_frame_equal(again, df)


def test_interrupted_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(data.pq, "write_table", boom)
    with pytest.raises(KeyboardInterrupt):
        data.write_table(generate(5, seed=1), tmp_path / "x.parquet")
    assert list(tmp_path.iterdir()) == []


def test_prepare_generated(tmp_path: Path) -> None:
    p = prepare(data_path=None, cache_dir=tmp_path, train_players=400, test_players=100, seed=3, sequence_length=7)
    assert p.x_train.shape == (400, 7, 18) and p.x_test.shape == (100, 7, 18)
    assert p.x_train.dtype == np.float32 and p.y_train.shape == (400,)
    assert p.info["source"] == "generated" and p.info["players"] == 500 and p.info["seed"] == 3
    assert abs(p.info["train_bot_share"] - p.info["test_bot_share"]) < 0.02
    np.testing.assert_allclose(p.x_train.reshape(-1, 18).mean(axis=0), 0, atol=1e-4)
    again = prepare(data_path=None, cache_dir=tmp_path, train_players=400, test_players=100, seed=3, sequence_length=7)
    assert again.info["source"] == "cache"
    np.testing.assert_array_equal(again.x_test, p.x_test)


def test_prepare_from_file_keeps_the_test_share(tmp_path: Path) -> None:
    path = _write(tmp_path, generate(200, seed=4), "mine.parquet")
    p = prepare(
        data_path=str(path), cache_dir=tmp_path / "unused", train_players=3, test_players=1, seed=0, sequence_length=7
    )
    assert (len(p.y_train), len(p.y_test)) == (150, 50)
    assert p.info["source"] == "file" and p.info["path"] == str(path)
    assert not (tmp_path / "unused").exists()


def test_prepare_needs_two_players(tmp_path: Path) -> None:
    path = _write(tmp_path, generate(1, seed=4), "one.csv")
    with pytest.raises(DataError, match="too few"):
        prepare(data_path=str(path), cache_dir=tmp_path, train_players=4, test_players=1, seed=0, sequence_length=7)


def test_windows_take_is_consistent(small: pd.DataFrame) -> None:
    w = window(small, 7)
    sub = w.take(np.array([3, 1]))
    assert isinstance(sub, Windows) and sub.player_ids.tolist() == [3, 1]
    np.testing.assert_array_equal(sub.x[0], w.x[3])
