"""The JSON renderer of an Analysis. The keys it writes, in order, and what each means are documented in
``json_keys`` (``KEYS``, re-exported here with ``keys_markdown`` for docs/analysis-json.md). Sections holding
tables are lists of row objects; a figure that was not measured is ``null``, never a made-up value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from json.encoder import encode_basestring_ascii as _string  # what json.dumps writes a str as
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
import pandas as pd

from perfkit.analysis.advice.words import view
from perfkit.analysis.renderers import RenderOptions
from perfkit.analysis.renderers.json_keys import FORMAT_VERSION, KEYS, TABLES, keys_markdown

__all__ = ["FORMAT_VERSION", "KEYS", "TABLES", "keys_markdown", "render", "to_dict"]

if TYPE_CHECKING:
    from perfkit.analysis.result import Analysis


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    if hasattr(value, "item"):  # numpy scalar
        return _clean(value.item())
    return value


def _rows(df: pd.DataFrame, section: str) -> list[dict[str, Any]]:
    if df.empty:
        return []
    cols = [c for c in KEYS[section] if c in df.columns]
    return [{k: _clean(v) for k, v in row.items()} for row in df[cols].to_dict("records")]


def to_dict(a: Analysis, skip: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every figure as JSON-ready Python; the tables named in ``skip`` are left None (``render`` writes them)."""
    from perfkit.results import utc_now

    out: dict[str, Any] = {"format": "perfkit-analysis", "version": FORMAT_VERSION, "generated": utc_now(),
                           "baseline": {"run_id": a.baseline_id, "chosen": a.baseline_note},
                           "verdict": list(a.verdict), "assumptions": list(a.assumptions)}
    for section in TABLES:
        out[section] = None if section in skip else _rows(_table(a, section), section)
    out["warnings"] = list(a.warnings)
    return out


def render(a: Analysis, out: TextIO, options: RenderOptions = RenderOptions()) -> None:
    """``json.dumps(to_dict(a), indent=2)``, byte for byte, with the tables written column by column: a
    million-row step timeline as row dicts took 20 s and 4 GB (bench analysis-speed), as columns 5 s."""
    fast = {s for s in TABLES if _plain(_table(a, s), s)}
    marks = {s: f"\x00perfkit-table-{s}" for s in fast}  # where each table goes in the general encoder's text
    doc = to_dict(a, skip=fast)
    text = json.dumps({k: marks.get(k, v) for k, v in doc.items()}, indent=2, allow_nan=False) + "\n"
    for section in TABLES:
        if section in marks:
            before, _, text = text.partition(json.dumps(marks[section]))
            out.write(before)
            for chunk in _table_text(_table(a, section), section):
                out.write(chunk)
    out.write(text)


_CHUNK = 20_000  # rows turned into text at a time: a million rows' text at once would double the memory


def _table(a: Analysis, section: str) -> pd.DataFrame:
    """A table as written: the advice with its words (the cause, the option as its flag, whether tried)."""
    table = getattr(a, section)
    return view(table) if section == "advice" else table


def _plain(df: pd.DataFrame, section: str) -> bool:
    """Whether every written cell is a number, bool, string or null (the general encoder spreads a list or
    a mapping over lines); an empty table is left to it too."""
    cols = [c for c in KEYS[section] if c in df.columns]
    if df.empty or not cols:
        return False
    kinds = [_kind(df[c].dtype) for c in cols]
    # over the values themselves: Series.map of a categorical column (a Slurm run's host) stays categorical,
    # which has no any()
    return all(k != "any" or not any(isinstance(_clean(v), (dict, list, tuple)) for v in df[c].tolist())
               for c, k in zip(cols, kinds))


def _kind(dtype: Any) -> str:
    if isinstance(dtype, np.dtype) and dtype.kind in "fiub":
        return {"f": "float", "i": "int", "u": "int", "b": "bool"}[dtype.kind]
    return "str" if isinstance(dtype, pd.StringDtype) else "any"


def _table_text(df: pd.DataFrame, section: str) -> Iterator[str]:
    """A table's list as ``json.dumps(..., indent=2)`` writes it as a value of the top-level object."""
    cols = [c for c in KEYS[section] if c in df.columns]
    row = "    {\n" + ",\n".join(f"      {json.dumps(c)}: %s" for c in cols) + "\n    }"  # keys hold no %
    kinds = [_kind(df[c].dtype) for c in cols]
    yield "["
    for start in range(0, len(df), _CHUNK):
        part = df.iloc[start:start + _CHUNK]
        cells = [_cells(part[c], k) for c, k in zip(cols, kinds)]
        yield ("," if start else "") + "\n" + ",\n".join(row % r for r in zip(*cells))
    yield "\n  ]"


_BOOL = {True: "true", False: "false"}


def _cells(col: pd.Series, kind: str) -> list[str]:
    """A column's values as the general encoder writes them after ``_clean`` (``map``: the loop runs in C)."""
    values = col.tolist()
    if kind == "int":
        return list(map(str, values))
    if kind == "bool":
        return list(map(_BOOL.__getitem__, values))
    if kind in ("float", "str"):
        write = repr if kind == "float" else _string
        known = np.isfinite(col.to_numpy()) if kind == "float" else col.notna().to_numpy()
        if known.all():
            return list(map(write, values))
        return [write(v) if k else "null" for v, k in zip(values, known)]
    return [json.dumps(_clean(v), allow_nan=False) for v in values]
