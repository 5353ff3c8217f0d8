"""The data layer: a player table (read and validated by ``table.py``) windowed, split by player,
standardised and cached; callers need only this module (``__all__``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from perfkit._atomic import atomic_write
from perfkit.errors import DataError
from perfkit.workloads.botdetector.synth import FEATURES, GENERATOR_VERSION, generate
from perfkit.workloads.botdetector.table import (  # noqa: F401
    COLUMNS,
    DAY_COL,
    ID_COL,
    LABEL_COL,
    SUFFIXES,
    check_suffix,
    load_table,
    one_line,
    sorted_keys,
    validate,
)

__all__ = [  # FEATURES is re-exported from synth so that callers need only this module
    "DAY_COL", "FEATURES", "ID_COL", "LABEL_COL", "PreparedData", "Standardizer", "Windows", "dataset_cache_path",
    "ensure_generated", "load_or_generate", "load_table", "prepare", "split_by_player", "validate", "window",
    "write_table",
]

@dataclass(frozen=True, eq=False)  # eq on arrays is ambiguous; compare fields with numpy
class Windows:
    """One sequence per player: ``x`` (N, L, F) float32, ``y`` (N,) int8, ``player_ids`` (N,) int64."""

    x: np.ndarray
    y: np.ndarray
    player_ids: np.ndarray

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def take(self, index: np.ndarray) -> Windows:
        return Windows(self.x[index], self.y[index], self.player_ids[index])


def window(df: pd.DataFrame, sequence_length: int) -> Windows:
    """Reshape a validated long table into per-player sequences (sort, then reshape; no per-player loop).

    For a table already sorted by (player, day), as ``validate`` returns it, ``x`` is a view of its memory.
    """
    if len(df) % sequence_length:
        raise DataError(f"window: {len(df)} rows is not a multiple of the sequence length {sequence_length}")
    ids = df[ID_COL].to_numpy()
    days = df[DAY_COL].to_numpy()
    order = sorted_keys(ids, days)
    n = len(df) // sequence_length
    if order is not None:
        ids, days = ids[order], days[order]
    if not (days.reshape(n, sequence_length) == np.arange(sequence_length)).all():
        raise DataError(f"window: every player needs days 0..{sequence_length - 1} exactly once; validate first")
    x = df[list(FEATURES)].to_numpy(dtype=np.float32)
    y = df[LABEL_COL].to_numpy()
    if order is not None:
        x, y = x[order], y[order]
    y = y.reshape(n, sequence_length)[:, 0].astype(np.int8)
    return Windows(x.reshape(n, sequence_length, len(FEATURES)), y, ids[::sequence_length].astype(np.int64))


def _per_class_counts(y: np.ndarray, test_players: int) -> dict[int, int]:
    """Largest-remainder apportionment of the test size over the classes, proportional to their sizes."""
    classes, sizes = np.unique(y, return_counts=True)
    quota = sizes * test_players / y.size
    take = np.floor(quota).astype(np.int64)
    short = test_players - int(take.sum())
    take[np.argsort(-(quota - take), kind="stable")[:short]] += 1
    return {int(c): int(t) for c, t in zip(classes, take)}


def split_by_player(w: Windows, test_players: int, seed: int) -> tuple[Windows, Windows]:
    """Stratified (by label) split into (train, test) with exactly ``test_players`` players in test."""
    n = len(w)
    if not 1 <= test_players < n:
        raise DataError(f"cannot put {test_players} player(s) in the test split of {n}: need 1..{n - 1}")
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.random(n), w.y))  # random order within each class
    in_test = np.zeros(n, dtype=bool)
    start = 0
    for label, k in _per_class_counts(w.y, test_players).items():  # two classes, not players
        in_test[order[start : start + k]] = True
        start += int((w.y == label).sum())
    return w.take(np.flatnonzero(~in_test)), w.take(np.flatnonzero(in_test))


def signed_log1p(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """sign(x) * log1p(|x|) as float32: tames heavy-tailed counts (gold, exp) yet keeps zero at zero.

    Computed as log(1 + |x|): numpy's float32 log is vectorised and ~3x faster than its log1p, and the
    absolute error (< 1e-7 near zero) is irrelevant after standardisation.
    """
    if out is None:
        out = np.abs(x).astype(np.float32)
    else:
        np.abs(x, out=out)
    out += np.float32(1.0)
    np.log(out, out=out)
    return np.copysign(out, x, out=out)


@dataclass(frozen=True, eq=False)
class Standardizer:
    """Per-feature mean and std of signed log1p values, fitted on the training split only."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, x_train: np.ndarray, chunk: int = 1 << 16) -> Standardizer:
        feats = x_train.shape[-1]
        flat = x_train.reshape(-1, feats)
        total, sq = np.zeros(feats), np.zeros(feats)
        for i in range(0, flat.shape[0], chunk):  # chunks keep the float64 temporaries small
            part = signed_log1p(flat[i : i + chunk]).astype(np.float64)
            total += part.sum(axis=0)
            sq += np.square(part).sum(axis=0)
        count = max(flat.shape[0], 1)
        mean = total / count
        std = np.sqrt(np.maximum(sq / count - mean**2, 0.0))
        std = np.where(std < 1e-6, 1.0, std)  # a constant feature stays at zero instead of dividing by 0
        return cls(mean=mean.astype(np.float32), std=std.astype(np.float32))

    def transform(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Standardised float32 copy of ``x`` (N, L, F); ``out=x`` works in place on a float32 array."""
        out = signed_log1p(x, out)
        out -= self.mean
        out /= self.std
        return out

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {name: {"mean": float(m), "std": float(s)} for name, m, s in zip(FEATURES, self.mean, self.std)}


@dataclass(frozen=True, eq=False)
class PreparedData:
    """Standardised model inputs: x (N, L, F) float32, y (N,) int8; ``info`` goes into run.json."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    standardizer: Standardizer
    info: dict[str, Any] = field(default_factory=dict)


def dataset_cache_path(cache_dir: Path, n_players: int, seed: int, sequence_length: int) -> Path:
    # The generator's version is in the name so that a retuned generator never reuses an old cache.
    name = f"synth-v{GENERATOR_VERSION}-{n_players}p-{sequence_length}d-seed{seed}.parquet"
    return Path(cache_dir) / name


def _write_parquet(df: pd.DataFrame, fh: Any) -> None:
    # Column by column straight from numpy (zero-copy) and no dictionary encoding except for the tiny
    # columns: on the blog size this halves the write time for a file ~30% larger.
    table = pa.Table.from_arrays([pa.array(df[c].to_numpy()) for c in df.columns], names=[str(c) for c in df.columns])
    small = [str(c) for c in df.columns if c in (DAY_COL, LABEL_COL)]
    pq.write_table(table, fh, compression="snappy", use_dictionary=small)


def write_table(df: pd.DataFrame, path: str | Path) -> Path:
    """Write ``.parquet`` or ``.csv`` atomically: a temp file beside it, then ``os.replace``, so an
    interrupted write never leaves a half file under the final name."""
    path = Path(path)
    suffix = check_suffix(path)
    try:
        atomic_write(path, (lambda fh: _write_parquet(df, fh)) if suffix == ".parquet"
                     else (lambda fh: df.to_csv(fh, index=False)))
    except OSError as exc:
        raise DataError(f"{path}: cannot write: {one_line(exc)}") from None
    return path


def load_or_generate(
    cache_dir: Path, n_players: int, seed: int, sequence_length: int
) -> tuple[pd.DataFrame, Path, bool]:
    """The cached synthetic table for these parameters, generating and caching it on first use."""
    path = dataset_cache_path(cache_dir, n_players, seed, sequence_length)
    if path.exists():
        return load_table(path, sequence_length), path, False
    df = generate(n_players, seed, sequence_length)
    write_table(df, path)
    return df, path, True


def ensure_generated(cache_dir: Path, n_players: int, seed: int, sequence_length: int) -> tuple[Path, bool]:
    """The cached synthetic table's path, generating it first if absent (nothing is read when cached)."""
    path = dataset_cache_path(cache_dir, n_players, seed, sequence_length)
    if path.exists():
        return path, False
    write_table(generate(n_players, seed, sequence_length), path)
    return path, True


def _bot_share(y: np.ndarray) -> float:
    return round(float(y.mean()), 6) if y.size else 0.0


def prepare(*, data_path: str | None, cache_dir: Path, train_players: int, test_players: int, seed: int,
            sequence_length: int) -> PreparedData:
    """Load the user's table (or the cached synthetic one), window, split by player and standardise.

    With ``data_path`` the test share is test/(train+test) of that file's players; otherwise exactly
    ``train_players + test_players`` synthetic players are generated (or reused) and split exactly.
    """
    if data_path is not None:
        df, path, source = load_table(data_path, sequence_length), Path(data_path), "file"
    else:
        df, path, generated = load_or_generate(cache_dir, train_players + test_players, seed, sequence_length)
        source = "generated" if generated else "cache"
    windows = window(df, sequence_length)
    del df  # only the windows (often a view of its memory) are needed from here on
    n = len(windows)
    k = test_players
    if data_path is not None:
        if n < 2:
            raise DataError(f"{path}: {n} player is too few to split into train and test")
        k = min(max(round(n * test_players / (train_players + test_players)), 1), n - 1)
    train, test = split_by_player(windows, k, seed)
    del windows  # the splits are copies
    scaler = Standardizer.fit(train.x)
    info = {
        "path": str(path), "source": source, "generated": source == "generated", "seed": seed,
        "players": n, "train_players": len(train), "test_players": len(test),
        "train_bot_share": _bot_share(train.y), "test_bot_share": _bot_share(test.y),
        "sequence_length": sequence_length, "features": list(FEATURES),
    }
    # In place: train.x and test.x are copies this function owns, and the blog size is 450 MB of them.
    x_train = scaler.transform(train.x, out=train.x)
    x_test = scaler.transform(test.x, out=test.x)
    return PreparedData(x_train, train.y, x_test, test.y, scaler, info)
