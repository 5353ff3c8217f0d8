"""The analysis cache: a run's figures kept beside it, so that analysing the same run again reads a few small
tables instead of its step, CPU and trace tables (bench analysis-speed: 4 workers x 200k steps, 1M CPU
samples: the figures take seconds, reading them back a fraction of one).

``perfkit analyze`` turns it on (``enabled()``); a library call of ``analyze`` computes every time. What a
run's figures depend on is its key: every file of its directories (size and mtime), its parts' names, the
perfkit modules that compute figures (size and mtime) and the numpy, pandas and pyarrow versions. The
record, ``analysis_cache.json`` in the run's first directory, holds the key, the run's load problems and
warnings, its row of the runs table (JSON, numpy scalars tagged with their type) and, for each of its
tables, the stamp of ``analysis_cache/<table>.parquet`` and each column's dtype; columns Parquet cannot
keep exactly (object columns) are in the record itself. It is reused only when the key, every table's
stamp and every column's dtype match; a stale, damaged or unreadable record is ignored and written again,
never trusted. JSON and Parquet only: nothing is unpickled. Every file is written atomically, the record
last, and a run directory that cannot be written (a read-only copy) simply is not cached. A run still
``running`` is never cached: its files change under the analysis.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfkit._atomic import atomic_write
from perfkit.results import TRACE_CACHE_FILE, TRACE_OPS_FILE, TRACE_STEPS_FILE

log = logging.getLogger(__name__)

CACHE_FILE = "analysis_cache.json"
CACHE_DIR = "analysis_cache"  # one Parquet file per table
FORMAT = 1
# Written by the analysis itself (tracetables' cache) while the figures are computed: may change meanwhile.
_WRITTEN_BY_ANALYSIS = (TRACE_STEPS_FILE, TRACE_OPS_FILE, TRACE_CACHE_FILE)
_ON = contextvars.ContextVar("perfkit_analysis_cache", default=False)
_CODE = ("analysis", "profiler", "results.py", "cluster.py", "config.py", "workloads")  # what figures come from


@dataclass(frozen=True)
class Cached:
    """What the analysis needs of a run without reading its tables."""

    problems: tuple[str, ...]
    warnings: tuple[str, ...]
    no_trace: str
    row: dict[str, Any] | None = None  # its runs-table row; None: a run with problems, never analysed
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    merged: bool = True  # its meta is its parts' merged (False: the first part's, its tables unreadable)


@contextlib.contextmanager
def enabled() -> Iterator[None]:
    """Read and write the cache for the analyses inside (``perfkit analyze``)."""
    token = _ON.set(True)
    try:
        yield
    finally:
        _ON.reset(token)


def active() -> bool:
    return _ON.get()


def key(paths: Sequence[Path]) -> dict[str, Any]:
    """Everything a run's figures are computed from, JSON-native so that a reloaded key compares equal."""
    from importlib.metadata import version  # DuckDB's, without importing it for a cached analysis

    import pyarrow

    return {"format": FORMAT, "code": _code_stamp(), "libraries": [np.__version__, pd.__version__,
                                                                   pyarrow.__version__, version("duckdb")],
            "parts": {p.name: _files(p) for p in paths}}


def read(paths: Sequence[Path], want: dict[str, Any]) -> Cached | None:
    """The cached figures when they were made from exactly ``want``'s inputs, else None (compute again)."""
    home = paths[0]
    try:
        record = json.loads((home / CACHE_FILE).read_text(encoding="utf-8"))
        if not isinstance(record, dict) or record.get("key") != want:
            return None
        row = record["row"]
        tag = row["run_id"] if row is not None else None
        tables = {name: _read_table(home, name, spec, tag) for name, spec in record["tables"].items()}
        return Cached(tuple(record["problems"]), tuple(record["warnings"]), str(record["no_trace"]),
                      {k: _decode(v) for k, v in row.items()} if row is not None else None, tables,
                      bool(record["merged"]))
    except Exception as exc:  # noqa: BLE001 - any fault in a cache means only that it is not used
        log.debug("%s: analysis cache not used (%s: %s)", home, type(exc).__name__, exc)
        return None


def write(paths: Sequence[Path], before: dict[str, Any], status: str, cached: Cached) -> bool:
    """Store ``cached`` under the key its run's files have now, when they are what they were before the
    analysis read them (``before``); False when not stored (a running run, changed files, a refused write)."""
    if status == "running":
        return False
    now = key(paths)
    if _without_own(now) != _without_own(before):
        return False  # a file changed while it was read: these figures may be of neither version
    home = paths[0]
    try:
        tag = cached.row.get("run_id") if cached.row is not None else None
        specs = {name: _write_table(home, name, df, tag) for name, df in cached.tables.items()}
        row = {k: _encode(v) for k, v in cached.row.items()} if cached.row is not None else None
        text = json.dumps({"key": now, "problems": list(cached.problems), "warnings": list(cached.warnings),
                           "no_trace": cached.no_trace, "row": row, "tables": specs, "merged": cached.merged}) + "\n"
        atomic_write(home / CACHE_FILE, lambda fh: fh.write(text.encode("utf-8")))
    except (OSError, TypeError, ValueError) as exc:  # unwritable, or a value this cache cannot hold
        log.debug("%s: analysis cache not written (%s: %s)", home, type(exc).__name__, exc)
        return False
    return True


