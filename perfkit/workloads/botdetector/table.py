"""A player table, read and validated: every problem with a user's file is a one-line ``DataError`` that
starts with the file's path, so the CLI can show it as is.

A table is long form: one row per (player, day) with ``player_id``, ``day`` (0..L-1), the 18 FEATURES and a
per-player ``label`` (1 = bot).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from perfkit.errors import DataError
from perfkit.workloads.botdetector.synth import FEATURES

ID_COL = "player_id"
DAY_COL = "day"
LABEL_COL = "label"
COLUMNS: tuple[str, ...] = (ID_COL, DAY_COL, *FEATURES, LABEL_COL)
SUFFIXES: tuple[str, ...] = (".parquet", ".csv")


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def check_suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise DataError(f"{path}: unsupported file type {path.suffix or '(none)'!r}; use {' or '.join(SUFFIXES)}")
    return suffix


def _read(path: Path) -> pd.DataFrame:
    suffix = check_suffix(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if path.is_dir():
        raise DataError(f"{path}: is a directory, not a data file")
    try:
        if suffix == ".parquet":
            # split_blocks + self_destruct: columns stay zero-copy views and the Arrow buffers are released
            # as they are converted, instead of holding the table twice.
            return pq.read_table(path).to_pandas(split_blocks=True, self_destruct=True)
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the table is empty (no header, no rows)") from None
    except Exception as exc:  # noqa: BLE001 - any reader failure means the file is unusable
        kind = "Parquet" if suffix == ".parquet" else "CSV"
        raise DataError(f"{path}: cannot read as {kind}: {one_line(exc)}") from None


def load_table(path: str | Path, sequence_length: int = 7) -> pd.DataFrame:
    """Read a ``.parquet`` or ``.csv`` player table and return it validated (see ``validate``)."""
    path = Path(path)
    raw = _read(path)
    try:
        return validate(raw, sequence_length, source=str(path))
    finally:
        del raw
        # Arrow's allocator keeps freed buffers for reuse; give the ~0.5 GB of a blog-size read back now.
        pa.default_memory_pool().release_unused()


def _check_columns(df: pd.DataFrame, source: str) -> None:
    names = [str(c) for c in df.columns]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise DataError(f"{source}: missing column(s): {', '.join(missing)}")
    unknown = [c for c in names if c not in COLUMNS]
    if unknown:
        raise DataError(f"{source}: unknown column(s): {', '.join(unknown)}; expected only {', '.join(COLUMNS)}")
    dups = sorted({c for c in names if names.count(c) > 1})
    if dups:
        raise DataError(f"{source}: duplicate column(s): {', '.join(dups)}")


Locate = Callable[[int], str]  # row position -> "row 12" or "player 3 day 5", for error messages


def _row(i: int) -> str:
    return f"data row {i}"


def _as_number(series: pd.Series, col: str, source: str, at: Locate) -> pd.Series:
    """The column itself when numeric (text that parses as numbers is accepted), else a DataError naming it."""
    if pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
        return series
    coerced = pd.to_numeric(series, errors="coerce")
    bad = (coerced.isna() & series.notna()).to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"{source}: column {col!r} has non-numeric values, e.g. {series.iloc[i]!r} at {at(i)}")
    return coerced


def _check_finite(values: np.ndarray, col: str, source: str, at: Locate) -> None:
    finite = np.isfinite(values)
    if not finite.all():
        i, bad = int(np.flatnonzero(~finite)[0]), int((~finite).sum())
        raise DataError(f"{source}: column {col!r} has {bad} NaN, infinite or out-of-range value(s), first at {at(i)}")


def _feature(df: pd.DataFrame, col: str, source: str, at: Locate) -> np.ndarray:
    # float32 straight away: a float64 copy of every column would double the memory of a big table, and a
    # value too large for float32 turns into inf here and is reported as out of range.
    with np.errstate(over="ignore", invalid="ignore"):
        values = _as_number(df[col], col, source, at).to_numpy(dtype=np.float32, na_value=np.nan)
    _check_finite(values, col, source, at)
    return values


def _whole(df: pd.DataFrame, col: str, source: str, at: Locate = _row) -> np.ndarray:
    """An id, day or label column as int64: numeric, finite and whole, or a DataError naming it."""
    series = _as_number(df[col], col, source, at)
    if pd.api.types.is_integer_dtype(series) and not series.hasnans:
        return series.to_numpy(dtype=np.int64)
    values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    _check_finite(values, col, source, at)
    fractional = values != np.round(values)
    if fractional.any():
        i = int(np.flatnonzero(fractional)[0])
        raise DataError(f"{source}: column {col!r} must hold whole numbers; {at(i)} has {float(values[i])}")
    return values.astype(np.int64)


def sorted_keys(ids: np.ndarray, days: np.ndarray) -> np.ndarray | None:
    """The permutation that sorts rows by (player, day), or None when they already are."""
    same = ids[1:] == ids[:-1]
    if (ids[1:] >= ids[:-1]).all() and (days[1:][same] > days[:-1][same]).all():
        return None
    return np.lexsort((days, ids))


def _check_structure(ids: np.ndarray, days: np.ndarray, labels: np.ndarray, length: int, source: str) -> None:
    """Rows sorted by (player, day): every player has days 0..L-1 exactly once and one label."""
    bad_day = (days < 0) | (days >= length)
    if bad_day.any():
        i = int(np.flatnonzero(bad_day)[0])
        raise DataError(
            f"{source}: day must lie in 0..{length - 1} (sequence length {length}); player {ids[i]} has day {days[i]}"
        )
    same = ids[1:] == ids[:-1]
    dup = same & (days[1:] == days[:-1])
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise DataError(f"{source}: duplicate rows for player {ids[i]} day {days[i]}")
    starts = np.flatnonzero(np.r_[True, ~same])
    counts = np.diff(np.r_[starts, ids.size])
    wrong = counts != length
    if wrong.any():
        k, total = int(np.flatnonzero(wrong)[0]), int(wrong.sum())
        raise DataError(
            f"{source}: player {ids[starts[k]]} has {counts[k]} day(s), expected {length} ({total} player(s) affected)"
        )
    bad = np.setdiff1d(np.unique(labels), [0, 1])
    if bad.size:
        shown = ", ".join(str(v) for v in bad[:5]) + (", ..." if bad.size > 5 else "")
        raise DataError(f"{source}: column {LABEL_COL!r} must be 0 (human) or 1 (bot); found {shown}")
    changes = same & (labels[1:] != labels[:-1])
    if changes.any():
        i = int(np.flatnonzero(changes)[0])
        raise DataError(f"{source}: the label of player {ids[i]} changes between days; it must be the same")


def validate(df: pd.DataFrame, sequence_length: int = 7, *, source: str = "<table>") -> pd.DataFrame:
    """Check a long-form table and return a clean copy: columns in COLUMNS order, sorted by (player, day),
    ids int64, day int32, features float32, label int8. Raises a one-line DataError starting with ``source``."""
    _check_columns(df, source)
    if len(df) == 0:
        raise DataError(f"{source}: the table is empty (no rows)")
    ids, days = _whole(df, ID_COL, source), _whole(df, DAY_COL, source)

    def at(i: int) -> str:
        return f"player {ids[i]} day {days[i]}"

    block = np.empty((len(FEATURES), len(df)), dtype=np.float32)
    for j, col in enumerate(FEATURES):
        block[j] = _feature(df, col, source, at)
    labels = _whole(df, LABEL_COL, source, at)
    order = sorted_keys(ids, days)
    if order is not None:
        ids, days, labels, block = ids[order], days[order], labels[order], block[:, order]
    _check_structure(ids, days, labels, sequence_length, source)
    out = pd.DataFrame(block.T, columns=list(FEATURES), copy=False)
    out.insert(0, ID_COL, ids)
    out.insert(1, DAY_COL, days.astype(np.int32))
    out[LABEL_COL] = labels.astype(np.int8)
    return out