def _code_stamp() -> list[list[Any]]:
    root = Path(__file__).resolve().parents[1]
    files = sorted(p for name in _CODE for p in ([root / name] if name.endswith(".py") else
                                                   (root / name).rglob("*.py")))
    return [[str(p.relative_to(root)), *_stamp(p)] for p in files]


def _files(part: Path) -> dict[str, list[int]]:
    """Every file under a run directory (the cache's own left out): relative path -> [size, mtime_ns]."""
    out = {}
    for top, dirs, names in os.walk(part):
        rel = os.path.relpath(top, part)
        dirs[:] = sorted(d for d in dirs if not (rel == "." and d == CACHE_DIR))
        for name in names:
            if rel == "." and name == CACHE_FILE:
                continue
            out[name if rel == "." else f"{rel}/{name}"] = _stamp(Path(top) / name)
    return dict(sorted(out.items()))


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def _without_own(k: dict[str, Any]) -> dict[str, Any]:
    parts = {n: {f: s for f, s in files.items() if f not in _WRITTEN_BY_ANALYSIS} for n, files in k["parts"].items()}
    return {**k, "parts": parts}


def _arrow_kind(dtype: Any) -> bool:
    """Columns Parquet gives back with the same dtype and values: numbers, bools and pandas strings."""
    return (isinstance(dtype, np.dtype) and dtype.kind in "biuf") or isinstance(dtype, pd.StringDtype)


def _write_table(home: Path, name: str, df: pd.DataFrame, tag: str | None) -> dict[str, Any]:
    """Parquet: numbers, bools, strings and a category's codes; JSON: its categories and object columns
    (cell by cell, numpy scalars tagged). Anything else (a nullable integer, a date) is not cached. The
    ``run_id`` column every table ends with (``tag``) is added back when read, not stored a million times."""
    cols = list(df.columns)
    tagged = bool(cols) and cols[-1] == "run_id" and isinstance(df["run_id"].dtype, pd.StringDtype) and bool(
        (df["run_id"] == tag).all())
    if not all(isinstance(c, str) for c in cols) or len(set(cols)) != len(cols):
        raise TypeError(f"table {name}: column names that Parquet cannot keep")
    stored, objects, categories = {}, {}, {}
    for c in cols[:-1] if tagged else cols:
        col = df[c]
        if isinstance(col.dtype, pd.CategoricalDtype):
            cats = col.cat.categories
            categories[c] = {"values": [_encode(v) for v in cats.tolist()], "dtype": str(cats.dtype),
                             "ordered": bool(col.cat.ordered)}
            stored[c] = col.cat.codes.to_numpy()
        elif _arrow_kind(col.dtype):
            stored[c] = col.to_numpy() if isinstance(col.dtype, np.dtype) else col.array
        elif col.dtype == object:
            objects[c] = [_encode(v) for v in col.tolist()]
        else:
            raise TypeError(f"table {name}: column {c} of dtype {col.dtype}")
    path = home / CACHE_DIR / f"{name}.parquet"
    frame = pd.DataFrame(stored, index=pd.RangeIndex(len(df)))
    strings = [c for c in stored if not isinstance(df[c].dtype, np.dtype)]
    # Uncompressed, no statistics, numbers not dictionary-coded: a million-row table is read in 0.12 s
    # instead of 0.2 s and written in 0.13 s instead of 0.5 s (twice the bytes: a cache, not an archive).
    atomic_write(path, lambda fh: frame.to_parquet(fh, index=False, compression="none", use_dictionary=strings,
                                                   write_statistics=False))
    return {"stamp": _stamp(path), "rows": len(df), "columns": cols, "dtypes": [str(df[c].dtype) for c in cols],
            "objects": objects, "categories": categories, "tagged": tagged}


def _read_table(home: Path, name: str, spec: dict[str, Any], tag: str | None) -> pd.DataFrame:
    path = home / CACHE_DIR / f"{name}.parquet"
    if _stamp(path) != spec["stamp"]:
        raise ValueError(f"{path}: replaced since the cache was written")
    stored = pd.read_parquet(path)
    cols = {}
    for col, dtype in zip(spec["columns"], spec["dtypes"]):
        if spec["tagged"] and col == spec["columns"][-1]:
            cols[col] = pd.Series(tag, index=pd.RangeIndex(spec["rows"]), dtype=dtype)
        elif col in spec["objects"]:
            cols[col] = pd.Series([_decode(v) for v in spec["objects"][col]], dtype=object)
        elif col in spec["categories"]:
            c = spec["categories"][col]
            cats = pd.Index([_decode(v) for v in c["values"]], dtype=c["dtype"])
            cols[col] = pd.Series(pd.Categorical.from_codes(stored[col].to_numpy(), dtype=pd.CategoricalDtype(
                cats, ordered=c["ordered"])))
        else:
            cols[col] = stored[col]
        if str(cols[col].dtype) != dtype or len(cols[col]) != spec["rows"]:
            raise ValueError(f"{path}: column {col} read back as {cols[col].dtype}, not {dtype}")
    return pd.DataFrame(cols, index=pd.RangeIndex(spec["rows"]))


def _encode(value: Any) -> Any:
    """A cell or row value as JSON; a numpy scalar keeps its type. Lists, mappings and other objects raise
    (the run is then not cached)."""
    if isinstance(value, np.generic):
        return {"np": value.dtype.str, "v": _encode(value.item())}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    raise TypeError(f"{type(value).__name__} value in the figures")


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "np" in value:
        return np.dtype(value["np"]).type(_decode(value["v"]))
    if isinstance(value, dict) and "float" in value:
        return float(value["float"])
    return value
